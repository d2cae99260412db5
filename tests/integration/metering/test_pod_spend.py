"""A pod's spend across create / stop / start / create-replacement / terminate matches what the RunPod
simulator billed, interval by interval; an open interval is counted to metering's clock."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import grpc
import pytest

from tests.fixtures.clock import FakeClock
from tests.fixtures.services import OPERATOR, RunningService, metering_env, start_metering
from tests.integration.metering.conftest import ledger_on
from tests.integration.pod_controller.harness import start
from thermostat.chassis.timestamps import from_timestamp
from thermostat.dev.simulators.runpod.server import RunPodSimulator
from thermostat.metering.v1 import metering_pb2, metering_pb2_grpc
from thermostat.pods.v1 import pods_pb2, pods_pb2_grpc
from thermostat.store.db import Store

# the controller records an action after RunPod answered it; the simulator stamps the change on receipt
RECORD_SLACK = timedelta(seconds=1)


def _moment(seconds: float | None) -> datetime | None:
    return None if seconds is None else datetime.fromtimestamp(seconds, UTC)


async def test_spend_matches_the_intervals_the_simulator_billed(
    runpod_sim: RunPodSimulator, pod_controller: RunningService, db_store: Store
) -> None:
    async with pod_controller.channel() as channel:
        pods = pods_pb2_grpc.PodControllerStub(channel)
        assert (await start(pods)).reply.outcome == "Created"  # pod A bills
        await pods.StopPod(pods_pb2.StopPodRequest(name="qwen"), metadata=OPERATOR)
        assert (await start(pods)).reply.outcome == "Started"  # A bills again, at the rate RunPod reports
        await pods.StopPod(pods_pb2.StopPodRequest(name="qwen"), metadata=OPERATOR)
        runpod_sim.inject("POST", "/v2/pods/*/action", status=500)  # A refuses to start: a replacement B
        assert (await start(pods)).reply.outcome == "Created"  # B bills; A (stopped) is terminated

    started = await db_store.pool.fetchrow(
        "SELECT gpu_id, price_per_hour FROM pod_actions WHERE action = 'Start' AND ok"
    )
    assert started["price_per_hour"] > 0 and started["gpu_id"], "a start records the rate RunPod reported"

    clock = FakeClock()
    async with (
        start_metering(metering_env(pod_controller.address), db_store, clock=clock) as metering,
        ledger_on(pod_controller, db_store) as rig,
        metering.channel() as channel,
    ):
        await rig.ledger.run_once()
        clock.advance(600)  # B bills on: the open interval is counted to metering's now
        spend = await metering_pb2_grpc.MeteringStub(channel).GetPodSpend(metering_pb2.GetPodSpendRequest(name="QWEN"))

    billed = runpod_sim.billed()
    assert len(spend.intervals) == len(billed) == 3
    for interval, stretch in zip(spend.intervals, billed, strict=True):
        assert interval.pod_id == stretch.pod_id
        assert interval.price_per_hour == pytest.approx(stretch.price_per_hour)
        assert timedelta(0) <= from_timestamp(interval.start) - _moment(stretch.start) <= RECORD_SLACK
        if stretch.end is None:
            assert not interval.HasField("end")
        else:
            assert timedelta(0) <= from_timestamp(interval.end) - _moment(stretch.end) <= RECORD_SLACK
    assert spend.total_usd == pytest.approx(sum(i.usd for i in spend.intervals))
    open_interval = spend.intervals[-1]
    assert open_interval.usd == pytest.approx(
        (clock.now() - from_timestamp(open_interval.start)).total_seconds() / 3600 * open_interval.price_per_hour
    )
    assert {line.gpu_type for line in spend.lines} == {"NVIDIA A100 80GB PCIe"}


async def test_a_pod_the_simulator_forgot_stops_billing_in_metering_at_the_reading_that_found_it_gone(
    runpod_sim: RunPodSimulator, pod_controller: RunningService, db_store: Store
) -> None:
    """Issue 35: after a restart the simulator knew no pod, and metering billed it for ever; the controller's
    reading records it Gone, which closes metering's interval there, once."""
    async with pod_controller.channel() as channel:
        pods = pods_pb2_grpc.PodControllerStub(channel)
        assert (await start(pods)).reply.outcome == "Created"
        runpod_sim.reset()  # the simulator forgot the pod
        await pods.GetPod(pods_pb2.GetPodRequest(name="qwen"))
        await pods.GetPod(pods_pb2.GetPodRequest(name="qwen"))
    gone = await db_store.pool.fetchval("SELECT at FROM pod_actions WHERE action = 'Gone'")

    clock = FakeClock()
    async with (
        start_metering(metering_env(pod_controller.address), db_store, clock=clock) as metering,
        ledger_on(pod_controller, db_store) as rig,
        metering.channel() as channel,
    ):
        await rig.ledger.run_once()
        clock.advance(3600)  # an hour later the pod has billed nothing more
        spend = await metering_pb2_grpc.MeteringStub(channel).GetPodSpend(metering_pb2.GetPodSpendRequest(name="qwen"))
    (interval,) = spend.intervals
    assert interval.HasField("end") and from_timestamp(interval.end) == gone


async def test_an_unknown_pod_name_is_404(pod_controller: RunningService, db_store: Store) -> None:
    async with (
        start_metering(metering_env(pod_controller.address), db_store, clock=FakeClock()) as metering,
        metering.channel() as channel,
    ):
        with pytest.raises(grpc.aio.AioRpcError) as unknown:
            await metering_pb2_grpc.MeteringStub(channel).GetPodSpend(metering_pb2.GetPodSpendRequest(name="llama"))
    assert unknown.value.code() is grpc.StatusCode.NOT_FOUND
