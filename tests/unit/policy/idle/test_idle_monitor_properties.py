"""Properties of the idle monitor that must hold for every state and every observation, not just the seeds'."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from thermostat.policy.common.pod_model import Lookup, PodObservation, PodStatus, VolumeLookup
from thermostat.policy.idle.idle_phase import Phase, PhaseCounters, StopTrigger
from thermostat.policy.idle.monitor_options import MonitorOptions
from thermostat.policy.idle.monitor_state import MonitorState, PodMemory
from thermostat.policy.idle.monitor_tick import (
    EventKind,
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


def states_with(
    phase_counters: st.SearchStrategy[PhaseCounters] = counters, *, min_pods: int = 0
) -> st.SearchStrategy[MonitorState]:
    return st.builds(
        MonitorState,
        counters=phase_counters,
        cap_started_at=optional_times,
        boot_started_at=optional_times,
        pods=st.dictionaries(st.sampled_from(POD_IDS), memories, min_size=min_pods, max_size=3),
    )


states = states_with()


_STATUSES = {
    PodSignal.UNREACHABLE_BUT_RUNNING: [PodStatus.RUNNING],
    PodSignal.BOOTING: [PodStatus.PROVISIONING, PodStatus.STARTING],
    PodSignal.NOT_RUNNING: [PodStatus.EXITED, PodStatus.ERROR, PodStatus.TERMINATED],
}
counts = st.integers(min_value=0, max_value=20).map(float)


def any_observation(pod_id: str) -> st.SearchStrategy[PodObservation]:
    return st.builds(
        PodObservation, lookup=st.sampled_from(Lookup), pod_id=st.just(pod_id), status=st.sampled_from(PodStatus)
    )


def status_of(pod_id: str, statuses: list[PodStatus]) -> st.SearchStrategy[PodObservation]:
    return st.builds(
        PodObservation, lookup=st.just(Lookup.FOUND), pod_id=st.just(pod_id), status=st.sampled_from(statuses)
    )


def _busy(baseline: float | None) -> st.SearchStrategy[PodActivity]:
    in_flight = st.builds(PodActivity, active=st.integers(min_value=1, max_value=3), completed=st.none() | counts)
    if baseline is None:
        return in_flight | st.builds(PodActivity, active=st.sampled_from([None, 0]), completed=counts)
    advanced = counts.map(lambda more: baseline + 1 + more)
    backwards = st.floats(min_value=0, max_value=baseline, exclude_max=True) if baseline > 0 else st.nothing()
    return in_flight | st.builds(PodActivity, active=st.sampled_from([None, 0]), completed=advanced | backwards)


def _idle(baseline: float | None) -> st.SearchStrategy[PodActivity]:
    gauge_only = st.just(PodActivity(active=0))
    if baseline is None:
        return gauge_only
    return gauge_only | st.builds(PodActivity, active=st.sampled_from([None, 0]), completed=st.just(baseline))


@st.composite
def readings(draw: st.DrawFn, pod_id: str, signal: PodSignal, baseline: float | None) -> PodReading | None:
    """A reading of `pod_id` that `classify_pod` reads as `signal` against the pod's stored `baseline`.

    None is a listed pod the tick gathered nothing about (Unknown). Every way to a signal is drawn: busy by a
    request in flight, a counter that advanced, went backwards or has no baseline; idle by the gauge alone or
    an unchanged counter; the control-plane signals with /metrics unreachable or answering no vLLM family.
    """
    if signal in (PodSignal.BUSY, PodSignal.IDLE):
        return PodReading(
            pod_id=pod_id,
            observation=draw(st.none() | any_observation(pod_id)),
            scrape=draw(_busy(baseline) if signal is PodSignal.BUSY else _idle(baseline)),
        )
    if signal is PodSignal.UNKNOWN:
        unanswered = st.builds(
            PodObservation,
            lookup=st.sampled_from([Lookup.NOT_FOUND, Lookup.UNREADABLE]),
            pod_id=st.just(pod_id),
            status=st.sampled_from(PodStatus),
        )
        observation = draw(st.none() | unanswered | status_of(pod_id, [PodStatus.UNKNOWN]))
        if observation is None and draw(st.booleans()):
            return None
    else:
        observation = draw(status_of(pod_id, _STATUSES[signal]))
    return PodReading(pod_id=pod_id, observation=observation, scrape=draw(st.none() | st.just(PodActivity())))


@st.composite
def ticks(
    draw: st.DrawFn, signal: PodSignal, state: st.SearchStrategy[MonitorState] = states
) -> tuple[MonitorState, TickObservation]:
    """A state and an observation whose tick reads `signal` for the volume.

    Unknown may also be an unreadable volume, NotRunning a volume with no pod; otherwise one listed pod
    reads `signal` and every other reads it or a signal below it.
    """
    before = draw(state)
    if signal is PodSignal.UNKNOWN and draw(st.booleans()):
        return before, TickObservation(volume=VolumeLookup(lookup=Lookup.UNREADABLE))
    if signal is PodSignal.NOT_RUNNING and draw(st.booleans()):
        lookup = draw(st.sampled_from([Lookup.NOT_FOUND, Lookup.FOUND]))
        return before, TickObservation(volume=VolumeLookup(lookup=lookup))
    listed = draw(st.lists(st.sampled_from(POD_IDS), unique=True, min_size=1, max_size=3))
    decisive = draw(st.sampled_from(listed))
    below = [other for other in PodSignal if other.priority < signal.priority] + [signal]
    pods = []
    for pod_id in listed:
        pod_signal = signal if pod_id == decisive else draw(st.sampled_from(below))
        memory = before.pods.get(pod_id) or PodMemory()
        reading = draw(readings(pod_id, pod_signal, memory.baseline))
        if reading is not None:
            pods.append(reading)
    return before, TickObservation(volume=VolumeLookup(lookup=Lookup.FOUND, pod_ids=tuple(listed)), pods=tuple(pods))


any_tick = st.sampled_from(PodSignal).flatmap(ticks)


@st.composite
def options(draw: st.DrawFn, *, cap: bool = True) -> MonitorOptions:
    return MonitorOptions(
        idle_minutes=draw(st.integers(min_value=0, max_value=5)),
        check_seconds=60,
        boot_grace_minutes=draw(st.integers(min_value=0, max_value=5)),
        max_runtime_minutes=draw(st.integers(min_value=0, max_value=600)) if cap else 0,
    )


def with_cap_started(
    state: MonitorState, opts: MonitorOptions, now: datetime, *, run_out: bool, extra: int
) -> MonitorState:
    """`state` with its cap armed so that at `now` it has run out, or has `extra` seconds still to go."""
    assert opts.max_runtime is not None
    deadline_passed_by = timedelta(seconds=extra) if run_out else -timedelta(seconds=1 + extra)
    return replace(state, cap_started_at=now - opts.max_runtime - deadline_passed_by)


@st.composite
def stopping_ticks(draw: st.DrawFn) -> tuple[MonitorState, TickObservation, datetime, MonitorOptions]:
    """A tick that issues a stop, by each trigger: the runtime cap run out, an idle streak one tick short of
    its threshold (or past it), a boot grace one tick short (or past it)."""
    opts, now = draw(options()), draw(times)
    trigger = draw(st.sampled_from(StopTrigger))
    if trigger is StopTrigger.RUNTIME_CAP:
        opts = replace(opts, max_runtime_minutes=draw(st.integers(min_value=1, max_value=600)))
        signal = draw(st.sampled_from([s for s in PodSignal if s is not PodSignal.NOT_RUNNING]))
        # past the cap, an unreadable volume stops the pods last seen, so the state remembers at least one
        before, observation = draw(ticks(signal, states_with(min_pods=1)))
        extra = draw(st.integers(min_value=0, max_value=3600))
        return with_cap_started(before, opts, now, run_out=True, extra=extra), observation, now, opts
    if trigger is StopTrigger.IDLE:
        short = opts.idle_threshold - 1 + draw(st.integers(min_value=0, max_value=3))
        ready = st.just(PhaseCounters(phase=Phase.READY, idle_streak=short))
        signal = draw(st.sampled_from([PodSignal.IDLE, PodSignal.UNREACHABLE_BUT_RUNNING]))
        before, observation = draw(ticks(signal, states_with(ready)))
        # the streak must belong to a pod still listed: when every pod that was ready is gone, the tick starts a
        # fresh idle window for the pod that replaced it (incarnation.ready_pods_gone) and stops nothing
        kinds = {event.kind for event in tick(before, observation, now, opts).events}
        assume(EventKind.READY_PODS_GONE not in kinds)
        return before, observation, now, opts
    opts = replace(opts, boot_grace_minutes=draw(st.integers(min_value=1, max_value=5)))
    short = opts.boot_grace_threshold - 1 + draw(st.integers(min_value=0, max_value=3))
    booting = st.just(PhaseCounters(phase=Phase.BOOTING, booting_ticks=short))
    signal = draw(st.sampled_from([PodSignal.BOOTING, PodSignal.UNREACHABLE_BUT_RUNNING]))
    before, observation = draw(ticks(signal, states_with(booting)))
    return before, observation, now, opts


def published(before: MonitorState, changes: tuple[ReadinessChange, ...]) -> dict[str, datetime]:
    """The readiness registry the service maintains by applying the decision's changes, in order."""
    registry = dict(before.readiness)
    for change in changes:
        if change.ready_since is None:
            registry.pop(change.pod_id, None)
        else:
            registry[change.pod_id] = change.ready_since
    return registry


