"""Properties of the idle monitor that must hold for every state and every observation, not just the seeds'."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from thermostat.policy.common.pod_model import Lookup, PodObservation, PodStatus, VolumeLookup
from thermostat.policy.idle.idle_phase import Phase, PhaseCounters, StopTrigger
from thermostat.policy.idle.monitor_options import MonitorOptions
from thermostat.policy.idle.monitor_state import MonitorState, PodMemory
from thermostat.policy.idle.monitor_tick import (
    PodStopOutcome,
    ReadinessChange,
    StopResult,
    TickDecision,
    TickObservation,
    after_stop,
    tick,
)
from thermostat.policy.idle.pod_signal import PodReading, PodSignal
from thermostat.policy.idle.vllm_metrics import PodActivity, parse_vllm_metrics

T0 = datetime(2026, 9, 9, 9, 0, tzinfo=UTC)
POD_IDS = ("a", "b", "c")

times = st.integers(min_value=0, max_value=3 * 24 * 3600).map(lambda s: T0 + timedelta(seconds=s))
optional_times = st.none() | times
counters = st.builds(
    PhaseCounters,
    phase=st.sampled_from(Phase),
    idle_streak=st.integers(min_value=0, max_value=30),
    booting_ticks=st.integers(min_value=0, max_value=30),
)
memories = st.builds(
    PodMemory,
    baseline=st.none() | st.integers(min_value=0, max_value=20).map(float),
    ready_since=optional_times,
)
states = st.builds(
    MonitorState,
    counters=counters,
    cap_started_at=optional_times,
    boot_started_at=optional_times,
    pods=st.dictionaries(st.sampled_from(POD_IDS), memories, max_size=3),
)
activities = st.builds(
    PodActivity,
    active=st.none() | st.integers(min_value=0, max_value=2),
    completed=st.none() | st.integers(min_value=0, max_value=20).map(float),
)


@st.composite
def readings(draw: st.DrawFn, pod_id: str) -> PodReading:
    observation = draw(
        st.none()
        | st.builds(
            PodObservation, lookup=st.sampled_from(Lookup), pod_id=st.just(pod_id), status=st.sampled_from(PodStatus)
        )
    )
    return PodReading(pod_id=pod_id, observation=observation, scrape=draw(st.none() | activities))


@st.composite
def observations(draw: st.DrawFn) -> TickObservation:
    lookup = draw(st.sampled_from(Lookup))
    listed = draw(st.lists(st.sampled_from(POD_IDS), unique=True, max_size=3)) if lookup is Lookup.FOUND else []
    return TickObservation(
        volume=VolumeLookup(lookup=lookup, pod_ids=tuple(listed)),
        pods=tuple(draw(readings(pod_id)) for pod_id in listed),
    )


@st.composite
def options(draw: st.DrawFn, *, cap: bool = True) -> MonitorOptions:
    return MonitorOptions(
        idle_minutes=draw(st.integers(min_value=0, max_value=5)),
        check_seconds=60,
        boot_grace_minutes=draw(st.integers(min_value=0, max_value=5)),
        max_runtime_minutes=draw(st.integers(min_value=0, max_value=600)) if cap else 0,
    )


def published(before: MonitorState, changes: tuple[ReadinessChange, ...]) -> dict[str, datetime]:
    """The readiness registry the service maintains by applying the decision's changes, in order."""
    registry = dict(before.readiness)
    for change in changes:
        if change.ready_since is None:
            registry.pop(change.pod_id, None)
        else:
            registry[change.pod_id] = change.ready_since
    return registry


@given(state=states, observation=observations(), now=times, opts=options(cap=False))
def test_a_tick_that_reads_busy_never_stops_on_that_tick(
    state: MonitorState, observation: TickObservation, now: datetime, opts: MonitorOptions
) -> None:
    """With the cap off, a Busy aggregate never yields a stop order, whatever the counters say."""
    decision = tick(state, observation, now, opts)
    if decision.signal.signal is PodSignal.BUSY:
        assert decision.stop is None
        assert decision.state.counters.idle_streak == 0


