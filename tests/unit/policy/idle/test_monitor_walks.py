"""Step-by-step walks of the pod-control seed's measured timelines through the real `tick` and `after_stop`."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from thermostat.policy.common.pod_model import Lookup, PodObservation, PodStatus, VolumeLookup
from thermostat.policy.idle.idle_phase import Phase, StopTrigger
from thermostat.policy.idle.monitor_options import MonitorOptions
from thermostat.policy.idle.monitor_state import MonitorState
from thermostat.policy.idle.monitor_tick import (
    EventKind,
    PodStopOutcome,
    StopAftermath,
    StopResult,
    TickDecision,
    TickObservation,
    after_stop,
    tick,
)
from thermostat.policy.idle.pod_signal import PodReading, PodSignal
from thermostat.policy.idle.vllm_metrics import PodActivity, parse_vllm_metrics

MINUTE = timedelta(minutes=1)


def at(hhmmss: str, day: int = 9) -> datetime:
    return datetime.fromisoformat(f"2026-09-{day:02d}T{hhmmss}+00:00")


def scraped(pod: str = "p1", *, completed: float | None = 0.0, active: int = 0) -> PodReading:
    return PodReading(pod_id=pod, scrape=PodActivity(active=active, completed=completed))


def observed(status: PodStatus, pod: str = "p1") -> PodReading:
    return PodReading(pod_id=pod, observation=PodObservation(lookup=Lookup.FOUND, pod_id=pod, status=status))


def running_unreachable(pod: str = "p1") -> PodReading:
    """RUNNING on the control plane, /metrics 502 — the model is loading (or vLLM died)."""
    return observed(PodStatus.RUNNING, pod)


@dataclass
class Walk:
    """A clock that ticks every CHECK_SECONDS, feeding one observation per tick to the real policy."""

    now: datetime
    options: MonitorOptions = field(default_factory=MonitorOptions)
    state: MonitorState = field(default_factory=MonitorState)
    decisions: list[TickDecision] = field(default_factory=list)

    def tick(self, *readings: PodReading) -> TickDecision:
        volume = VolumeLookup(lookup=Lookup.FOUND, pod_ids=tuple(r.pod_id for r in readings))
        decision = tick(self.state, TickObservation(volume=volume, pods=readings), self.now, self.options)
        self.state = decision.state
        self.decisions.append(decision)
        self.now += self.options.check_interval
        return decision

    def until_stop(self, *readings: PodReading, limit: int = 1000) -> TickDecision:
        for _ in range(limit):
            decision = self.tick(*readings)
            if decision.stop is not None:
                return decision
        raise AssertionError(f"no stop within {limit} ticks")

    def stop(self, decision: TickDecision, *, ok: bool = True) -> StopAftermath:
        assert decision.stop is not None
        outcomes = tuple(PodStopOutcome(pod_id=pod, ok=ok) for pod in decision.stop.pod_ids)
        aftermath = after_stop(self.state, StopResult(trigger=decision.stop.trigger, outcomes=outcomes), self.now)
        self.state = aftermath.state
        return aftermath

    @property
    def last_time(self) -> datetime:
        return self.now - self.options.check_interval


def boot_like_2026_09_09(walk: Walk) -> None:
    """RUNNING with /metrics 502 from 09:40:41; vLLM /health 200 at 09:46:57, so the 09:47:41 tick answers."""
    while walk.now < at("09:47:41"):
        decision = walk.tick(running_unreachable())
        assert decision.state.phase is Phase.BOOTING
        assert decision.stop is None


def test_2026_09_09_a_woken_pod_nobody_talks_to_stops_on_the_15th_idle_scrape_counting_the_ready_one() -> None:
    """Gauge-only vLLM (as then): ready tick is idle #1, stop ≈14 min after ready, ≈21 min after RUNNING."""
    walk = Walk(now=at("09:40:41"))
    boot_like_2026_09_09(walk)
    ready = walk.tick(scraped(completed=None))
    assert (ready.state.phase, ready.state.counters.idle_streak) == (Phase.READY, 1)
    assert [e.message for e in ready.events] == ["pod p1 ready after 0:07:00 (boot grace 0:20:00)"]
    stop = walk.until_stop(scraped(completed=None))
    assert stop.stop is not None
    assert stop.stop.trigger is StopTrigger.IDLE
    assert walk.last_time == at("10:01:41")
    assert walk.last_time - at("09:47:41") == 14 * MINUTE


