"""Forward, hold or refuse: what a request for a model meets at the gateway, and what a held request does next.

Theory of operation. The gateway keeps each pod's view (the pod controller's watch: status, readiness the idle
monitor published, the wake in flight, the ETA from measured boots). A request for a pod is

    state at arrival            held now < GATEWAY_MAX_HELD_PER_POD     held now at the bound
    ready                       forwarded at once                       forwarded at once
    booting (a wake, a boot)    held; the wake is joined                503 too_many_held, Retry-After the ETA
    down                        held; a wake starts (trigger request)   503 too_many_held, Retry-After the ETA

and a held request, at each change of the view and each comment interval, steps by the first rule that holds:

    rule                                                         step
    the pod is ready                                             forward
    waited GATEWAY_WAKE_WAIT_SECONDS (default: the boot grace)   504 model_not_ready, saying what the pod was doing
    the pod went down after it was seen booting, and the pod's   503 pod_stopped, naming the stop's trigger
      history has a stop newer than its newest wake
    otherwise                                                    keep holding (a stream gets an SSE comment line)

A down view alone is no stop: the controller's watch builds a view once per interval, so a request can arrive on a
view of the pod's previous boot (the idle stop not in it yet) and the down view after it is that older stop, while
this request's wake is already bringing the pod up (CI, stop 39). Only a stop on record after the wake ends the hold.

The wake's own refusal ends the hold at once: a budget with its numbers is 429 insufficient_quota, any other
failure 503 wake_failed with the wake's reason (every GPU excluded and why), as the start route's 409 says it.
"Ready" is the monitor's word (readySince), never RunPod's RUNNING: a running pod whose model still loads is held.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from thermostat.policy.gateway.openai_errors import GatewayError, Refusal

DEFAULT_RETRY_AFTER_SECONDS = 30
_BOOTING_STATUSES = frozenset({"PROVISIONING", "STARTING", "RUNNING"})


class ModelState(StrEnum):
    """ModelState is what `GET /models` shows beside each model."""

    DOWN = "down"
    BOOTING = "booting"
    READY = "ready"


@dataclass(frozen=True, slots=True, kw_only=True)
class PodSnapshot:
    """PodSnapshot is the pod controller's view of a pod, as much of it as the gateway decides on."""

    name: str
    status: str = "UNKNOWN"  # RunPod's status of the ranked pod: PROVISIONING, STARTING, RUNNING, EXITED, …
    is_running: bool = False
    ready: bool = False  # the idle monitor has seen the engine answer (readySince)
    proxy_url: str = ""
    wake_in_flight: bool = False
    eta_seconds: float | None = None


def model_state(pod: PodSnapshot) -> ModelState:
    """Ready only once the monitor saw the model answer on a running pod with a proxy URL; booting while a wake
    runs or a pod is on its way up; down otherwise."""
    if pod.ready and pod.is_running and pod.proxy_url:
        return ModelState.READY
    if pod.wake_in_flight or pod.status in _BOOTING_STATUSES:
        return ModelState.BOOTING
    return ModelState.DOWN


class Arrival(StrEnum):
    FORWARD = "forward"
    HOLD = "hold"
    REFUSE = "refuse"


@dataclass(frozen=True, slots=True, kw_only=True)
class Admission:
    """Admission is a request's arrival decided; `refusal` is set when it is refused."""

    arrival: Arrival
    refusal: GatewayError | None = None


def admit(pod: PodSnapshot, *, held: int, max_held: int) -> Admission:
    """Forward to a ready pod; hold for any other while fewer than `max_held` requests are held for it."""
    if model_state(pod) is ModelState.READY:
        return Admission(arrival=Arrival.FORWARD)
    if held >= max_held:
        message = (
            f"{max_held} requests are already held for {pod.name} while it wakes "
            f"(GATEWAY_MAX_HELD_PER_POD); retry later"
        )
        return Admission(
            arrival=Arrival.REFUSE,
            refusal=GatewayError(
                refusal=Refusal.TOO_MANY_HELD, message=message, retry_after_seconds=retry_after(pod.eta_seconds)
            ),
        )
    return Admission(arrival=Arrival.HOLD)


def retry_after(eta_seconds: float | None) -> int:
    """Whole seconds to wait before retrying: the ETA when there is one, else a fixed pause."""
    if eta_seconds is None or not math.isfinite(eta_seconds):
        return DEFAULT_RETRY_AFTER_SECONDS
    return max(1, math.ceil(eta_seconds))


class Hold(StrEnum):
    FORWARD = "forward"
    KEEP = "keep"
    REFUSE = "refuse"


@dataclass(frozen=True, slots=True, kw_only=True)
class HoldStep:
    """HoldStep is a held request's next step; `comment` is the SSE comment line a stream gets while it waits."""

    hold: Hold
    refusal: GatewayError | None = None
    comment: str = ""


