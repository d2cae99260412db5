"""One monitor tick over every pod on the volume, and what an issued stop does (pod-control seed: Idle auto-stop)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from thermostat.policy.common.pod_model import Lookup, PodObservation, PodStatus, VolumeLookup
from thermostat.policy.idle.idle_phase import Phase, PhaseCounters, StopTrigger
from thermostat.policy.idle.monitor_options import MonitorOptions
from thermostat.policy.idle.monitor_state import MonitorState, PodMemory
from thermostat.policy.idle.monitor_tick import (
    EventKind,
    EventLevel,
    PodStopOutcome,
    ReadinessChange,
    StopResult,
    TickDecision,
    TickObservation,
    after_stop,
    tick,
)
from thermostat.policy.idle.pod_signal import AggregateSignal, PodReading, PodSignal
from thermostat.policy.idle.vllm_metrics import PodActivity

T0 = datetime(2026, 9, 9, 9, 40, 41, tzinfo=UTC)
OPTIONS = MonitorOptions()
S = PodSignal


def scraped(pod: str, *, completed: float | None = 10.0, active: int = 0) -> PodReading:
    return PodReading(pod_id=pod, scrape=PodActivity(active=active, completed=completed))


def observed(pod: str, status: PodStatus, *, lookup: Lookup = Lookup.FOUND) -> PodReading:
    return PodReading(pod_id=pod, observation=PodObservation(lookup=lookup, pod_id=pod, status=status, gpu_count=1))


def blip(pod: str) -> PodReading:
    return observed(pod, PodStatus.UNKNOWN, lookup=Lookup.UNREADABLE)


def on_volume(*readings: PodReading) -> TickObservation:
    return TickObservation(
        volume=VolumeLookup(lookup=Lookup.FOUND, pod_ids=tuple(r.pod_id for r in readings)), pods=readings
    )


def ready(streak: int = 0, **pods: PodMemory) -> MonitorState:
    return MonitorState(
        counters=PhaseCounters(phase=Phase.READY, idle_streak=streak), cap_started_at=T0, boot_started_at=T0, pods=pods
    )


def booting(ticks: int, **pods: PodMemory) -> MonitorState:
    return MonitorState(
        counters=PhaseCounters(phase=Phase.BOOTING, booting_ticks=ticks),
        cap_started_at=T0,
        boot_started_at=T0,
        pods=pods,
    )


SERVING = PodMemory(baseline=10.0, ready_since=T0)
NOW = T0 + timedelta(minutes=10)


def run(state: MonitorState, observation: TickObservation, options: MonitorOptions = OPTIONS) -> TickDecision:
    return tick(state, observation, NOW, options)


# --- the volume lookup


def test_an_unreadable_volume_lookup_changes_nothing_and_stops_nothing() -> None:
    """Unknown, never "nothing to stop": no advance, no pruning, and no pod can be named."""
    state = ready(14, p1=SERVING)
    decision = run(state, TickObservation(volume=VolumeLookup(lookup=Lookup.UNREADABLE)))
    assert decision == TickDecision(state=state, signal=AggregateSignal(signal=S.UNKNOWN, pod_id=None))


def test_past_the_cap_an_unreadable_list_still_stops_the_pods_last_seen() -> None:
    """The cap backs up a run of Unknown ticks (pod-control seed): it stops the remembered pods by id, changing
    nothing else."""
    state = ready(3, p1=SERVING, p2=SERVING)
    at_cap = T0 + OPTIONS.max_runtime  # type: ignore[operator]
    decision = tick(state, TickObservation(volume=VolumeLookup(lookup=Lookup.UNREADABLE)), at_cap, OPTIONS)
    assert decision.state == state
    assert decision.stop is not None
    assert (decision.stop.trigger, decision.stop.pod_ids) == (StopTrigger.RUNTIME_CAP, ("p1", "p2"))
    before_cap = tick(state, TickObservation(volume=VolumeLookup(lookup=Lookup.UNREADABLE)), NOW, OPTIONS)
    assert before_cap.stop is None


def test_no_pod_on_the_volume_is_down_with_everything_forgotten() -> None:
    """NotFound: Down, counters and cap cleared, every pod pruned and its readiness cleared."""
    decision = run(ready(5, p1=SERVING), TickObservation(volume=VolumeLookup(lookup=Lookup.NOT_FOUND)))
    assert decision.state == MonitorState()
    assert decision.readiness == (ReadinessChange(pod_id="p1", ready_since=None),)
    assert decision.stop is None


def test_every_pod_exited_is_down() -> None:
    """Confirmed Exited/Error/Terminated on every pod: Down, cap disarmed, readySince cleared."""
    decision = run(
        ready(5, p1=SERVING, p2=SERVING),
        on_volume(observed("p1", PodStatus.EXITED), observed("p2", PodStatus.TERMINATED)),
    )
    assert decision.state == MonitorState()
    assert {r.pod_id for r in decision.readiness if r.ready_since is None} == {"p1", "p2"}


def test_a_listed_pod_without_a_reading_is_unknown() -> None:
    """Not scraped and not observed proves nothing."""
    observation = TickObservation(volume=VolumeLookup(lookup=Lookup.FOUND, pod_ids=("p1",)))
    assert run(ready(3, p1=SERVING), observation).state == ready(3, p1=SERVING)


# --- readiness and baselines


def test_the_first_answer_publishes_ready_since_once() -> None:
    """readySince is when vLLM first answered since the pod came up; later answers do not move it."""
    first = run(booting(6), on_volume(scraped("p1")))
    assert first.readiness == (ReadinessChange(pod_id="p1", ready_since=NOW),)
    assert first.state.readiness == {"p1": NOW}
    later = tick(first.state, on_volume(scraped("p1")), NOW + timedelta(minutes=1), OPTIONS)
    assert later.readiness == ()
    assert later.state.readiness == {"p1": NOW}


def test_every_answer_becomes_the_pods_baseline() -> None:
    """The next tick compares with this scrape's counter."""
    decision = run(ready(0, p1=SERVING), on_volume(scraped("p1", completed=12.0)))
    assert decision.state.pods["p1"].baseline == 12.0