def test_2026_09_09_with_a_work_counter_the_ready_scrape_seeds_the_baseline_and_banks_nothing() -> None:
    """A counter on the ready scrape reads Busy (no baseline): Ready with IdleStreak 0, stop 15 idle ticks later."""
    walk = Walk(now=at("09:40:41"))
    boot_like_2026_09_09(walk)
    ready = walk.tick(scraped(completed=0.0))
    assert (ready.state.phase, ready.state.counters.idle_streak) == (Phase.READY, 0)
    walk.until_stop(scraped(completed=0.0))
    assert walk.last_time - at("09:47:41") == 15 * MINUTE


def test_2052_the_model_load_is_not_idle() -> None:
    """Six minutes of RUNNING-without-metrics spend boot grace, never the idle window (was: stop at 09:55:40)."""
    walk = Walk(now=at("09:40:41"))
    boot_like_2026_09_09(walk)
    assert all(d.state.counters.idle_streak == 0 for d in walk.decisions)
    assert walk.state.counters.booting_ticks == 7
    while walk.now <= at("09:55:41"):
        assert walk.tick(scraped(completed=0.0)).stop is None


def test_2075_chat_turns_between_ticks_keep_the_pod_up() -> None:
    """2026-09-11: a turn answered at 09:01:51 must move the deadline; the gauge never saw it, the counter did."""
    turns_done_at = [at(t, day=11) for t in ("09:01:51", "09:07:30", "09:13:05", "09:19:40", "09:24:10")]
    walk = Walk(now=at("08:55:22", day=11))
    while True:
        completed = float(sum(1 for done in turns_done_at if done <= walk.now))
        decision = walk.tick(scraped(completed=completed, active=0))
        if decision.stop is not None:
            break
    assert decision.stop.trigger is StopTrigger.IDLE
    first_tick_after_last_turn = at("09:24:22", day=11)
    assert walk.last_time == first_tick_after_last_turn + 15 * MINUTE
    assert not any(d.stop for d in walk.decisions[:-1])


def test_2075_the_same_turns_through_the_gauge_alone_stop_a_fixed_window_after_ready() -> None:
    """Without the counter the identical conversation is cut off 14 min after the ready tick — the bug."""
    turns_done_at = [at(t, day=11) for t in ("09:01:51", "09:07:30", "09:13:05", "09:19:40", "09:24:10")]
    walk = Walk(now=at("08:55:22", day=11))
    stop = walk.until_stop(scraped(completed=None))
    assert stop.stop is not None
    assert walk.last_time == at("09:09:22", day=11)
    assert any(done > walk.last_time for done in turns_done_at)


def test_a_vllm_that_dies_after_serving_accrues_toward_the_idle_stop() -> None:
    """RUNNING but /metrics gone after ready is billed like idle (#1998), not reset forever."""
    walk = Walk(now=at("12:00:00"))
    walk.tick(scraped(completed=5.0))
    walk.tick(scraped(completed=6.0))
    stop = walk.until_stop(running_unreachable())
    assert stop.stop is not None
    assert stop.stop.trigger is StopTrigger.IDLE
    assert stop.state.counters.idle_streak == 15
    assert stop.state.pods["p1"].baseline == 6.0


def test_a_model_that_never_answers_is_stopped_at_boot_grace() -> None:
    """Provisioning, Starting, then RUNNING without metrics: one 20-tick budget, then StopBootGrace (#2041)."""
    walk = Walk(now=at("09:37:51"))
    walk.tick(observed(PodStatus.PROVISIONING))
    walk.tick(observed(PodStatus.STARTING))
    stop = walk.until_stop(running_unreachable())
    assert stop.stop is not None
    assert (stop.stop.trigger, stop.stop.pod_ids) == (StopTrigger.BOOT_GRACE, ("p1",))
    assert walk.last_time - at("09:37:51") == 19 * MINUTE
    assert walk.stop(stop).state == MonitorState()


