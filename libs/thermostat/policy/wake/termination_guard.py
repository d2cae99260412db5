"""When a stale pod may be terminated (pod-control seed: Wake part 1c, TerminationGuard.MayTerminate).

Terminate is irreversible, so every condition must hold, checked in this order:

    both ids non-blank                          else BlankId
    stale id != replacement id (trimmed, case-folded)
                                                else SamePod — never the replacement itself: both sit on our
                                                volume, so the volume check alone can't tell them apart
    stale volume exactly our (non-blank) volume else ForeignVolume
    replacement RUNNING                         else ReplacementNotRunning — only once something serves
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from thermostat.policy.common.pod_model import PodStatus


class TerminationRefusal(StrEnum):
    BLANK_ID = "BlankId"
    SAME_POD = "SamePod"
    FOREIGN_VOLUME = "ForeignVolume"
    REPLACEMENT_NOT_RUNNING = "ReplacementNotRunning"


@dataclass(frozen=True, slots=True, kw_only=True)
class TerminationDecision:
    refusal: TerminationRefusal | None

    @property
    def allowed(self) -> bool:
        return self.refusal is None


def check_termination(
    *,
    stale_id: str,
    replacement_id: str,
    stale_volume: str | None,
    our_volume: str,
    replacement_status: PodStatus,
) -> TerminationDecision:
    """Allow terminating `stale_id` only when the table above holds; otherwise name the first refusal."""
    stale, replacement = stale_id.strip(), replacement_id.strip()
    if not stale or not replacement:
        return TerminationDecision(refusal=TerminationRefusal.BLANK_ID)
    if stale.casefold() == replacement.casefold():
        return TerminationDecision(refusal=TerminationRefusal.SAME_POD)
    if not our_volume.strip() or stale_volume != our_volume:
        return TerminationDecision(refusal=TerminationRefusal.FOREIGN_VOLUME)
    if replacement_status is not PodStatus.RUNNING:
        return TerminationDecision(refusal=TerminationRefusal.REPLACEMENT_NOT_RUNNING)
    return TerminationDecision(refusal=None)


def may_terminate(
    *,
    stale_id: str,
    replacement_id: str,
    stale_volume: str | None,
    our_volume: str,
    replacement_status: PodStatus,
) -> bool:
    """The single yes/no entry point; `check_termination` says why not."""
    return check_termination(
        stale_id=stale_id,
        replacement_id=replacement_id,
        stale_volume=stale_volume,
        our_volume=our_volume,
        replacement_status=replacement_status,
    ).allowed