# Each property below draws only ticks that reach what it asserts, so every example checks it.
EVERY_TICK = settings(max_examples=200)


@EVERY_TICK
@given(tick_=ticks(PodSignal.BUSY), now=times, opts=options(cap=False))
def test_a_tick_that_reads_busy_never_stops_on_that_tick(
    tick_: tuple[MonitorState, TickObservation], now: datetime, opts: MonitorOptions
) -> None:
    """With the cap off, a Busy aggregate never yields a stop order, whatever the counters say."""
    state, observation = tick_
    decision = tick(state, observation, now, opts)
    assert decision.signal.signal is PodSignal.BUSY
    assert decision.stop is None
    assert decision.state.counters.idle_streak == 0


@EVERY_TICK
@given(
    tick_=ticks(PodSignal.BUSY),
    now=times,
    opts=options(),
    run_out=st.booleans(),
    extra=st.integers(min_value=0, max_value=3600),
)
def test_only_the_runtime_cap_can_stop_a_busy_tick(
    tick_: tuple[MonitorState, TickObservation], now: datetime, opts: MonitorOptions, run_out: bool, extra: int
) -> None:
    """The phantom-busy backstop is the one stop a busy pod can get, and once the cap has run out it gets it."""
    state, observation = tick_
    opts = replace(opts, max_runtime_minutes=max(opts.max_runtime_minutes, 1))
    decision = tick(with_cap_started(state, opts, now, run_out=run_out, extra=extra), observation, now, opts)
    assert decision.signal.signal is PodSignal.BUSY
    assert decision.stop is not None if run_out else decision.stop is None
    assert decision.stop is None or decision.stop.trigger is StopTrigger.RUNTIME_CAP


