"""What one tick says about each pod on the volume, and about the volume as a whole (rig-conductor#1998).

Per pod, /metrics decides when vLLM answered (busy or idle, see `activity`); otherwise the control plane:

    observation                               signal                   baseline
    ----------------------------------------  -----------------------  -------------------------------
    /metrics answered                         BUSY / IDLE              this scrape's counter
    RUNNING                                   UNREACHABLE_BUT_RUNNING  kept (a blip must not re-seed)
    PROVISIONING / STARTING                   BOOTING                  dropped (a new process)
    EXITED / ERROR / TERMINATED               NOT_RUNNING              dropped (the process ended)
    UNKNOWN status, Unreadable, NotFound,     UNKNOWN                  kept (nothing is confirmed)
    or not observed

UNREACHABLE_BUT_RUNNING is the fix for a running pod with a dead vLLM billing forever: it is billed, so it
accrues toward a stop like idle. The baseline is kept across an unreachable tick because a baseline tick is
non-idle — dropping it on every blip would make a flapping /metrics alternate seed/idle and never stop — and
dropped once the process behind the id is known to have ended, because RunPod reuses a pod id across
stop/start and the new process's counter starts from zero (0 vs a stale 0 reads idle: Ready with
IdleStreak 1, the #2075 bug re-entering through the lifecycle).

Across the volume: Busy > Idle = UnreachableButRunning > Booting > Unknown > NotRunning, named by the first
pod (in volume-list order) that produced it, so a busy pod anywhere wins and a sibling's idle never stops
it. GET /v2/pods order is unspecified; evaluating only the first pod would, with a dead stale pod listed
first, read NotRunning on every tick and never scrape the replacement that is billing. A volume lookup that
is NotFound is NotRunning; one that is Unreadable is Unknown, never "nothing to stop".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from thermostat.policy.common.pod_model import Lookup, PodObservation, PodStatus, VolumeLookup
from thermostat.policy.idle.activity import ActivityReason, classify_activity
from thermostat.policy.idle.vllm_metrics import PodActivity


class PodSignal(StrEnum):
    """PodSignal is what one tick says about a pod (or, aggregated, about the volume)."""

    BUSY = "BUSY"
    IDLE = "IDLE"
    UNREACHABLE_BUT_RUNNING = "UNREACHABLE_BUT_RUNNING"
    BOOTING = "BOOTING"
    NOT_RUNNING = "NOT_RUNNING"
    UNKNOWN = "UNKNOWN"

    @property
    def priority(self) -> int:
        return _PRIORITY[self]

    @property
    def is_up(self) -> bool:
        """Positively observed allocating, starting or running — billed, or about to be."""
        return self in UP_SIGNALS


_PRIORITY = {
    PodSignal.BUSY: 4,
    PodSignal.IDLE: 3,
    PodSignal.UNREACHABLE_BUT_RUNNING: 3,
    PodSignal.BOOTING: 2,
    PodSignal.UNKNOWN: 1,
    PodSignal.NOT_RUNNING: 0,
}
UP_SIGNALS = frozenset({PodSignal.BUSY, PodSignal.IDLE, PodSignal.UNREACHABLE_BUT_RUNNING, PodSignal.BOOTING})
_STARTUP = frozenset({PodStatus.PROVISIONING, PodStatus.STARTING})
_DOWN = frozenset({PodStatus.EXITED, PodStatus.ERROR, PodStatus.TERMINATED})


@dataclass(frozen=True, slots=True, kw_only=True)
class PodReading:
    """PodReading is what the service gathered about one pod this tick.

    `scrape` is the parsed /metrics, or None when it was unreachable (non-2xx, transport failure).
    `observation` is the control plane's answer, or None when the pod was not observed (the service may
    skip observing a pod whose /metrics answered). `incarnation` is the controller's count of the processes
    behind the id (see `incarnation`), or None when it could not say.
    """

    pod_id: str
    observation: PodObservation | None = None
    scrape: PodActivity | None = None
    incarnation: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class PodVerdict:
    """PodVerdict is one pod classified for one tick.

    `baseline` is the work counter the next tick compares with. `answered` says vLLM answered /metrics
    (the pod is serving, so readiness may be published). `process_ended` says a confirmed down or startup
    observation proved the process behind this id gone: its baseline and published readiness are dropped.
    """

    pod_id: str
    signal: PodSignal
    reason: ActivityReason | None = None
    baseline: float | None = None
    answered: bool = False
    process_ended: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class AggregateSignal:
    """AggregateSignal is the volume's signal for one tick and the first pod that produced it."""

    signal: PodSignal
    pod_id: str | None


def classify_pod(reading: PodReading, baseline: float | None) -> PodVerdict:
    """Classify one pod from its scrape, else its control-plane observation (see the module table)."""
    scrape = reading.scrape
    if scrape is not None and scrape.is_vllm:
        activity = classify_activity(scrape, baseline)
        return PodVerdict(
            pod_id=reading.pod_id,
            signal=PodSignal.BUSY if activity.busy else PodSignal.IDLE,
            reason=activity.reason,
            baseline=activity.baseline,
            answered=True,
        )
    observation = reading.observation
    status = observation.status if observation is not None and observation.lookup is Lookup.FOUND else None
    if status is PodStatus.RUNNING:
        return PodVerdict(pod_id=reading.pod_id, signal=PodSignal.UNREACHABLE_BUT_RUNNING, baseline=baseline)
    if status in _STARTUP:
        return PodVerdict(pod_id=reading.pod_id, signal=PodSignal.BOOTING, process_ended=True)
    if status in _DOWN:
        return PodVerdict(pod_id=reading.pod_id, signal=PodSignal.NOT_RUNNING, process_ended=True)
    return PodVerdict(pod_id=reading.pod_id, signal=PodSignal.UNKNOWN, baseline=baseline)


def aggregate_signal(volume: VolumeLookup, verdicts: Sequence[PodVerdict]) -> AggregateSignal:
    """The volume's signal: Unreadable → Unknown; no pod → NotRunning; else the first highest-priority pod."""
    if volume.lookup is Lookup.UNREADABLE:
        return AggregateSignal(signal=PodSignal.UNKNOWN, pod_id=None)
    if volume.lookup is Lookup.NOT_FOUND or not verdicts:
        return AggregateSignal(signal=PodSignal.NOT_RUNNING, pod_id=None)
    winner = verdicts[0]
    for verdict in verdicts[1:]:
        if verdict.signal.priority > winner.signal.priority:
            winner = verdict
    return AggregateSignal(signal=winner.signal, pod_id=winner.pod_id)
