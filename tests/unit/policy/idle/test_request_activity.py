"""Requests through the inference gateway as evidence of work on a monitor tick (issue 34, "Exact activity")."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from thermostat.policy.common.pod_model import Lookup, PodObservation, PodStatus, VolumeLookup
from thermostat.policy.idle.idle_phase import Phase, PhaseCounters, StopTrigger
from thermostat.policy.idle.monitor_options import MonitorOptions
from thermostat.policy.idle.monitor_state import MonitorState, PodMemory
from thermostat.policy.idle.monitor_tick import TickObservation, tick
from thermostat.policy.idle.pod_signal import AggregateSignal, PodReading, PodSignal
from thermostat.policy.idle.request_activity import (
    RequestCounts,
    RequestReason,
    classify_requests,
    with_requests,
)
from thermostat.policy.idle.vllm_metrics import PodActivity

T0 = datetime(2026, 12, 5, 9, 0, tzinfo=UTC)
R = RequestReason


@pytest.mark.parametrize(
    ("counts", "baseline", "busy", "reason", "next_baseline"),
    [
        pytest.param(RequestCounts(in_flight=1, events=1), 0, True, R.IN_FLIGHT, 1, id="a request in flight is busy"),
        pytest.param(
            RequestCounts(in_flight=0, events=4), 2, True, R.SINCE_LAST_TICK, 4, id="a turn since the last tick is busy"
        ),
        pytest.param(
            RequestCounts(in_flight=0, events=4),
            4,
            False,
            R.NONE_SINCE_LAST_TICK,
            4,
            id="no request since is no evidence",
        ),
        pytest.param(RequestCounts(in_flight=0, events=3), None, True, R.NO_BASELINE, 3, id="first read with requests"),
        pytest.param(RequestCounts(in_flight=0, events=0), None, False, R.NONE_SINCE_LAST_TICK, 0, id="never used"),
        pytest.param(
            RequestCounts(in_flight=0, events=1),
            5,
            True,
            R.SINCE_LAST_TICK,
            1,
            id="a count that moved back is busy once",
        ),
        pytest.param(None, 7, False, R.UNREAD, 7, id="unread counts keep the baseline"),
    ],
)
def test_classify_requests(
    counts: RequestCounts | None, baseline: int | None, busy: bool, reason: RequestReason, next_baseline: int
) -> None:
    """Each rule of the table: in flight or moved since the last tick is busy; unread keeps the baseline."""
    verdict = classify_requests(counts, baseline)
    assert (verdict.busy, verdict.reason, verdict.baseline) == (busy, reason, next_baseline)


@pytest.mark.parametrize(
    ("signal", "ready", "expected"),
    [
        pytest.param(PodSignal.IDLE, True, PodSignal.BUSY, id="idle engine with requests is busy"),
        pytest.param(PodSignal.IDLE, False, PodSignal.BUSY, id="an engine that answered the scrape is up: busy"),
        pytest.param(
            PodSignal.UNREACHABLE_BUT_RUNNING, True, PodSignal.BUSY, id="ready, unscraped but answering: busy"
        ),
        pytest.param(
            PodSignal.UNREACHABLE_BUT_RUNNING,
            False,
            PodSignal.UNREACHABLE_BUT_RUNNING,
            id="running while the model loads stays unreachable: a request counted then reached no engine",
        ),
        pytest.param(PodSignal.BOOTING, True, PodSignal.BOOTING, id="a booting pod stays booting"),
        pytest.param(PodSignal.NOT_RUNNING, True, PodSignal.NOT_RUNNING, id="a stopped pod never looks up"),
        pytest.param(PodSignal.UNKNOWN, True, PodSignal.UNKNOWN, id="unknown stays unknown"),
    ],
)
def test_requests_only_ever_turn_an_answering_pod_busy(signal: PodSignal, ready: bool, expected: PodSignal) -> None:
    """The gateway's evidence never makes a pod that is down or booting look up."""
    busy = classify_requests(RequestCounts(in_flight=1, events=1), 0)
    assert with_requests(AggregateSignal(signal=signal, pod_id="p1"), busy, ready=ready).signal is expected