@EVERY_TICK
@given(tick_=ticks(PodSignal.UNKNOWN), now=times, opts=options())
def test_unknown_never_advances_anything(
    tick_: tuple[MonitorState, TickObservation], now: datetime, opts: MonitorOptions
) -> None:
    """An Unknown tick keeps phase, both counters, the cap and the boot clock, readies nothing, idles nothing."""
    state, observation = tick_
    decision = tick(state, observation, now, opts)
    assert decision.signal.signal is PodSignal.UNKNOWN
    assert decision.state.counters == state.counters
    assert (decision.state.cap_started_at, decision.state.boot_started_at) == (
        state.cap_started_at,
        state.boot_started_at,
    )
    assert all(change.ready_since is None for change in decision.readiness)
    assert decision.stop is None or decision.stop.trigger is StopTrigger.RUNTIME_CAP


@EVERY_TICK
@given(tick_=any_tick, now=times, opts=options())
def test_the_published_readiness_always_matches_the_state(
    tick_: tuple[MonitorState, TickObservation], now: datetime, opts: MonitorOptions
) -> None:
    """Applying a decision's readiness changes to the old registry gives exactly the new state's readiness."""
    state, observation = tick_
    decision = tick(state, observation, now, opts)
    assert published(state, decision.readiness) == decision.state.readiness