def test_an_unreachable_tick_keeps_the_baseline_and_readiness() -> None:
    """A blip must not re-seed: the next scrape is still compared with the last real one."""
    after_blip = run(ready(2, p1=SERVING), on_volume(observed("p1", PodStatus.RUNNING)))
    assert after_blip.state.pods["p1"] == SERVING
    nxt = tick(after_blip.state, on_volume(scraped("p1", completed=10.0)), NOW + timedelta(minutes=1), OPTIONS)
    assert nxt.signal.signal is S.IDLE
    assert nxt.state.counters.idle_streak == 4


@pytest.mark.parametrize(
    "status",
    [pytest.param(s, id=s.value.lower()) for s in (PodStatus.STARTING, PodStatus.PROVISIONING, PodStatus.EXITED)],
)
def test_a_confirmed_down_or_startup_drops_baseline_and_readiness(status: PodStatus) -> None:
    """RunPod reuses the id; the process behind it ended."""
    decision = run(ready(2, p1=SERVING), on_volume(observed("p1", status)))
    assert "p1" not in decision.state.pods
    assert ReadinessChange(pod_id="p1", ready_since=None) in decision.readiness


def test_a_confirmed_startup_clears_that_pods_readiness_even_when_a_busy_sibling_wins() -> None:
    """The aggregate stays Ready on the sibling's work, but the restarting pod is no longer ready."""
    decision = run(
        ready(0, p1=SERVING, p2=SERVING), on_volume(observed("p1", PodStatus.STARTING), scraped("p2", active=1))
    )
    assert decision.signal == AggregateSignal(signal=S.BUSY, pod_id="p2")
    assert decision.readiness == (ReadinessChange(pod_id="p1", ready_since=None),)
    assert decision.state.readiness == {"p2": T0}


def test_pods_that_left_the_volume_are_pruned_and_lose_readiness() -> None:
    """Replacements cannot grow the map."""
    decision = run(ready(0, gone=SERVING, p2=SERVING), on_volume(scraped("p2")))
    assert list(decision.state.pods) == ["p2"]
    assert decision.readiness == (ReadinessChange(pod_id="gone", ready_since=None),)


# --- stops and their targets


def test_the_idle_stop_stops_every_pod_observed_up() -> None:
    """Idle and booting pods are billed; a confirmed-down or unknown sibling is not a target."""
    decision = run(
        ready(14, p1=SERVING),
        on_volume(observed("old", PodStatus.EXITED), scraped("p1"), observed("p2", PodStatus.STARTING), blip("p3")),
    )
    assert decision.stop is not None
    assert (decision.stop.trigger, decision.stop.pod_ids) == (StopTrigger.IDLE, ("p1", "p2"))
    assert (decision.stop.evidence.idle_streak, decision.stop.evidence.idle_threshold) == (15, 15)


