"""What a wake looks like from outside: each pod view the controller sends, read as a phase and an ETA.

Pure functions of the GetPodResponse (no I/O, no clock), so every rule has a test. The controller's view:
`status` is RunPod's (PROVISIONING, STARTING, RUNNING, EXITED, TERMINATED, ...), `ready_since` is set once the
idle monitor saw the model answer (vLLM ready), and `eta_seconds` is the median of the pod's measured boots
minus the time already waited, absent without history (policy/wake/wake_eta.py). Ready means RUNNING *and*
ready_since: a RUNNING pod is still loading its model.

Phases only go forward (issue 35: `loading → waking (Created …) → ready`, the wake's answer arriving after the
watch had shown the boot): a phase once reported is never followed by an earlier one (`goes_forward`). A view of an
earlier phase (a wake asked again, a view built before the last) is not reported, and the wake's answer is
reported in the furthest phase reached.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from thermostat.pods.v1 import pods_pb2


class Phase(StrEnum):
    WAKING = "waking"  # StartPod was asked; no pod view yet
    PROVISIONING = "provisioning"  # RunPod is placing the pod
    STARTING = "starting"  # the container is starting
    LOADING = "loading"  # the pod runs; the model is not answering yet
    READY = "ready"
    DOWN = "down"  # no running pod: the wake did not hold (stopped, exited, terminated)


ORDER: tuple[Phase, ...] = (Phase.WAKING, Phase.PROVISIONING, Phase.STARTING, Phase.LOADING, Phase.READY)
"""The phases in the order a wake passes them; DOWN is none of them (it ends or restarts the wake, unreported)."""


def goes_forward(reported: str, seen: str) -> bool:
    """Whether a step of phase `seen` may be reported after the furthest phase `reported`: the same phase or a later
    one. DOWN is never reported as a step."""
    if seen not in ORDER or reported not in ORDER:
        return False
    return ORDER.index(seen) >= ORDER.index(reported)


_BY_STATUS = {"PROVISIONING": Phase.PROVISIONING, "STARTING": Phase.STARTING, "RUNNING": Phase.LOADING}


@dataclass(frozen=True, slots=True)
class WakeProgress:
    """WakeProgress is one step of `pods.ensure_ready`: the phase, a sentence for a person, the estimated
    seconds until ready when the step was read (None without boot history; the controller re-sends a view on a
    change of state, not for the countdown alone, so a display counts down from it), the controller's view it
    was read from, and on the step that carries the wake's answer its outcome (AlreadyRunning, Started, Created,
    Waiting); that step's phase is the furthest reported so far (`waking` unless the watch showed the boot
    first), so phases never go back."""

    phase: str
    detail: str
    eta_seconds: float | None
    pod: pods_pb2.GetPodResponse | None
    outcome: str | None = None


def progress_of(pod: pods_pb2.GetPodResponse) -> WakeProgress:
    """The phase of one pod view and what to tell a person about it."""
    eta = pod.eta_seconds if pod.HasField("eta_seconds") else None
    name = pod.name
    if pod.is_running and pod.HasField("ready_since"):
        return WakeProgress(Phase.READY, f"{name} is ready", 0.0, pod)
    phase = _BY_STATUS.get(pod.status) if pod.pod_id else None
    if phase is None:
        shown = pod.status or "no pod"
        return WakeProgress(Phase.DOWN, f"{name} is not running ({shown})", None, pod)
    doing = {
        Phase.PROVISIONING: "is being placed",
        Phase.STARTING: "is starting",
        Phase.LOADING: "is loading the model",
    }[phase]
    when = f"; ready in about {_duration(eta)}" if eta is not None else "; no estimate yet (no measured boots)"
    return WakeProgress(phase, f"{name} {doing}{when}", eta, pod)


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{max(0, round(seconds))} s"
    return f"{round(seconds / 60)} min"
