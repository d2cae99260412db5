"""One decision per wake round over every pod on our volume (pod-control seed: Wake steps 1–3, RunPodWakeService).

A stale pod and its replacement coexist after a Waiting wake, and GET /v2/pods lists them in no particular
order, so the wake decides over all of them at once. Each pod is first decided alone (wake_decision.decide);
the round then takes the first rule that matches:

    1 a pod is Done                  Done: the first Done pod serves (AlreadyRunning, or Started when this
                                     wake started it); every sibling is stale → terminate step
    2 any pod WaitAndRepoll          Repoll: never start or create while any pod is in flight or unreadable —
                                     that is how a Waiting wake followed by a re-wake stacked a third pod
    3 any observe NOT_FOUND,         ConfirmAbsence: re-read the volume (after_volume_lookup) before any
      or no pod at all               write. An observe 404 on a remembered id is never a create trigger by
                                     itself: a permission-scoped key or a misrouted 404 would bill a second
                                     pod next to a live one
    4 some pod StartExisting         Start the first such pod in list order, then repoll. Starting two would
                                     bill two; once one serves, the others are stale. A pod whose start did
                                     not take says CreateReplacement, so an untried sibling is started next
    5 every pod CreateReplacement    CreateReplacement with all of them stale

The volume lookup (step 1, and rule 3's re-confirmation) is the only affirmative absence: Unreadable fails
with zero writes, Found drives that list, and only an empty readable list leads to a create.

The new pod after a create is polled alone (decide_new_pod): Done → terminate step; in flight, unreadable or
not yet listed → repoll; anything else is Failed "… not retrying" — nothing is in flight, so it is not
Waiting, and a second create walk would only bill again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from thermostat.policy.common.pod_model import Lookup, PodObservation, VolumeLookup
from thermostat.policy.wake.wake_decision import WakeAction, decide
from thermostat.policy.wake.wake_result import WakeOutcome


class RoundVerdict(StrEnum):
    DONE = "Done"
    REPOLL = "Repoll"
    CONFIRM_ABSENCE = "ConfirmAbsence"
    START = "Start"
    CREATE_REPLACEMENT = "CreateReplacement"


@dataclass(frozen=True, slots=True, kw_only=True)
class RoundDecision:
    """RoundDecision: `pod_id` is the serving pod (Done) or the pod to start (Start).

    `outcome` is set only for Done; `stale_pod_ids` lists every sibling (Done) or every pod (CreateReplacement).
    """

    verdict: RoundVerdict
    reason: str
    pod_id: str | None = None
    outcome: WakeOutcome | None = None
    stale_pod_ids: tuple[str, ...] = ()


def decide_round(observations: Sequence[PodObservation]) -> RoundDecision:
    """Decide one round over every pod on the volume, in list order, by the rules above."""
    actions = [(o, decide(o)) for o in observations]
    for serving, action in actions:
        if action is WakeAction.DONE:
            outcome = WakeOutcome.STARTED if serving.start_attempted else WakeOutcome.ALREADY_RUNNING
            return RoundDecision(
                verdict=RoundVerdict.DONE,
                pod_id=serving.pod_id,
                outcome=outcome,
                stale_pod_ids=tuple(o.pod_id for o in observations if o.pod_id != serving.pod_id),
                reason=f"{serving.pod_id} is running with a GPU",
            )
    waiting = [o.pod_id for o, action in actions if action is WakeAction.WAIT_AND_REPOLL]
    if waiting:
        return RoundDecision(
            verdict=RoundVerdict.REPOLL,
            reason=f"in flight or unreadable: {', '.join(waiting)}",
        )
    gone = [o.pod_id for o in observations if o.lookup is Lookup.NOT_FOUND]
    if gone or not observations:
        return RoundDecision(
            verdict=RoundVerdict.CONFIRM_ABSENCE,
            reason=f"not found: {', '.join(gone)}; re-reading the volume" if gone else "no pod to observe",
        )
    for stopped, action in actions:
        if action is WakeAction.START_EXISTING:
            return RoundDecision(
                verdict=RoundVerdict.START,
                pod_id=stopped.pod_id,
                reason=f"{stopped.pod_id} is {stopped.status}; starting it",
            )
    return RoundDecision(
        verdict=RoundVerdict.CREATE_REPLACEMENT,
        stale_pod_ids=tuple(o.pod_id for o in observations),
        reason="no pod on the volume can serve: "
        + ", ".join(f"{o.pod_id} {o.status}/{o.gpu_count} GPU" for o in observations),
    )


class VolumeVerdict(StrEnum):
    FAILED = "Failed"
    DRIVE = "Drive"
    CREATE = "Create"


@dataclass(frozen=True, slots=True, kw_only=True)
class VolumeDecision:
    """VolumeDecision: `pod_ids` are the pods to drive (Drive only)."""

    verdict: VolumeVerdict
    reason: str
    pod_ids: tuple[str, ...] = ()


def after_volume_lookup(volume: VolumeLookup) -> VolumeDecision:
    """Step 1 and the re-confirmation of rule 3: what the volume list allows.

    An answer that contradicts itself (Found but empty, NotFound with ids) is treated like Unreadable: the
    create gate opens only on an affirmative, consistent "no pod".
    """
    if volume.lookup is Lookup.FOUND and volume.pod_ids:
        return VolumeDecision(
            verdict=VolumeVerdict.DRIVE,
            pod_ids=volume.pod_ids,
            reason=f"{len(volume.pod_ids)} pod(s) on the volume",
        )
    if volume.lookup is Lookup.NOT_FOUND and not volume.pod_ids:
        return VolumeDecision(verdict=VolumeVerdict.CREATE, reason="no pod on the volume")
    if volume.lookup is Lookup.UNREADABLE:
        return VolumeDecision(
            verdict=VolumeVerdict.FAILED,
            reason="volume lookup unreadable; nothing started or created",
        )
    return VolumeDecision(
        verdict=VolumeVerdict.FAILED,
        reason=f"volume lookup {volume.lookup} with {len(volume.pod_ids)} pod(s) is inconsistent; "
        "nothing started or created",
    )


class NewPodVerdict(StrEnum):
    SERVING = "Serving"
    REPOLL = "Repoll"
    FAILED = "Failed"


@dataclass(frozen=True, slots=True, kw_only=True)
class NewPodDecision:
    verdict: NewPodVerdict
    reason: str


def decide_new_pod(observation: PodObservation) -> NewPodDecision:
    """Poll the pod this wake created: serve, wait, or give up without a second create walk."""
    if observation.lookup is Lookup.NOT_FOUND:
        return NewPodDecision(verdict=NewPodVerdict.REPOLL, reason=f"{observation.pod_id} not listed yet")
    action = decide(observation)
    if action is WakeAction.DONE:
        return NewPodDecision(verdict=NewPodVerdict.SERVING, reason=f"{observation.pod_id} is running")
    if action is WakeAction.WAIT_AND_REPOLL:
        return NewPodDecision(verdict=NewPodVerdict.REPOLL, reason=f"{observation.pod_id} is in flight")
    return NewPodDecision(
        verdict=NewPodVerdict.FAILED,
        reason=f"new pod {observation.pod_id} is {observation.status} with {observation.gpu_count} GPU(s); "
        "not retrying",
    )
