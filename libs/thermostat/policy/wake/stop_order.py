"""Which stops a wake answers to: ordered by when each was *issued*, not by when its record landed.

A stop (manual, idle, boot-grace, runtime-cap) and a wake of the same pod are ordered by the database: both
take the pod's order lock and stamp themselves with the clock under it, so "issued before the wake was
requested" means the same on every replica. Rules, first match wins:

    1 a stop issued after the wake was requested, accepted for  Halt: a stop accepted during a wake is never
      some pod                                                 undone by a start or a replacement
    2 any stop still in flight (not settled, not yet past its  Wait: a stop issued before the wake is let
      settle bound), issued before or after the wake           land, so the wake observes the stopped pod
                                                               and starts it (the idle boundary: a user
                                                               back just as the idle stop fires gets a
                                                               pod, not a pod that goes down a moment
                                                               later); one issued during the wake may yet
                                                               be accepted, so rule 1 is waited for
    3 a stop issued after the wake was requested whose         Halt: its replica died mid-stop; it may have
      outcome never settled (past the settle bound)            been accepted, and it is not undone blind
    4 otherwise                                                Proceed: a stop issued before the wake
                                                               (settled, or lost) does not stop the wake

Nothing here reads a clock: `now` is the database's, read with the stops.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum


@dataclass(frozen=True, slots=True, kw_only=True)
class StopEntry:
    """StopEntry is one stop of the pod: when it was issued, whether it settled, which pods RunPod accepted."""

    issued_at: datetime
    trigger: str
    settled: bool
    accepted_pod_ids: tuple[str, ...] = ()


class StopVerdict(StrEnum):
    PROCEED = "Proceed"
    WAIT = "Wait"
    HALT = "Halt"


@dataclass(frozen=True, slots=True, kw_only=True)
class StopDecision:
    verdict: StopVerdict
    reason: str = ""


def judge_stops(
    *, requested_at: datetime, stops: Sequence[StopEntry], now: datetime, settle_seconds: float
) -> StopDecision:
    """What the wake requested at `requested_at` does about the pod's recent stops (see the module's rules)."""
    during = sorted((s for s in stops if s.issued_at > requested_at), key=lambda s: s.issued_at)
    for stop in during:
        if stop.settled and stop.accepted_pod_ids:
            return StopDecision(
                verdict=StopVerdict.HALT,
                reason=(
                    f"pod {', '.join(stop.accepted_pod_ids)} was stopped ({stop.trigger}) during the wake; "
                    "not starting or replacing it"
                ),
            )
    bound = timedelta(seconds=settle_seconds)
    in_flight = [s for s in stops if not s.settled and now - s.issued_at < bound]
    if in_flight:
        first = min(in_flight, key=lambda s: s.issued_at)
        when = "before" if first.issued_at <= requested_at else "during"
        return StopDecision(
            verdict=StopVerdict.WAIT, reason=f"a {first.trigger} stop issued {when} the wake is in flight"
        )
    for stop in during:
        if not stop.settled:
            return StopDecision(
                verdict=StopVerdict.HALT,
                reason=(
                    f"a {stop.trigger} stop issued during the wake never settled (its replica stopped); not "
                    "starting or replacing a pod it may have stopped"
                ),
            )
    return StopDecision(verdict=StopVerdict.PROCEED)
