"""The Down / Booting / Ready phase machine, one test per rule of its table (pod-control seed: #2052, #2101, #1998)."""

from __future__ import annotations

import pytest

from thermostat.policy.idle.idle_phase import (
    Phase,
    PhaseCounters,
    PhaseEdge,
    StopTrigger,
    advance_phase,
    after_accepted_stop,
    after_refused_stop,
    phase_stop_due,
)
from thermostat.policy.idle.pod_signal import PodSignal

S = PodSignal
DOWN = PhaseCounters()


def booting(ticks: int) -> PhaseCounters:
    return PhaseCounters(phase=Phase.BOOTING, booting_ticks=ticks)


def ready(streak: int) -> PhaseCounters:
    return PhaseCounters(phase=Phase.READY, idle_streak=streak)


@pytest.mark.parametrize(
    "counters",
    [pytest.param(DOWN, id="down"), pytest.param(booting(4), id="booting"), pytest.param(ready(7), id="ready")],
)
def test_not_running_enters_down_from_any_phase_and_clears_both_counters(counters: PhaseCounters) -> None:
    """Genuinely down resets everything."""
    step = advance_phase(counters, S.NOT_RUNNING)
    assert step.counters == DOWN
    assert step.edge is (PhaseEdge.NONE if counters == DOWN else PhaseEdge.WENT_DOWN)


@pytest.mark.parametrize(
    "counters",
    [pytest.param(DOWN, id="down"), pytest.param(booting(4), id="booting"), pytest.param(ready(7), id="ready")],
)
def test_unknown_never_advances_anything(counters: PhaseCounters) -> None:
    """A blip neither boots, idles, readies nor resets."""
    step = advance_phase(counters, S.UNKNOWN)
    assert (step.counters, step.edge, step.idle_accrued, step.boot_accrued) == (counters, PhaseEdge.NONE, False, False)


@pytest.mark.parametrize(
    "signal",
    [pytest.param(S.BOOTING, id="booting"), pytest.param(S.UNREACHABLE_BUT_RUNNING, id="running-without-metrics")],
)
def test_a_positive_startup_from_down_enters_booting_with_the_first_tick_counted(signal: PodSignal) -> None:
    """Provisioning, Starting and Running-without-metrics all spend the boot budget from their first tick."""
    step = advance_phase(DOWN, signal)
    assert (step.counters, step.edge, step.boot_accrued) == (booting(1), PhaseEdge.BOOT_STARTED, True)


@pytest.mark.parametrize(
    "signal",
    [pytest.param(S.BOOTING, id="booting"), pytest.param(S.UNREACHABLE_BUT_RUNNING, id="running-without-metrics")],
)
def test_mixed_startup_phases_share_one_boot_budget(signal: PodSignal) -> None:
    """BootingTicks+1 across Provisioning, Starting and Running without metrics (#2101)."""
    step = advance_phase(booting(3), signal)
    assert (step.counters, step.edge, step.boot_accrued) == (booting(4), PhaseEdge.NONE, True)


def test_the_model_load_is_not_idle() -> None:
    """Running without metrics before ready is booting, never idle streak (#2052)."""
    step = advance_phase(booting(5), S.UNREACHABLE_BUT_RUNNING)
    assert step.counters.idle_streak == 0
    assert not step.idle_accrued


@pytest.mark.parametrize("counters", [pytest.param(DOWN, id="from-down"), pytest.param(booting(6), id="from-booting")])
def test_a_busy_first_answer_enters_ready_with_streak_zero(counters: PhaseCounters) -> None:
    """First Busy since up: Ready, nothing banked yet."""
    step = advance_phase(counters, S.BUSY)
    assert (step.counters, step.edge) == (ready(0), PhaseEdge.BECAME_READY)


@pytest.mark.parametrize("counters", [pytest.param(DOWN, id="from-down"), pytest.param(booting(6), id="from-booting")])
def test_an_idle_ready_tick_counts_as_the_first_idle_observation(counters: PhaseCounters) -> None:
    """The ready tick itself is idle evidence when the scrape is Idle."""
    step = advance_phase(counters, S.IDLE)
    assert (step.counters, step.edge, step.idle_accrued) == (ready(1), PhaseEdge.BECAME_READY, True)