def test_a_busy_sibling_defeats_the_idle_stop() -> None:
    """A sibling's idle never stops a busy pod."""
    decision = run(ready(14, p1=SERVING, p2=SERVING), on_volume(scraped("p1"), scraped("p2", active=1)))
    assert (decision.stop, decision.state.counters.idle_streak) == (None, 0)


def test_the_boot_grace_stop_targets_the_booting_and_running_pods() -> None:
    """Booting pods are retained as stop targets: a never-ready model bills while it loads."""
    decision = run(booting(19), on_volume(observed("p1", PodStatus.RUNNING), observed("p2", PodStatus.STARTING)))
    assert decision.stop is not None
    assert (decision.stop.trigger, decision.stop.pod_ids) == (StopTrigger.BOOT_GRACE, ("p1", "p2"))
    assert decision.stop.message == "stopping p1, p2 (boot-grace: not ready after 20/20 booting ticks)"


def test_the_runtime_cap_stops_every_pod_not_confirmed_down_even_a_busy_one() -> None:
    """The backstop for a phantom busy request: a busy pod is stopped, an exited one is not."""
    state = ready(0, p1=SERVING)
    at_cap = T0 + timedelta(hours=6)
    decision = tick(
        state, on_volume(scraped("p1", active=1), observed("old", PodStatus.EXITED), blip("p3")), at_cap, OPTIONS
    )
    assert decision.stop is not None
    assert (decision.stop.trigger, decision.stop.pod_ids) == (StopTrigger.RUNTIME_CAP, ("p1", "p3"))
    assert decision.stop.evidence.up_since == T0


def test_the_runtime_cap_fires_through_a_run_of_unknown_ticks() -> None:
    """Unknown neither arms nor resets the cap, but an armed cap still stops the listed pods."""
    decision = tick(ready(3, p1=SERVING), on_volume(blip("p1")), T0 + timedelta(hours=7), OPTIONS)
    assert decision.signal.signal is S.UNKNOWN
    assert decision.stop is not None
    assert (decision.stop.trigger, decision.stop.pod_ids) == (StopTrigger.RUNTIME_CAP, ("p1",))
    assert decision.state.counters == ready(3).counters


def test_a_disabled_cap_never_stops() -> None:
    """MAX_RUNTIME_MINUTES=0."""
    options = MonitorOptions(max_runtime_minutes=0)
    decision = tick(ready(0, p1=SERVING), on_volume(scraped("p1", active=1)), T0 + timedelta(days=9), options)
    assert decision.stop is None


def test_the_cap_arms_on_the_first_up_observation() -> None:
    """A Starting pod arms the cap; the state remembers when."""
    assert run(MonitorState(), on_volume(observed("p1", PodStatus.PROVISIONING))).state.cap_started_at == NOW


# --- events


def test_several_pods_on_the_volume_log_a_warning_every_tick() -> None:
    """A stale pod and its replacement coexist after a Waiting wake; say so."""
    decision = run(ready(0, p2=SERVING), on_volume(observed("old", PodStatus.EXITED), scraped("p2", active=1)))
    [event] = decision.events
    assert (event.kind, event.level) == (EventKind.SEVERAL_PODS, EventLevel.WARNING)
    assert event.message == "2 pods on the volume (old, p2); BUSY from p2"


def test_ready_is_logged_once_with_the_elapsed_boot_and_the_grace() -> None:
    """[monitor] pod {id} ready after {elapsed} (boot grace {grace}); elapsed includes observed startup."""
    decision = run(booting(9), on_volume(scraped("p1")))
    [event] = decision.events
    assert (event.kind, event.pod_id) == (EventKind.READY, "p1")
    assert event.message == "pod p1 ready after 0:10:00 (boot grace 0:20:00)"
    assert tick(decision.state, on_volume(scraped("p1")), NOW + timedelta(minutes=1), OPTIONS).events == ()


def test_ready_without_an_observed_boot_says_so() -> None:
    """A pod first seen already serving has no boot to measure."""
    options = MonitorOptions(boot_grace_minutes=0)
    [event] = run(MonitorState(), on_volume(scraped("p1")), options).events
    assert event.message == "pod p1 ready after an unobserved boot (boot grace off)"


