"""A process that changed unseen between two ticks (a stop and a wake before the monitor ticked): one test per
row of the `incarnation` table, what a tick does with it, and a Ready whose pods were all replaced."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from thermostat.policy.common.pod_model import Lookup, PodObservation, PodStatus, VolumeLookup
from thermostat.policy.idle.idle_phase import Phase, PhaseCounters
from thermostat.policy.idle.incarnation import check_incarnations, ready_pods_gone
from thermostat.policy.idle.monitor_options import MonitorOptions
from thermostat.policy.idle.monitor_state import MonitorState, PodMemory
from thermostat.policy.idle.monitor_tick import EventKind, ReadinessChange, TickObservation, tick
from thermostat.policy.idle.pod_signal import PodReading, PodSignal, PodVerdict
from thermostat.policy.idle.vllm_metrics import PodActivity

T0 = datetime(2026, 9, 9, 9, 40, 41, tzinfo=UTC)
LATER = T0 + timedelta(minutes=5)
READY_A = PodMemory(baseline=12.0, ready_since=T0, incarnation=7)
READY_IDLE = MonitorState(
    counters=PhaseCounters(phase=Phase.READY, idle_streak=4),
    cap_started_at=T0 - timedelta(minutes=3),
    boot_started_at=T0 - timedelta(minutes=3),
    pods={"a": READY_A},
)


def test_the_same_incarnation_keeps_the_memory() -> None:
    check = check_incarnations(READY_IDLE, ("a",), {"a": 7})
    assert (check.state, check.ended, check.went_down) == (READY_IDLE, (), False)


def test_an_unknown_incarnation_keeps_the_memory() -> None:
    """The controller could not read its records: nothing is known, so nothing is forgotten."""
    check = check_incarnations(READY_IDLE, ("a",), {"a": None})
    assert (check.state, check.ended) == (READY_IDLE, ())


def test_memory_taken_without_an_incarnation_adopts_any_without_ending() -> None:
    """A state an older monitor wrote says nothing about which process it described."""
    state = replace(READY_IDLE, pods={"a": replace(READY_A, incarnation=None)})
    check = check_incarnations(state, ("a",), {"a": 9})
    assert (check.state, check.ended) == (state, ())


def test_a_changed_incarnation_ends_the_pod_and_its_ready_phase_takes_the_down_edge() -> None:
    """Stopped and woken between two ticks: counters and boot start cleared, readiness to clear."""
    check = check_incarnations(READY_IDLE, ("a",), {"a": 9})
    assert (check.ended, check.went_down, check.cleared(READY_IDLE)) == (("a",), True, ("a",))
    assert check.state == MonitorState(cap_started_at=READY_IDLE.cap_started_at)


def test_the_runtime_cap_stays_armed_across_an_unseen_restart() -> None:
    """The monitor never saw the volume down; a cap an unseen stop/wake could re-arm is no backstop."""
    check = check_incarnations(READY_IDLE, ("a",), {"a": 9})
    assert check.state.cap_started_at == T0 - timedelta(minutes=3)


def test_a_restarted_booting_pod_gets_a_fresh_boot_budget() -> None:
    """Stopped and woken again mid-load: the boot budget starts over with the new process."""
    booting = MonitorState(
        counters=PhaseCounters(phase=Phase.BOOTING, booting_ticks=11),
        boot_started_at=T0,
        pods={"a": PodMemory(incarnation=7)},
    )
    check = check_incarnations(booting, ("a",), {"a": 8})
    assert (check.went_down, check.state.counters, check.state.boot_started_at) == (True, PhaseCounters(), None)
    assert check.cleared(booting) == ()


def test_a_pod_the_monitor_saw_down_wakes_the_ordinary_way() -> None:
    """Down, remembering only the stop's incarnation: the start that follows is no unseen restart."""
    down = MonitorState(pods={"a": PodMemory(incarnation=7)})
    check = check_incarnations(down, ("a",), {"a": 8})
    assert (check.state, check.ended, check.went_down) == (down, (), False)