@given(state=states, observation=observations(), now=times, opts=options())
def test_only_the_runtime_cap_can_stop_a_busy_tick(
    state: MonitorState, observation: TickObservation, now: datetime, opts: MonitorOptions
) -> None:
    """The phantom-busy backstop is the one stop a busy pod can get."""
    decision = tick(state, observation, now, opts)
    if decision.signal.signal is PodSignal.BUSY and decision.stop is not None:
        assert decision.stop.trigger is StopTrigger.RUNTIME_CAP


@given(state=states, observation=observations(), now=times, opts=options())
def test_unknown_never_advances_anything(
    state: MonitorState, observation: TickObservation, now: datetime, opts: MonitorOptions
) -> None:
    """An Unknown tick keeps phase, both counters, the cap and the boot clock, readies nothing, idles nothing."""
    decision = tick(state, observation, now, opts)
    if decision.signal.signal is not PodSignal.UNKNOWN:
        return
    assert decision.state.counters == state.counters
    assert (decision.state.cap_started_at, decision.state.boot_started_at) == (
        state.cap_started_at,
        state.boot_started_at,
    )
    assert all(change.ready_since is None for change in decision.readiness)
    assert decision.stop is None or decision.stop.trigger is StopTrigger.RUNTIME_CAP


@given(state=states, observation=observations(), now=times, opts=options())
def test_the_published_readiness_always_matches_the_state(
    state: MonitorState, observation: TickObservation, now: datetime, opts: MonitorOptions
) -> None:
    """Applying a decision's readiness changes to the old registry gives exactly the new state's readiness."""
    decision = tick(state, observation, now, opts)
    assert published(state, decision.readiness) == decision.state.readiness


@given(state=states, observation=observations(), now=times, opts=options(), ok=st.lists(st.booleans(), max_size=3))
def test_after_stop_keeps_the_published_readiness_consistent_and_accepted_means_down(
    state: MonitorState, observation: TickObservation, now: datetime, opts: MonitorOptions, ok: list[bool]
) -> None:
    """An accepted stop leaves Down with no readiness and no cap; any outcome keeps the registry in step."""
    decision = tick(state, observation, now, opts)
    if decision.stop is None:
        return
    outcomes = tuple(PodStopOutcome(pod_id=pod, ok=o) for pod, o in zip(decision.stop.pod_ids, ok, strict=False))
    aftermath = after_stop(decision.state, StopResult(trigger=decision.stop.trigger, outcomes=outcomes), now)
    assert published(decision.state, aftermath.readiness) == aftermath.state.readiness
    if aftermath.accepted:
        assert aftermath.state.counters == PhaseCounters()
        assert (aftermath.state.readiness, aftermath.state.cap_started_at) == ({}, None)
    else:
        assert aftermath.state.phase is decision.state.phase


@given(state=states, observation=observations(), now=times, opts=options())
def test_every_state_a_tick_produces_survives_persistence(
    state: MonitorState, observation: TickObservation, now: datetime, opts: MonitorOptions
) -> None:
    """What the service writes to Postgres reads back equal, so a failed-over replica continues exactly."""
    decision = tick(state, observation, now, opts)
    assert MonitorState.from_dict(json.loads(json.dumps(decision.state.to_dict()))) == decision.state


@given(state=states, observation=observations(), now=times, opts=options())
def test_not_running_leaves_everything_down(
    state: MonitorState, observation: TickObservation, now: datetime, opts: MonitorOptions
) -> None:
    """Genuinely down: Down, counters and cap cleared, no readiness, no stop."""
    decision: TickDecision = tick(state, observation, now, opts)
    if decision.signal.signal is PodSignal.NOT_RUNNING:
        assert decision.state.counters == PhaseCounters()
        assert (decision.state.cap_started_at, decision.state.readiness, decision.stop) == (None, {}, None)