def test_a_new_startup_after_ready_restarts_the_boot_clock() -> None:
    """#2101: the next "ready after" measures the new startup, not the old one."""
    decision = run(ready(4, p1=SERVING), on_volume(observed("p1", PodStatus.STARTING)))
    assert decision.state.boot_started_at == NOW
    assert [e.kind for e in decision.events] == [EventKind.BOOT_RESTARTED]


def test_now_must_be_timezone_aware() -> None:
    """The state is persisted with ISO timestamps; a naive clock would not compare after a restart."""
    with pytest.raises(ValueError, match="timezone"):
        tick(MonitorState(), on_volume(scraped("p1")), datetime(2026, 9, 9), OPTIONS)


# --- after_stop


def test_an_accepted_stop_is_the_down_edge() -> None:
    """Counters, cap, boot clock and readiness cleared; the stopped pods' baselines dropped."""
    state = ready(15, p1=SERVING, p2=PodMemory(baseline=3.0, ready_since=T0))
    result = StopResult(trigger=StopTrigger.IDLE, outcomes=(PodStopOutcome(pod_id="p1", ok=True),))
    aftermath = after_stop(state, result, NOW)
    assert aftermath.accepted
    assert aftermath.state == MonitorState(pods={"p2": PodMemory(baseline=3.0)})
    assert set(aftermath.readiness) == {
        ReadinessChange(pod_id="p1", ready_since=None),
        ReadinessChange(pod_id="p2", ready_since=None),
    }


@pytest.mark.parametrize(
    ("state", "trigger", "counters"),
    [
        pytest.param(ready(15, p1=SERVING), StopTrigger.IDLE, ready(0).counters, id="idle"),
        pytest.param(booting(20, p1=SERVING), StopTrigger.BOOT_GRACE, booting(0).counters, id="boot-grace"),
        pytest.param(ready(4, p1=SERVING), StopTrigger.RUNTIME_CAP, ready(4).counters, id="runtime-cap"),
    ],
)
def test_a_refused_stop_keeps_the_phase_and_resets_only_the_counter_that_fired(
    state: MonitorState, trigger: StopTrigger, counters: PhaseCounters
) -> None:
    """A full window elapses before the next attempt; the refusal is logged as a warning."""
    result = StopResult(trigger=trigger, outcomes=(PodStopOutcome(pod_id="p1", ok=False),))
    aftermath = after_stop(state, result, NOW)
    assert not aftermath.accepted
    assert aftermath.state.counters == counters
    assert aftermath.state.pods == state.pods
    assert aftermath.readiness == ()
    [event] = aftermath.events
    assert (event.kind, event.level) == (EventKind.STOP_REFUSED, EventLevel.WARNING)


def test_a_refused_cap_stop_keeps_the_cap_armed_so_the_next_tick_tries_again() -> None:
    """The backstop does not wait out another window after one refused stop: its start time is kept."""
    state = ready(0, p1=SERVING)
    result = StopResult(trigger=StopTrigger.RUNTIME_CAP, outcomes=(PodStopOutcome(pod_id="p1", ok=False),))
    aftermath = after_stop(state, result, NOW)
    assert aftermath.state.cap_started_at == state.cap_started_at
    assert "next tick" in aftermath.events[0].message


def test_a_partly_refused_stop_keeps_the_phase_but_forgets_the_pods_that_did_stop() -> None:
    """Not every targeted stop was accepted, so it is not the Down edge; the stopped pod's process ended."""
    result = StopResult(
        trigger=StopTrigger.IDLE,
        outcomes=(PodStopOutcome(pod_id="p1", ok=True), PodStopOutcome(pod_id="p2", ok=False)),
    )
    aftermath = after_stop(ready(15, p1=SERVING, p2=SERVING), result, NOW)
    assert not aftermath.accepted
    assert aftermath.state == ready(0, p2=SERVING)
    assert aftermath.readiness == (ReadinessChange(pod_id="p1", ready_since=None),)
    assert "p2" in aftermath.events[0].message


def test_a_stop_with_no_outcome_is_not_accepted() -> None:
    """Nothing was stopped, so nothing went down."""
    result = StopResult(trigger=StopTrigger.IDLE, outcomes=())
    assert not after_stop(ready(15, p1=SERVING), result, NOW).accepted