def test_a_phantom_busy_request_is_stopped_by_the_runtime_cap_without_the_stall_guard() -> None:
    """STALL_MINUTES=0 is the seed: a vLLM reporting one running request forever bills until the 6 h cap."""
    walk = Walk(now=at("09:00:00"), options=MonitorOptions(stall_minutes=0))
    walk.tick(observed(PodStatus.STARTING))
    stop = walk.until_stop(scraped(completed=3.0, active=1), limit=400)
    assert stop.stop is not None
    assert stop.stop.trigger is StopTrigger.RUNTIME_CAP
    assert walk.last_time == at("15:00:00")


def test_a_phantom_busy_request_is_stopped_by_the_stall_guard_after_twice_the_idle_window() -> None:
    """vllm#29928: "Running: 1" with no token generated is Stalled 30 scrapes after its baseline (defaults)."""
    walk = Walk(now=at("09:00:00"))
    walk.tick(observed(PodStatus.STARTING))
    walk.tick(scraped(completed=3.0, active=1))  # ready; the baseline is seeded
    stop = walk.until_stop(scraped(completed=3.0, active=1), limit=400)
    assert stop.stop is not None
    assert (stop.stop.trigger, stop.stop.pod_ids) == (StopTrigger.STALL, ("p1",))
    assert walk.last_time == at("09:31:00")
    assert "p1 running absent, waiting absent, work counter 3 unchanged for 30 scrapes" in stop.stop.message
    assert walk.stop(stop).state == MonitorState()


def test_a_long_generation_whose_tokens_flow_is_never_stalled() -> None:
    """One token between two scrapes resets the count: a real request runs to the cap, never to the guard."""
    walk = Walk(now=at("09:00:00"))
    walk.tick(observed(PodStatus.STARTING))
    counter = 3.0
    for _ in range(300):
        counter += 1
        decision = walk.tick(scraped(completed=counter, active=1))
        assert decision.stop is None
        assert decision.state.pods["p1"].stall_ticks == 0


def test_a_stalled_pod_whose_metrics_blip_is_stopped_no_sooner() -> None:
    """Unknown never advances the count: ten unreachable scrapes in a stall delay its stop by ten ticks."""
    walk = Walk(now=at("09:00:00"))
    walk.tick(scraped(completed=3.0, active=1))
    for _ in range(10):
        assert walk.tick(scraped(completed=3.0, active=1)).stop is None
    for _ in range(10):
        assert walk.tick(PodReading(pod_id="p1")).state.pods["p1"].stall_ticks == 10
    stop = walk.until_stop(scraped(completed=3.0, active=1))
    assert stop.stop is not None and stop.stop.trigger is StopTrigger.STALL
    assert walk.last_time == at("09:40:00")  # 09:30 without the blips


def test_a_refused_stall_stop_waits_a_full_window_before_the_next() -> None:
    walk = Walk(now=at("09:00:00"))
    walk.tick(scraped(completed=3.0, active=1))
    first = walk.until_stop(scraped(completed=3.0, active=1))
    walk.stop(first, ok=False)
    assert walk.state.pods["p1"].stall_ticks == 0
    second = walk.until_stop(scraped(completed=3.0, active=1))
    assert second.stop is not None and second.stop.trigger is StopTrigger.STALL
    assert walk.last_time - at("09:30:00") == 30 * MINUTE


def test_a_stale_pod_listed_first_never_masks_its_busy_replacement() -> None:
    """GET /v2/pods order is unspecified: the Exited stale pod first must not read NotRunning every tick."""
    walk = Walk(now=at("10:00:00"))
    for _ in range(3):
        decision = walk.tick(observed(PodStatus.EXITED, "stale"), running_unreachable("new"))
        assert (decision.signal.signal, decision.signal.pod_id) == (PodSignal.UNREACHABLE_BUT_RUNNING, "new")
    for _ in range(30):
        decision = walk.tick(observed(PodStatus.EXITED, "stale"), scraped("new", completed=2.0, active=1))
        assert decision.stop is None
        assert EventKind.SEVERAL_PODS in [e.kind for e in decision.events]
    assert walk.state.phase is Phase.READY