def hold_step(
    pod: PodSnapshot, *, waited_seconds: float, wait_bound_seconds: float, seen_up: bool, stopped_by: str | None
) -> HoldStep:
    """The held request's next step (see the module table). `seen_up`: the pod was seen booting or the wake
    answered since the request arrived; `stopped_by`: the words for a stop on record after the pod's newest wake
    (stop_since_wake), None when there is none or the history cannot be read."""
    state = model_state(pod)
    if state is ModelState.READY:
        return HoldStep(hold=Hold.FORWARD)
    if waited_seconds >= wait_bound_seconds:
        message = (
            f"{pod.name} was not ready after {wait_bound_seconds:g} s (GATEWAY_WAKE_WAIT_SECONDS): it was {doing(pod)}"
        )
        return HoldStep(hold=Hold.REFUSE, refusal=GatewayError(refusal=Refusal.WAIT_BOUND, message=message))
    if state is ModelState.DOWN and seen_up and stopped_by:
        message = (
            f"{pod.name} was stopped while the request waited for it to wake ({stopped_by}); nothing is serving it"
        )
        return HoldStep(hold=Hold.REFUSE, refusal=GatewayError(refusal=Refusal.STOPPED_WHILE_HELD, message=message))
    return HoldStep(hold=Hold.KEEP, comment=waiting_comment(pod))


@dataclass(frozen=True, slots=True, kw_only=True)
class HistoryMark:
    """HistoryMark is one entry of the pod's history as the hold reads it: a wake, a Stop action, or another action."""

    wake: bool = False
    stop: bool = False
    trigger: str = ""
    detail: str = ""


def stop_since_wake(entries: Sequence[HistoryMark]) -> str | None:
    """The words for the pod's newest stop ("stopped by the idle rule (…)") when it is newer than the pod's newest wake
    (`entries` newest first, as the history pages them); None when a wake came after every stop: that stop is older
    than the boot the request waits for."""
    for entry in entries:
        if entry.wake:
            return None
        if entry.stop:
            return f"stopped by the {entry.trigger} rule" + (f" ({entry.detail})" if entry.detail else "")
    return None


REWAKE_SECONDS = 5.0


def rewake_due(pod: PodSnapshot, *, wake_answered: bool, seen_up: bool, since_wake_seconds: float) -> bool:
    """Ask for the wake again: it answered (Waiting, or a start the view does not show yet) and, a while later, nothing
    is on its way up — as a client of the start route polls. Never after the pod was seen up (then a stop ended it,
    and waking it again would undo the monitor's stop); a joined or running wake costs nothing more."""
    return (
        wake_answered and not seen_up and model_state(pod) is ModelState.DOWN and since_wake_seconds >= REWAKE_SECONDS
    )


def doing(pod: PodSnapshot) -> str:
    """What the pod is doing, in words: provisioning, starting, loading the model, waking or down."""
    if pod.status == "PROVISIONING":
        return "provisioning"
    if pod.status == "STARTING":
        return "starting"
    if pod.status == "RUNNING":
        return "loading the model" if not pod.ready else "ready"
    return "waking" if pod.wake_in_flight else f"down ({pod.status.lower()})"


def eta_words(eta_seconds: float | None) -> str:
    """The ETA as a user reads it ("ready in about 3 min"); empty without one (no made-up number, #2093)."""
    if eta_seconds is None or not math.isfinite(eta_seconds) or eta_seconds < 0:
        return ""
    if eta_seconds < 60:
        return f"ready in about {max(10, math.ceil(eta_seconds / 10) * 10)} s"
    return f"ready in about {math.ceil(eta_seconds / 60)} min"


def waiting_comment(pod: PodSnapshot) -> str:
    """The SSE comment a held stream gets: `: waking qwen: provisioning, ready in about 3 min`."""
    eta = eta_words(pod.eta_seconds)
    return f": waking {pod.name}: {doing(pod)}" + (f", {eta}" if eta else "")


def wake_refusal(pod_name: str, code: str, message: str) -> GatewayError | None:
    """The wake RPC's failure as the gateway answers it (`code` is the gRPC status code's name); None for OK."""
    if code == "OK":
        return None
    if code == "RESOURCE_EXHAUSTED":
        return GatewayError(refusal=Refusal.OVER_BUDGET, message=f"{pod_name}: {message}")
    if code == "NOT_FOUND":
        return GatewayError(refusal=Refusal.UNKNOWN_MODEL, message=message, param="model")
    if code == "ABORTED":
        return GatewayError(refusal=Refusal.WAKE_FAILED, message=f"{pod_name} could not be woken: {message}")
    return GatewayError(
        refusal=Refusal.CONTROL_UNAVAILABLE,
        message=f"{pod_name} could not be woken: the pod controller answered {code}: {message}",
        retry_after_seconds=DEFAULT_RETRY_AFTER_SECONDS,
    )


def wait_bound_seconds(configured: float | None, boot_grace_minutes: float) -> float:
    """GATEWAY_WAKE_WAIT_SECONDS when set, else the pod's boot grace (RUNPOD_BOOT_GRACE_MINUTES; when that is off,
    its default of 20 minutes): a held request never waits longer than the monitor lets a boot take."""
    if configured is not None:
        return configured
    return (boot_grace_minutes or 20.0) * 60.0
