"""Exact activity from the inference gateway (issue 34): a request in flight, or one that began and ended since the
last tick, is Busy for the monitor of any replica — recorded per pod in the store through ReportRequests — even when
the engine's exposition has no counter families (gauges only) to show it."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc
import pytest

from tests.fixtures.polling import eventually
from tests.integration.idle_monitor.conftest import POD, POD_ID, MakeRig, MonitorRig
from thermostat.idle_monitor.repository import MonitorRepository
from thermostat.idle_monitor.requests import RequestReports
from thermostat.monitor.v1 import monitor_pb2, monitor_pb2_grpc
from thermostat.policy.common.pod_options import PodOptions
from thermostat.policy.idle.idle_phase import StopTrigger
from thermostat.policy.idle.pod_signal import PodSignal
from thermostat.policy.idle.request_activity import RequestCounts
from thermostat.store.db import Store


@pytest.fixture
async def gauges_only(make_rig: MakeRig) -> MonitorRig:
    """A pod whose vLLM exposes the two gauges alone: a turn between ticks leaves no trace in /metrics."""
    rig = await make_rig(IDLE_MINUTES="3", CHECK_SECONDS="60")
    rig.sim.configure(metrics_style="gauges-only")
    rig.add_pod(POD_ID)
    first = await rig.tick()
    assert first.signal.signal is PodSignal.IDLE
    return rig


@pytest.fixture
async def reports(db_store: Store) -> AsyncIterator[monitor_pb2_grpc.IdleMonitorInternalStub]:
    """ReportRequests served over loopback gRPC, writing the rig's store."""
    server = grpc.aio.server()
    monitor_pb2_grpc.add_IdleMonitorInternalServicer_to_server(
        RequestReports([PodOptions(name=POD)], MonitorRepository(db_store.pool)), server
    )
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        yield monitor_pb2_grpc.IdleMonitorInternalStub(channel)
    await server.stop(None)


def report(
    in_flight: int, events: int, reporter: str = "gateway-a", **fields: float
) -> monitor_pb2.ReportRequestsRequest:
    return monitor_pb2.ReportRequestsRequest(name=POD, reporter=reporter, in_flight=in_flight, events=events, **fields)


async def test_a_chat_turn_between_two_ticks_keeps_a_gauges_only_pod_up(
    gauges_only: MonitorRig, reports: monitor_pb2_grpc.IdleMonitorInternalStub
) -> None:
    """Without the gateway's report the pod is stopped after IDLE_MINUTES; with a turn reported before the tick that
    would stop it, that tick reads Busy and the window starts again."""
    rig = gauges_only
    await rig.ticks(1)  # the next tick would stop the pod: this one reads the third idle minute
    await reports.ReportRequests(report(1, 1), timeout=5)  # the turn starts after one tick
    await reports.ReportRequests(report(0, 2), timeout=5)  # and ends before the next
    turned = await rig.tick()
    assert (turned.signal.signal, turned.stop) == (PodSignal.BUSY, None)
    assert turned.state.counters.idle_streak == 0
    count, _, stopped = await rig.tick_until_stop(limit=5)
    assert count == 3 and stopped.stop is not None and stopped.stop.trigger is StopTrigger.IDLE


async def test_a_request_in_flight_through_the_gateway_is_busy_on_every_tick(
    gauges_only: MonitorRig, reports: monitor_pb2_grpc.IdleMonitorInternalStub
) -> None:
    """A long generation whose gauges the scrape misses stays Busy while the gateway holds it in flight."""
    await reports.ReportRequests(report(1, 1, live_seconds=600), timeout=5)
    for decision in await gauges_only.ticks(6):
        assert (decision.signal.signal, decision.stop) == (PodSignal.BUSY, None)


async def test_two_gateway_replicas_add_up_and_a_late_report_never_rolls_back(db_store: Store) -> None:
    states = MonitorRepository(db_store.pool)
    await states.save_requests(POD, "gateway-a", in_flight=1, events=5, live_seconds=60)
    await states.save_requests(POD, "gateway-b", in_flight=2, events=3, live_seconds=60)
    await states.save_requests(POD, "gateway-a", in_flight=3, events=4, live_seconds=60)  # older than the last
    assert await states.load_requests(POD) == RequestCounts(in_flight=3, events=8)
    assert await states.load_requests("QWEN") == RequestCounts(in_flight=3, events=8), "names fold their case"
    assert await states.load_requests("llama") == RequestCounts(in_flight=0, events=0)


async def test_an_in_flight_count_nobody_renews_stops_counting(db_store: Store) -> None:
    """A gateway that died mid-request keeps no pod up past its report's live time (the database clock judges)."""
    states = MonitorRepository(db_store.pool)
    await states.save_requests(POD, "gateway-dead", in_flight=4, events=9, live_seconds=0.2)

    async def expired() -> bool | None:
        return True if (await states.load_requests(POD)).in_flight == 0 else None

    await eventually(expired, timeout=10)
    assert (await states.load_requests(POD)).events == 9


@pytest.mark.parametrize(
    ("request_", "code"),
    [
        pytest.param(report(1, 1, reporter=" "), grpc.StatusCode.INVALID_ARGUMENT, id="no reporter"),
        pytest.param(report(-1, 1), grpc.StatusCode.INVALID_ARGUMENT, id="a negative count"),
        pytest.param(report(0, 1, live_seconds=-1), grpc.StatusCode.INVALID_ARGUMENT, id="a negative live time"),
        pytest.param(
            monitor_pb2.ReportRequestsRequest(name="llama", reporter="g", events=1),
            grpc.StatusCode.NOT_FOUND,
            id="an unknown pod",
        ),
    ],
)
async def test_a_malformed_report_is_refused_naming_the_field(
    reports: monitor_pb2_grpc.IdleMonitorInternalStub,
    request_: monitor_pb2.ReportRequestsRequest,
    code: grpc.StatusCode,
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await reports.ReportRequests(request_, timeout=5)
    assert refused.value.code() is code