@EVERY_TICK
@given(stopping=stopping_ticks(), ok=st.just([True] * len(POD_IDS)) | st.lists(st.booleans(), max_size=3))
def test_after_stop_keeps_the_published_readiness_consistent_and_accepted_means_down(
    stopping: tuple[MonitorState, TickObservation, datetime, MonitorOptions], ok: list[bool]
) -> None:
    """An accepted stop leaves Down with no readiness and no cap; any outcome keeps the registry in step."""
    state, observation, now, opts = stopping
    decision = tick(state, observation, now, opts)
    assert decision.stop is not None
    outcomes = tuple(PodStopOutcome(pod_id=pod, ok=o) for pod, o in zip(decision.stop.pod_ids, ok, strict=False))
    aftermath = after_stop(decision.state, StopResult(trigger=decision.stop.trigger, outcomes=outcomes), now)
    assert published(decision.state, aftermath.readiness) == aftermath.state.readiness
    if aftermath.accepted:
        assert aftermath.state.counters == PhaseCounters()
        assert (aftermath.state.readiness, aftermath.state.cap_started_at) == ({}, None)
    else:
        assert aftermath.state.phase is decision.state.phase


@EVERY_TICK
@given(tick_=any_tick, now=times, opts=options())
def test_every_state_a_tick_produces_survives_persistence(
    tick_: tuple[MonitorState, TickObservation], now: datetime, opts: MonitorOptions
) -> None:
    """What the service writes to Postgres reads back equal, so a failed-over replica continues exactly."""
    state, observation = tick_
    decision = tick(state, observation, now, opts)
    assert MonitorState.from_dict(json.loads(json.dumps(decision.state.to_dict()))) == decision.state


@EVERY_TICK
@given(tick_=ticks(PodSignal.NOT_RUNNING), now=times, opts=options())
def test_not_running_leaves_everything_down(
    tick_: tuple[MonitorState, TickObservation], now: datetime, opts: MonitorOptions
) -> None:
    """Genuinely down: Down, counters and cap cleared, no readiness, no stop."""
    state, observation = tick_
    decision: TickDecision = tick(state, observation, now, opts)
    assert decision.signal.signal is PodSignal.NOT_RUNNING
    assert decision.state.counters == PhaseCounters()
    assert (decision.state.cap_started_at, decision.state.readiness, decision.stop) == (None, {}, None)


# A pod's life, one tick per step. The pod keeps its id "p" throughout, as RunPod does across stop/start.
SCRAPES = [
    "idle",  # vLLM answers, nothing done since the last scrape
    "turn_between_ticks",  # a turn began and ended since the last scrape
    "in_flight",  # a request is running right now
    "silent_restart",  # the process restarted without us seeing it; its counter starts again
]
LIFE_STEPS = st.sampled_from(
    [
        *SCRAPES,
        "metrics_502",  # RUNNING, /metrics unreachable
        "blip",  # control plane unreadable too
        "starting",  # confirmed startup: a new process
        "exited",  # confirmed down
    ]
)
# An episode leaves Ready (or starts from Down), lives a few ticks, and ends on a scrape: if it is not Ready by
# then, that scrape enters Ready. So every episode enters Ready at least once and the property is checked there.
EPISODES = st.tuples(
    st.sampled_from(["starting", "exited"]), st.lists(LIFE_STEPS, max_size=8), st.sampled_from(SCRAPES)
).map(lambda episode: [episode[0], *episode[1], episode[2]])


@settings(max_examples=300)
@given(
    episodes=st.lists(EPISODES, min_size=1, max_size=6),
    idle_minutes=st.integers(min_value=1, max_value=4),
    accept=st.lists(st.booleans(), min_size=60, max_size=60),  # 6 episodes of at most 10 steps
)
def test_a_pod_that_comes_back_under_the_same_id_never_enters_ready_with_idle_streak_one(
    episodes: list[list[str]], idle_minutes: int, accept: list[bool]
) -> None:
    """Whenever Ready is entered on a scrape that carries a counter, nothing has been banked yet (#2075)."""
    opts = MonitorOptions(idle_minutes=idle_minutes, boot_grace_minutes=3)
    state, now, counter = MonitorState(), T0, 0.0
    volume = VolumeLookup(lookup=Lookup.FOUND, pod_ids=("p",))
    for index, step in enumerate(step for episode in episodes for step in episode):
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
