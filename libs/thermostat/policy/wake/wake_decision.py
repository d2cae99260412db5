"""What one observed pod asks the wake to do next (pod-control seed: Wake part 1c, WakePolicy.Decide).

    lookup      status                         start this wake   action
    UNREADABLE  —                              —                 WaitAndRepoll      a failed GET is never "no pod"
    NOT_FOUND   —                              —                 CreateReplacement  (the round re-confirms it first)
    FOUND       RUNNING, >= 1 GPU              —                 Done
    FOUND       EXITED / ERROR                 no                StartExisting
    FOUND       EXITED / ERROR                 yes               CreateReplacement  the start did not take
    FOUND       RUNNING, 0 GPUs                —                 CreateReplacement  running but cannot serve
    FOUND       TERMINATED                     —                 CreateReplacement
    FOUND       PROVISIONING / STARTING / UNKNOWN  —             WaitAndRepoll      never spawn a second pod on an
                                                                                    in-flight start or an API blip

rig-conductor#1998: an unreadable answer that collapsed to "no pod" billed a second pod next to a live one, so
only an affirmative NOT_FOUND may lead to a create.
"""

from __future__ import annotations

from enum import StrEnum

from thermostat.policy.common.pod_model import Lookup, PodObservation, PodStatus


class WakeAction(StrEnum):
    """WakeAction is what the wake does about one pod."""

    DONE = "Done"
    START_EXISTING = "StartExisting"
    CREATE_REPLACEMENT = "CreateReplacement"
    WAIT_AND_REPOLL = "WaitAndRepoll"


def decide(observation: PodObservation) -> WakeAction:
    """Decide one pod by the table above."""
    if observation.lookup is Lookup.UNREADABLE:
        return WakeAction.WAIT_AND_REPOLL
    if observation.lookup is Lookup.NOT_FOUND:
        return WakeAction.CREATE_REPLACEMENT
    match observation.status:
        case PodStatus.RUNNING:
            return WakeAction.DONE if observation.gpu_count >= 1 else WakeAction.CREATE_REPLACEMENT
        case PodStatus.EXITED | PodStatus.ERROR:
            return WakeAction.CREATE_REPLACEMENT if observation.start_attempted else WakeAction.START_EXISTING
        case PodStatus.TERMINATED:
            return WakeAction.CREATE_REPLACEMENT
        case PodStatus.PROVISIONING | PodStatus.STARTING | PodStatus.UNKNOWN:
            return WakeAction.WAIT_AND_REPOLL