def test_a_busy_sibling_wins_and_an_idle_stop_takes_every_up_pod() -> None:
    """A sibling's idle never stops a busy pod; once none is busy, every billing pod is stopped together."""
    walk = Walk(now=at("10:00:00"))
    walk.tick(scraped("a", completed=0.0), scraped("b", completed=0.0))
    for _ in range(20):
        decision = walk.tick(scraped("a", completed=0.0), scraped("b", completed=0.0, active=1))
        assert decision.stop is None
        assert decision.signal.pod_id == "b"
    stop = walk.until_stop(observed(PodStatus.EXITED, "stale"), scraped("a", completed=0.0), running_unreachable("b"))
    assert stop.stop is not None
    assert (stop.stop.trigger, stop.stop.pod_ids) == (StopTrigger.IDLE, ("a", "b"))
    assert walk.last_time - at("10:20:00") == 15 * MINUTE


def test_a_refused_stop_keeps_the_phase_and_waits_a_full_window() -> None:
    """Refused: streak back to 0, still Ready, "ready" not logged again, next attempt 15 ticks later."""
    walk = Walk(now=at("10:00:00"))
    walk.tick(scraped(completed=0.0))
    first = walk.until_stop(scraped(completed=0.0))
    refused_at = walk.last_time
    aftermath = walk.stop(first, ok=False)
    assert (aftermath.state.phase, aftermath.state.counters.idle_streak) == (Phase.READY, 0)
    second = walk.until_stop(scraped(completed=0.0))
    assert walk.last_time - refused_at == 15 * MINUTE
    assert not any(e.kind is EventKind.READY for d in walk.decisions[2:] for e in d.events)
    assert walk.stop(second).accepted


def test_a_re_wake_inside_one_tick_starts_a_new_boot() -> None:
    """Accepted stop is the Down edge: the cockpit stop→start flow boots again with a new readySince (#2052)."""
    walk = Walk(now=at("10:00:00"))
    walk.tick(scraped(completed=0.0))
    walk.tick(scraped(completed=40.0))
    stop = walk.until_stop(scraped(completed=40.0))
    aftermath = walk.stop(stop)
    assert aftermath.state.phase is Phase.DOWN
    assert aftermath.state.readiness == {}
    rewoken = walk.tick(running_unreachable())
    assert (rewoken.state.phase, rewoken.state.counters.booting_ticks) == (Phase.BOOTING, 1)
    assert rewoken.state.boot_started_at == walk.last_time
    ready = walk.tick(scraped(completed=0.0))
    assert (ready.state.phase, ready.state.counters.idle_streak) == (Phase.READY, 0)
    assert ready.state.readiness == {"p1": walk.last_time}
    assert [e.message for e in ready.events] == ["pod p1 ready after 0:01:00 (boot grace 0:20:00)"]


def test_a_pod_restarted_between_ticks_under_the_same_id_re_enters_ready_with_streak_zero() -> None:
    """Stop accepted, then the same id answers with counters from zero: 0 vs a stale 0 must not read idle."""
    walk = Walk(now=at("10:00:00"))
    walk.tick(scraped(completed=0.0))
    walk.stop(walk.until_stop(scraped(completed=0.0)))
    back = walk.tick(scraped(completed=0.0))
    assert (back.state.phase, back.state.counters.idle_streak) == (Phase.READY, 0)


def test_a_flapping_metrics_endpoint_still_reaches_the_idle_stop() -> None:
    """Baseline kept across blips, so alternating scrape/502 accrues instead of re-seeding forever."""
    walk = Walk(now=at("10:00:00"))
    walk.tick(scraped(completed=9.0))
    for i in range(15):
        decision = walk.tick(scraped(completed=9.0) if i % 2 else running_unreachable())
    assert decision.stop is not None
    assert decision.stop.trigger is StopTrigger.IDLE


def test_a_restarted_replica_continues_exactly_where_the_last_one_stopped() -> None:
    """Persist after every tick, reload from JSON, and the walk is indistinguishable from an unbroken one."""
    text = (
        "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 0\n"
        'vllm:request_success_total{finished_reason="stop"} 4\n'
    )
    unbroken, restarted = Walk(now=at("10:00:00")), Walk(now=at("10:00:00"))
    script = [running_unreachable()] * 3 + [PodReading(pod_id="p1", scrape=parse_vllm_metrics(text))] * 20
    for reading in script:
        unbroken.tick(reading)
        restarted.state = MonitorState.from_dict(restarted.state.to_dict())
        restarted.tick(reading)
    assert [d.stop for d in unbroken.decisions] == [d.stop for d in restarted.decisions]
    assert unbroken.state == restarted.state