def test_a_sibling_that_still_holds_readiness_keeps_the_phase() -> None:
    """Only the restarted pod is forgotten; the one still serving is the phase's reason and did not change."""
    state = replace(READY_IDLE, pods={"a": READY_A, "b": PodMemory(baseline=3.0, ready_since=T0, incarnation=2)})
    check = check_incarnations(state, ("a", "b"), {"a": 9, "b": 2})
    assert (check.ended, check.went_down) == (("a",), False)
    assert check.state == replace(state, pods={"b": state.pods["b"]})


def test_a_pod_not_listed_is_not_checked() -> None:
    """Pods that left the list are the tick's to prune (and clear), not a sign of a restart."""
    check = check_incarnations(READY_IDLE, ("z",), {"z": 1})
    assert (check.state, check.ended) == (READY_IDLE, ())


# ---- what the tick does with it


def answering(pod: str, incarnation: int, *, completed: float = 0.0) -> PodReading:
    return PodReading(pod_id=pod, scrape=PodActivity(active=0, completed=completed), incarnation=incarnation)


def running_unserved(pod: str, incarnation: int) -> PodReading:
    observation = PodObservation(lookup=Lookup.FOUND, pod_id=pod, status=PodStatus.RUNNING, gpu_count=1)
    return PodReading(pod_id=pod, observation=observation, incarnation=incarnation)


def on_volume(*readings: PodReading) -> TickObservation:
    return TickObservation(
        volume=VolumeLookup(lookup=Lookup.FOUND, pod_ids=tuple(r.pod_id for r in readings)), pods=readings
    )


def test_a_restarted_pod_that_answers_is_ready_again_with_a_new_ready_since() -> None:
    """Stop and wake between two ticks, the model loaded before the next: readySince is published again."""
    decision = tick(READY_IDLE, on_volume(answering("a", 9)), LATER, MonitorOptions())
    assert decision.state.phase is Phase.READY
    assert decision.state.counters.idle_streak == 0, "the new process's first scrape seeds its baseline"
    assert decision.readiness == (
        ReadinessChange(pod_id="a", ready_since=None),
        ReadinessChange(pod_id="a", ready_since=LATER, incarnation=9),
    ), "the publish names the new process's incarnation: the controller refuses it once that one ends"
    assert decision.state.pods["a"] == PodMemory(baseline=0.0, ready_since=LATER, incarnation=9)
    assert [e.kind for e in decision.events] == [EventKind.RESTARTED_UNSEEN, EventKind.READY]


def test_a_restarted_pod_still_loading_boots_instead_of_accruing_idle() -> None:
    """Stop and wake between two ticks, the model not loaded yet: Booting, not a dead vLLM counted idle."""
    decision = tick(READY_IDLE, on_volume(running_unserved("a", 9)), LATER, MonitorOptions())
    assert decision.signal.signal is PodSignal.UNREACHABLE_BUT_RUNNING
    assert (decision.state.phase, decision.state.counters.booting_ticks) == (Phase.BOOTING, 1)
    assert decision.state.boot_started_at == LATER
    assert decision.readiness == (ReadinessChange(pod_id="a", ready_since=None),)
    assert decision.state.pods["a"] == PodMemory(incarnation=9)

    ready = tick(decision.state, on_volume(answering("a", 9)), LATER + timedelta(minutes=1), MonitorOptions())
    assert ready.readiness == (ReadinessChange(pod_id="a", ready_since=LATER + timedelta(minutes=1), incarnation=9),)
    assert ready.state.phase is Phase.READY