def test_busy_while_ready_resets_the_streak() -> None:
    """Any busy tick starts the idle window again."""
    step = advance_phase(ready(14), S.BUSY)
    assert (step.counters, step.edge, step.idle_accrued) == (ready(0), PhaseEdge.NONE, False)


@pytest.mark.parametrize(
    "signal", [pytest.param(S.IDLE, id="idle"), pytest.param(S.UNREACHABLE_BUT_RUNNING, id="vllm-died-after-serving")]
)
def test_idle_or_unreachable_while_ready_accrues(signal: PodSignal) -> None:
    """A vLLM that dies after serving bills like idle (#1998), so it accrues."""
    step = advance_phase(ready(3), signal)
    assert (step.counters, step.idle_accrued) == (ready(4), True)


def test_a_new_startup_after_ready_starts_a_fresh_boot_budget() -> None:
    """#2101: Provisioning/Starting after Ready is a new boot, not more of the old one."""
    step = advance_phase(ready(9), S.BOOTING)
    assert (step.counters, step.edge, step.boot_accrued) == (booting(1), PhaseEdge.BOOT_RESTARTED, True)


def test_every_phase_and_signal_pair_has_a_rule() -> None:
    """The table is total: no combination falls through."""
    for phase in Phase:
        for signal in PodSignal:
            advance_phase(PhaseCounters(phase=phase), signal)


@pytest.mark.parametrize(
    ("counters", "signal", "trigger"),
    [
        pytest.param(ready(13), S.IDLE, None, id="idle-below-window"),
        pytest.param(ready(14), S.IDLE, StopTrigger.IDLE, id="idle-15th-observation-stops"),
        pytest.param(ready(14), S.UNREACHABLE_BUT_RUNNING, StopTrigger.IDLE, id="dead-vllm-15th-stops"),
        pytest.param(ready(40), S.BUSY, None, id="busy-never-stops"),
        pytest.param(ready(40), S.UNKNOWN, None, id="unknown-never-stops"),
        pytest.param(booting(18), S.BOOTING, None, id="boot-below-grace"),
        pytest.param(booting(19), S.BOOTING, StopTrigger.BOOT_GRACE, id="boot-20th-tick-stops"),
        pytest.param(booting(19), S.UNREACHABLE_BUT_RUNNING, StopTrigger.BOOT_GRACE, id="never-ready-stops"),
        pytest.param(booting(40), S.UNKNOWN, None, id="unknown-pauses-boot-grace"),
        pytest.param(booting(40), S.BUSY, None, id="ready-at-last-moment"),
    ],
)
def test_a_stop_is_due_only_when_the_counter_that_just_advanced_reaches_its_threshold(
    counters: PhaseCounters, signal: PodSignal, trigger: StopTrigger | None
) -> None:
    """StopIdle at ceil(IDLE/CHECK) = 15, StopBootGrace at ceil(GRACE/CHECK) = 20, on an accruing tick."""
    step = advance_phase(counters, signal)
    assert phase_stop_due(step, idle_threshold=15, boot_grace_threshold=20) is trigger


def test_a_zero_boot_grace_threshold_disables_the_boot_grace_stop() -> None:
    """RUNPOD_BOOT_GRACE_MINUTES=0: then only the cap stops a pod that never comes up."""
    step = advance_phase(booting(10_000), S.BOOTING)
    assert phase_stop_due(step, idle_threshold=15, boot_grace_threshold=0) is None


def test_an_accepted_stop_is_the_down_edge() -> None:
    """Idle, boot-grace and cap alike: both counters cleared, phase Down."""
    assert after_accepted_stop() == DOWN


@pytest.mark.parametrize(
    ("counters", "trigger", "after"),
    [
        pytest.param(ready(15), StopTrigger.IDLE, ready(0), id="idle-resets-streak-keeps-ready"),
        pytest.param(booting(20), StopTrigger.BOOT_GRACE, booting(0), id="grace-resets-ticks-keeps-booting"),
        pytest.param(ready(6), StopTrigger.RUNTIME_CAP, ready(6), id="cap-leaves-the-phase-counters"),
    ],
)
def test_a_refused_stop_resets_only_the_counter_that_fired_and_keeps_the_phase(
    counters: PhaseCounters, trigger: StopTrigger, after: PhaseCounters
) -> None:
    """A full window elapses before the next attempt, and "ready" is logged once per boot."""
    assert after_refused_stop(counters, trigger) == after
