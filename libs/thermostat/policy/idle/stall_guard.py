"""The stall guard: a vLLM whose gauges say "in flight" while its work counters stand still (issue 26).

vLLM keeps `vllm:num_requests_running` / `vllm:num_requests_waiting` stale after requests abort until its next
engine step (vllm-project/vllm#29928, #22545): a chat client that disconnects mid-stream can leave "Running: 1"
on an engine that does nothing. The seed's rule reads any request in flight as Busy, so such a pod billed until
the 6-hour runtime cap. The counters say the truth — a running request generates tokens, so a work counter
(`vllm:generation_tokens_total`, …) advances between two scrapes — and this guard counts, per pod, the
consecutive scrapes on which the gauges were above zero and no work counter moved:

    this tick's scrape of the pod                      stall_ticks
    -------------------------------------------------  -----------
    guard off (STALL_MINUTES=0)                         0
    no vLLM answer (unreachable, unknown, booting)      kept   (Unknown never advances it)
    nothing in flight (the gauges are 0)                0      (the idle window's business)
    no work-counter family in the exposition            0      (the seed's gauge rule stays)
    in flight, no baseline yet                          0
    in flight, the counter advanced                     0
    in flight, the counter went backwards (restart)     0
    in flight, the counter unchanged                    +1

A pod is Stalled once its count reaches `stall_threshold` (ceil(STALL_MINUTES / CHECK_SECONDS)); the monitor
then stops the volume's pods as an idle window would, trigger `stall` — unless another pod on the volume is
busy for real (a busy pod anywhere wins: `stalled_pods`). A process known to have ended drops the count with
the rest of the pod's memory (monitor_tick). Only the direction of the counter is read, never its magnitude.

What it costs a user whose engine really works: nothing while tokens flow — one generated token between two
scrapes resets the count. A single request that produces no token for STALL_MINUTES (a prefill of a huge
prompt on a slow GPU that outlasts the window, or a queue that waits that long behind a wedged request) is
stopped; the default (twice IDLE_MINUTES, 30 min) is far beyond any prefill.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from thermostat.policy.idle.monitor_state import MonitorState
from thermostat.policy.idle.pod_signal import PodSignal, PodVerdict
from thermostat.policy.idle.vllm_metrics import PodActivity


class StallReason(StrEnum):
    """StallReason names the row of the module table that moved (or kept) a pod's stall count."""

    OFF = "OFF"
    NO_ANSWER = "NO_ANSWER"
    NOT_IN_FLIGHT = "NOT_IN_FLIGHT"
    NO_COUNTER = "NO_COUNTER"
    NO_BASELINE = "NO_BASELINE"
    COUNTER_ADVANCED = "COUNTER_ADVANCED"
    COUNTER_WENT_BACKWARDS = "COUNTER_WENT_BACKWARDS"
    COUNTER_UNCHANGED = "COUNTER_UNCHANGED"


@dataclass(frozen=True, slots=True, kw_only=True)
class StallStep:
    """StallStep is one pod's stall count after one tick, and the row that decided it."""

    ticks: int
    reason: StallReason

    def stalled(self, threshold: int) -> bool:
        """Stalled: the guard is on and the count reached its threshold."""
        return threshold > 0 and self.ticks >= threshold


def advance_stall(ticks: int, scrape: PodActivity | None, baseline: float | None, *, threshold: int) -> StallStep:
    """Advance one pod's stall count by this tick's scrape (None: vLLM did not answer); see the module table.

    `baseline` is the work counter of the pod's previous successful scrape; `threshold` 0 turns the guard off.
    """
    if threshold <= 0:
        return StallStep(ticks=0, reason=StallReason.OFF)
    if scrape is None or not scrape.is_vllm:
        return StallStep(ticks=ticks, reason=StallReason.NO_ANSWER)
    if not scrape.active:
        return StallStep(ticks=0, reason=StallReason.NOT_IN_FLIGHT)
    completed = scrape.completed
    if completed is None:
        return StallStep(ticks=0, reason=StallReason.NO_COUNTER)
    if baseline is None:
        return StallStep(ticks=0, reason=StallReason.NO_BASELINE)
    if completed > baseline:
        return StallStep(ticks=0, reason=StallReason.COUNTER_ADVANCED)
    if completed < baseline:
        return StallStep(ticks=0, reason=StallReason.COUNTER_WENT_BACKWARDS)
    return StallStep(ticks=ticks + 1, reason=StallReason.COUNTER_UNCHANGED)


@dataclass(frozen=True, slots=True, kw_only=True)
class StalledPod:
    """StalledPod is a pod the stall guard stops: its gauges and the work counter that stood still."""

    pod_id: str
    stall_ticks: int
    running: int | None
    waiting: int | None
    counter: float | None

    def describe(self) -> str:
        gauges = f"running {_gauge(self.running)}, waiting {_gauge(self.waiting)}"
        counter = "absent" if self.counter is None else f"{self.counter:g}"
        return f"{self.pod_id} {gauges}, work counter {counter} unchanged for {self.stall_ticks} scrapes"


def stalled_pods(
    state: MonitorState,
    verdicts: tuple[PodVerdict, ...],
    scrapes: dict[str, PodActivity | None],
    threshold: int,
) -> tuple[StalledPod, ...]:
    """The Busy pods when every one of them is Stalled, else () — one pod that really works wins."""
    busy = [v for v in verdicts if v.signal is PodSignal.BUSY]
    if threshold <= 0 or not busy:
        return ()
    stalled: list[StalledPod] = []
    for verdict in busy:
        memory = state.pods.get(verdict.pod_id)
        if memory is None or memory.stall_ticks < threshold:
            return ()
        scrape = scrapes.get(verdict.pod_id)
        stalled.append(
            StalledPod(
                pod_id=verdict.pod_id,
                stall_ticks=memory.stall_ticks,
                running=scrape.running if scrape is not None else None,
                waiting=scrape.waiting if scrape is not None else None,
                counter=memory.baseline,
            )
        )
    return tuple(stalled)


def _gauge(value: int | None) -> str:
    return "absent" if value is None else str(value)