# A pod's life, one tick per step. The pod keeps its id "p" throughout, as RunPod does across stop/start.
LIFE_STEPS = st.sampled_from(
    [
        "idle",  # vLLM answers, nothing done since the last scrape
        "turn_between_ticks",  # a turn began and ended since the last scrape
        "in_flight",  # a request is running right now
        "metrics_502",  # RUNNING, /metrics unreachable
        "blip",  # control plane unreadable too
        "starting",  # confirmed startup: a new process
        "exited",  # confirmed down
        "silent_restart",  # the process restarted without us seeing it; its counter starts again
    ]
)


@settings(max_examples=300)
@given(
    steps=st.lists(LIFE_STEPS, min_size=1, max_size=60),
    idle_minutes=st.integers(min_value=1, max_value=4),
    accept=st.lists(st.booleans(), min_size=60, max_size=60),
)
def test_a_pod_that_comes_back_under_the_same_id_never_enters_ready_with_idle_streak_one(
    steps: list[str], idle_minutes: int, accept: list[bool]
) -> None:
    """Whenever Ready is entered on a scrape that carries a counter, nothing has been banked yet (#2075)."""
    opts = MonitorOptions(idle_minutes=idle_minutes, boot_grace_minutes=3)
    state, now, counter = MonitorState(), T0, 0.0
    volume = VolumeLookup(lookup=Lookup.FOUND, pod_ids=("p",))
    for index, step in enumerate(steps):
        if step in ("starting", "exited", "silent_restart"):
            counter = 0.0
        if step == "turn_between_ticks":
            counter += 1.0
        reading = _reading(step, counter)
        decision = tick(state, TickObservation(volume=volume, pods=(reading,)), now, opts)
        if state.phase is not Phase.READY and decision.state.phase is Phase.READY:
            assert decision.state.counters.idle_streak == 0, f"entered Ready with a banked idle tick at step {index}"
        state = decision.state
        if decision.stop is not None:
            outcome = PodStopOutcome(pod_id="p", ok=accept[index])
            state = after_stop(state, StopResult(trigger=decision.stop.trigger, outcomes=(outcome,)), now).state
            if accept[index]:
                counter = 0.0
        now += opts.check_interval


def _reading(step: str, counter: float) -> PodReading:
    if step in ("idle", "turn_between_ticks", "silent_restart"):
        return PodReading(pod_id="p", scrape=PodActivity(active=0, completed=counter))
    if step == "in_flight":
        return PodReading(pod_id="p", scrape=PodActivity(active=1, completed=counter))
    if step == "blip":
        return PodReading(pod_id="p", observation=PodObservation(lookup=Lookup.UNREADABLE, pod_id="p"))
    status = {"metrics_502": PodStatus.RUNNING, "starting": PodStatus.STARTING, "exited": PodStatus.EXITED}[step]
    return PodReading(pod_id="p", observation=PodObservation(lookup=Lookup.FOUND, pod_id="p", status=status))


METRIC_LINES = st.lists(
    st.sampled_from(
        [
            "vllm:num_requests_running",
            "vllm:num_requests_waiting",
            "vllm:request_success_total",
            "vllm:prompt_tokens",
            "# TYPE vllm:prompt_tokens counter",
            "# EOF",
            '{"vllm:generation_tokens_total"',
            '{engine="0",model_name="a\\"b}"}',
            "NaN",
            "+Inf",
            "-Inf",
            "1e308",
            "3.5",
            "-2",
            ' # {trace_id="x"} 1.0',
            "\n",
            " ",
        ]
    )
    | st.text(max_size=8),
    max_size=40,
).map("".join)


@given(text=METRIC_LINES)
def test_the_metrics_parser_never_raises_and_never_returns_non_finite_numbers(text: str) -> None:
    """Whatever a proxy or a half-written exposition returns, the scrape reads as numbers or as absent."""
    activity = parse_vllm_metrics(text)
    assert activity.active is None or activity.active >= 0
    assert activity.completed is None or math.isfinite(activity.completed)