def test_no_requests_leave_the_signal_as_the_engine_said() -> None:
    idle = classify_requests(RequestCounts(in_flight=0, events=2), 2)
    aggregate = AggregateSignal(signal=PodSignal.IDLE, pod_id="p1")
    assert with_requests(aggregate, idle, ready=True).signal is PodSignal.IDLE


def _ready(streak: int) -> MonitorState:
    return MonitorState(
        counters=PhaseCounters(phase=Phase.READY, idle_streak=streak),
        cap_started_at=T0,
        boot_started_at=T0,
        pods={"p1": PodMemory(ready_since=T0)},
        requests_seen=10,
    )


def _gauges_only(requests: RequestCounts | None) -> TickObservation:
    """A pod whose exposition has the gauges alone (no counter family): between ticks it reads idle."""
    reading = PodReading(
        pod_id="p1",
        scrape=PodActivity(active=0, completed=None),
        observation=PodObservation(lookup=Lookup.FOUND, pod_id="p1", status=PodStatus.RUNNING, gpu_count=1),
    )
    return TickObservation(
        volume=VolumeLookup(lookup=Lookup.FOUND, pod_ids=("p1",)), pods=(reading,), requests=requests
    )


def test_a_chat_turn_between_two_ticks_keeps_a_gauges_only_pod_up() -> None:
    """Issue 34: the tick that would stop the pod for idleness sees the gateway's start and end since the last one
    and reads Busy, though the engine's exposition has no counter families to show the turn."""
    options = MonitorOptions(idle_minutes=1.0, check_seconds=30.0)
    state = _ready(streak=options.idle_threshold - 1)
    unaware = tick(state, _gauges_only(RequestCounts(in_flight=0, events=10)), T0 + timedelta(minutes=5), options)
    assert unaware.stop is not None and unaware.stop.trigger is StopTrigger.IDLE
    turned = tick(state, _gauges_only(RequestCounts(in_flight=0, events=12)), T0 + timedelta(minutes=5), options)
    assert turned.signal.signal is PodSignal.BUSY
    assert turned.stop is None
    assert turned.state.counters.idle_streak == 0
    assert turned.state.requests_seen == 12


def test_the_request_baseline_survives_the_state_round_trip_and_older_states_have_none() -> None:
    state = replace(_ready(streak=0), requests_seen=42)
    assert MonitorState.from_dict(state.to_dict()).requests_seen == 42
    assert MonitorState.from_dict({**state.to_dict(), "requests_seen": None}).requests_seen is None
    written_before_the_gateway = state.to_dict()
    del written_before_the_gateway["requests_seen"]
    assert MonitorState.from_dict(written_before_the_gateway).requests_seen is None


def test_a_request_counted_while_the_woken_pods_model_loads_never_makes_it_ready() -> None:
    """CI, stop 39: the idle stop accepted, a warm forward met the stopped pod's proxy and was counted, the request's
    wake started the pod again; on the next tick the pod runs with its model loading (no /metrics) and the counts
    moved. The pod boots: it is not Ready (whose idle window would stop it mid-load, the request still held)."""
    stopped = MonitorState(counters=PhaseCounters(phase=Phase.DOWN), pods={"p1": PodMemory()}, requests_seen=4)
    loading = PodReading(
        pod_id="p1",
        scrape=None,
        observation=PodObservation(lookup=Lookup.FOUND, pod_id="p1", status=PodStatus.RUNNING, gpu_count=1),
    )
    observation = TickObservation(
        volume=VolumeLookup(lookup=Lookup.FOUND, pod_ids=("p1",)),
        pods=(loading,),
        requests=RequestCounts(in_flight=0, events=6),
    )
    decision = tick(stopped, observation, T0, MonitorOptions(idle_minutes=0.25, check_seconds=0.5))
    assert decision.signal.signal is PodSignal.UNREACHABLE_BUT_RUNNING
    assert decision.state.counters.phase is Phase.BOOTING
    assert decision.readiness == ()
