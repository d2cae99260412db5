"""Why a wake stops issuing billable calls (`Halt`), the check it makes before each one (`Fence`), and how its
answer is built (`failed`, `with_walk`, `started_rate`): the values the wake service and the wake gate share."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace

from thermostat.policy.common.pod_model import PodObservation
from thermostat.policy.wake import create_walk as walk
from thermostat.policy.wake.wake_result import WakeFailureKind, WakeOutcome, WakeResult
from thermostat.providers.runpod.client import ActionResult


@dataclass(frozen=True, slots=True, kw_only=True)
class Halt:
    """Halt is why a wake must issue no further billable call.

    `in_flight` True: the wake lease moved on (another replica carries the wake) — the caller polls again.
    False: the pod was stopped (manually or by the monitor) during the wake — re-creating it would undo the
    stop and bill a new GPU, so the wake ends Failed.
    """

    in_flight: bool
    reason: str


Fence = Callable[[], Awaitable[Halt | None]]


async def no_fence() -> Halt | None:
    return None


def started_rate(answer: ActionResult, seen: PodObservation | None) -> tuple[float | None, str | None]:
    """The rate (USD/h) and GPU a started pod bills at, as RunPod reported them: the start's own answer
    (200 + the Pod, its `cost` now billing), else the pod's cost as last observed; None when neither said
    (metering then prices the start at the pod's last recorded rate, its create's)."""
    rate = (
        answer.cost_per_hour if answer.cost_per_hour else (seen.cost_per_hour if seen and seen.cost_per_hour else None)
    )
    return rate, answer.gpu_id or (seen.gpu_id if seen else None)


async def known(rate: float | None) -> float | None:
    return rate


def with_walk(result: WakeResult, w: walk.CreateWalk | None) -> WakeResult:
    if w is None:
        return result
    return replace(
        result,
        candidates_considered=w.candidates_considered,
        create_attempts=w.attempts,
        last_provider_status=w.last_provider_status,
    )


def failed(
    kind: WakeFailureKind,
    message: str,
    w: walk.CreateWalk | None = None,
    *,
    pod_id: str | None = None,
    gpu_id: str | None = None,
    price: float | None = None,
) -> WakeResult:
    return with_walk(
        WakeResult(
            outcome=WakeOutcome.FAILED,
            failure_kind=kind,
            message=message,
            pod_id=pod_id,
            gpu_id=gpu_id,
            price_per_hour=price,
        ),
        w,
    )