def test_a_publish_observed_without_an_incarnation_names_none() -> None:
    """The controller could not read its records this tick: only this observe vouches for the process that
    answered, so the remembered incarnation (an earlier observe's) is not sent in its place."""
    booting = MonitorState(
        counters=PhaseCounters(phase=Phase.BOOTING, booting_ticks=3), pods={"a": PodMemory(incarnation=7)}
    )
    unread = PodReading(pod_id="a", scrape=PodActivity(active=0, completed=0.0), incarnation=None)
    decision = tick(booting, on_volume(unread), LATER, MonitorOptions())
    assert decision.readiness == (ReadinessChange(pod_id="a", ready_since=LATER, incarnation=None),)
    assert decision.state.pods["a"].incarnation == 7, "the memory keeps what it knew"


def test_the_same_process_unreachable_after_ready_still_accrues_idle() -> None:
    """A vLLM that died after serving (#1998) is unchanged: its incarnation did not move."""
    decision = tick(READY_IDLE, on_volume(running_unserved("a", 7)), LATER, MonitorOptions())
    assert (decision.state.phase, decision.state.counters.idle_streak) == (Phase.READY, 5)
    assert decision.readiness == ()


# ---- ready_pods_gone: a replacement with a new id


def verdict(pod: str, signal: PodSignal, *, ended: bool = False) -> PodVerdict:
    return PodVerdict(pod_id=pod, signal=signal, process_ended=ended)


READY_ON_A = replace(READY_IDLE, pods={"a": replace(READY_A, incarnation=None)})


def test_ready_whose_pods_all_left_the_list_is_stale_when_a_replacement_carries_it() -> None:
    unserved = PodSignal.UNREACHABLE_BUT_RUNNING
    assert ready_pods_gone(READY_ON_A, [verdict("b", unserved)], unserved)


def test_ready_whose_pods_are_all_observed_ended_is_stale_when_a_replacement_carries_it() -> None:
    verdicts = [verdict("a", PodSignal.NOT_RUNNING, ended=True), verdict("b", PodSignal.IDLE)]
    assert ready_pods_gone(READY_ON_A, verdicts, PodSignal.IDLE)


def test_ready_with_a_ready_pod_still_listed_and_not_ended_is_kept() -> None:
    verdicts = [verdict("a", PodSignal.UNREACHABLE_BUT_RUNNING), verdict("b", PodSignal.BUSY)]
    assert not ready_pods_gone(READY_ON_A, verdicts, PodSignal.BUSY)


def test_a_booting_or_not_running_aggregate_is_left_to_the_phase_table() -> None:
    for signal in (PodSignal.BOOTING, PodSignal.NOT_RUNNING):
        assert not ready_pods_gone(READY_ON_A, [verdict("b", signal)], signal)


def test_an_unknown_aggregate_advances_nothing() -> None:
    assert not ready_pods_gone(READY_ON_A, [verdict("b", PodSignal.UNKNOWN)], PodSignal.UNKNOWN)


def test_only_ready_can_be_stale() -> None:
    booting = replace(READY_ON_A, counters=PhaseCounters(phase=Phase.BOOTING, booting_ticks=2))
    assert not ready_pods_gone(booting, [verdict("b", PodSignal.IDLE)], PodSignal.IDLE)


def test_ready_without_remembered_readiness_is_not_judged() -> None:
    """Nothing says which pods Ready rested on (a state that kept no readiness): the phase table decides."""
    assert not ready_pods_gone(replace(READY_IDLE, pods={}), [verdict("b", PodSignal.IDLE)], PodSignal.IDLE)


def test_a_replacement_still_loading_boots_with_the_cap_kept() -> None:
    decision = tick(READY_ON_A, on_volume(running_unserved("b", 1)), LATER, MonitorOptions())
    assert (decision.state.phase, decision.state.counters.booting_ticks) == (Phase.BOOTING, 1)
    assert decision.state.cap_started_at == READY_IDLE.cap_started_at
    assert decision.readiness == (ReadinessChange(pod_id="a", ready_since=None),)
    assert [e.kind for e in decision.events] == [EventKind.READY_PODS_GONE]
