"""Pod budgets: set and read through the API, obeyed by the wake (refused with zero RunPod writes, fail closed
while metering is configured and unreachable) and by the idle monitor (a budget reached mid-run stops the pod
on the next tick, trigger budget)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime, timedelta

import grpc
import pytest

from tests.fixtures.clock import FakeClock
from tests.fixtures.services import OPERATOR, VOLUME, RunningService, metering_env, start_metering
from tests.integration.metering.conftest import ledger_on
from tests.integration.pod_controller.harness import Controller, api_calls, controller, start
from thermostat.chassis.ports import free_port
from thermostat.dev.simulators.runpod.server import RunPodSimulator
from thermostat.idle_monitor.__main__ import budget_check
from thermostat.idle_monitor.repository import MonitorRepository
from thermostat.idle_monitor.scrape_clients import ScrapeClients
from thermostat.idle_monitor.ticker import PodTicker
from thermostat.metering.v1 import metering_pb2, metering_pb2_grpc
from thermostat.pods.v1 import pods_pb2
from thermostat.policy.idle.monitor_options import MonitorOptions
from thermostat.store.db import Store

WRITES = {"POST", "DELETE", "PATCH", "PUT"}


@dataclass
class Stack:
    controller: Controller
    metering: RunningService
    metering_stub: metering_pb2_grpc.MeteringStub
    internal_stub: metering_pb2_grpc.MeteringInternalStub
    clock: FakeClock


@contextlib.asynccontextmanager
async def stack(sim: RunPodSimulator, store: Store, **env: str) -> AsyncIterator[Stack]:
    """A controller that asks metering before every wake (METERING_ADDR set), and that metering."""
    port = free_port()
    clock = FakeClock()
    async with (
        controller(sim, store, METERING_ADDR=f"127.0.0.1:{port}", METERING_TIMEOUT_SECONDS="1", **env) as ctl,
        start_metering(metering_env(ctl.running.address), store, port=port, clock=clock) as metering,
        metering.channel() as channel,
    ):
        yield Stack(
            controller=ctl,
            metering=metering,
            metering_stub=metering_pb2_grpc.MeteringStub(channel),
            internal_stub=metering_pb2_grpc.MeteringInternalStub(channel),
            clock=clock,
        )


def _to_a_day_holding(now: datetime, span: timedelta) -> timedelta:
    """How far to step from `now` so that `span` from there stays within one UTC day: nothing when it already
    does, else to the next midnight."""
    midnight = (now + timedelta(days=1)).replace(hour=0, minute=0, second=0, microsecond=0)
    return timedelta(0) if now + span < midnight else midnight - now


def writes(sim: RunPodSimulator) -> list[tuple[str, str]]:
    return [call for call in api_calls(sim) if call[0] in WRITES]


async def test_setting_a_budget_takes_the_operator_token_and_reading_it_does_not(
    runpod_sim: RunPodSimulator, db_store: Store
) -> None:
    async with stack(runpod_sim, db_store) as s:
        request = metering_pb2.SetPodBudgetRequest(name="qwen", daily_usd=5.0)
        with pytest.raises(grpc.aio.AioRpcError) as anonymous:
            await s.metering_stub.SetPodBudget(request)
        assert anonymous.value.code() is grpc.StatusCode.UNAUTHENTICATED
        set_ = await s.metering_stub.SetPodBudget(request, metadata=OPERATOR)
        read = await s.metering_stub.GetPodBudget(metering_pb2.GetPodBudgetRequest(name="QWEN"))
        assert (set_.daily_usd, read.daily_usd, read.HasField("monthly_usd")) == (5.0, 5.0, False)


async def test_a_negative_budget_is_refused_naming_the_field(runpod_sim: RunPodSimulator, db_store: Store) -> None:
    async with stack(runpod_sim, db_store) as s:
        with pytest.raises(grpc.aio.AioRpcError) as bad:
            await s.metering_stub.SetPodBudget(
                metering_pb2.SetPodBudgetRequest(name="qwen", monthly_usd=-1), metadata=OPERATOR
            )
    assert bad.value.code() is grpc.StatusCode.INVALID_ARGUMENT and "monthly_usd" in (bad.value.details() or "")


async def test_a_wake_whose_projected_spend_does_not_fit_is_refused_with_zero_runpod_writes(
    runpod_sim: RunPodSimulator, db_store: Store
) -> None:
    async with stack(runpod_sim, db_store) as s:
        await s.metering_stub.SetPodBudget(
            metering_pb2.SetPodBudgetRequest(name="qwen", daily_usd=0.05), metadata=OPERATOR
        )
        answer = await start(s.controller.public)
        newest = (await s.controller.public.GetPod(pods_pb2.GetPodRequest(name="qwen"))).last_wake
    assert (answer.code, answer.http_code) == (grpc.StatusCode.ABORTED, "409")
    assert "daily budget of 0.05 USD" in answer.details and "projected_usd=" in answer.details
    assert writes(runpod_sim) == []
    assert (newest.outcome, newest.wake_outcome) == ("Refused", "Failed")
    assert "spent_usd=0.0000" in newest.reason and "rate_per_hour=" in newest.reason


async def test_a_wake_that_fits_its_budget_runs(runpod_sim: RunPodSimulator, db_store: Store) -> None:
    async with stack(runpod_sim, db_store) as s:
        await s.metering_stub.SetPodBudget(
            metering_pb2.SetPodBudgetRequest(name="qwen", daily_usd=100.0), metadata=OPERATOR
        )
        assert (await start(s.controller.public)).reply.outcome == "Created"


async def test_a_reached_budget_refuses_the_wake_before_any_runpod_write(
    runpod_sim: RunPodSimulator, db_store: Store
) -> None:
    async with stack(runpod_sim, db_store) as s:
        await s.metering_stub.SetPodBudget(
            metering_pb2.SetPodBudgetRequest(name="qwen", daily_usd=0.0), metadata=OPERATOR
        )
        answer = await start(s.controller.public)
    assert (answer.code, answer.http_code) == (grpc.StatusCode.ABORTED, "409")
    assert "daily budget of 0.00 USD reached" in answer.details
    # the volume lookup (a read) runs beside metering's answer; nothing acts on it once the wake is refused
    assert api_calls(runpod_sim) == [("GET", "/v2/pods")]


async def test_a_wake_of_a_running_pod_under_its_budget_projects_nothing(
    runpod_sim: RunPodSimulator, db_store: Store
) -> None:
    # the projection matters only to a start or a create: a pod already billing is not read a catalogue for
    runpod_sim.add_pod(pod_id="runningpod0001", status="RUNNING", volume_id=VOLUME)
    async with stack(runpod_sim, db_store) as s:
        await s.metering_stub.SetPodBudget(
            metering_pb2.SetPodBudgetRequest(name="qwen", daily_usd=0.05), metadata=OPERATOR
        )
        answer = await start(s.controller.public)
    assert answer.reply.outcome == "AlreadyRunning"
    assert [path for _, path in api_calls(runpod_sim) if path.startswith("/v2/catalog")] == []


async def test_a_start_whose_rate_is_unknown_is_refused_not_projected_free(
    runpod_sim: RunPodSimulator, db_store: Store
) -> None:
    """The catalogue is unreadable and the stopped pod has no rate on record: its spend cannot be projected, so the
    wake is refused with zero RunPod writes (fail closed) instead of starting the pod as if it cost nothing."""
    runpod_sim.add_pod(pod_id="stoppedpod0001", status="EXITED", volume_id=VOLUME)
    runpod_sim.inject("GET", "/v2/catalog/gpus", status=500, count=None)
    async with stack(runpod_sim, db_store) as s:
        await s.metering_stub.SetPodBudget(
            metering_pb2.SetPodBudgetRequest(name="qwen", daily_usd=0.05), metadata=OPERATOR
        )
        answer = await start(s.controller.public)
    assert (answer.code, answer.http_code) == (grpc.StatusCode.ABORTED, "409")
    assert "projected spend unknown" in answer.details and "fail closed" in answer.details
    assert writes(runpod_sim) == []


async def test_a_start_with_the_catalogue_unreadable_is_projected_at_the_pods_recorded_rate(
    runpod_sim: RunPodSimulator, db_store: Store
) -> None:
    """A pod this controller created has its rate on record: with the catalogue unreadable its start is projected
    at that rate, so a budget it does not fit refuses it and one it fits lets it start."""
    async with stack(runpod_sim, db_store) as s:
        created = await start(s.controller.public)
        assert created.reply.outcome == "Created"
        await s.controller.public.StopPod(pods_pb2.StopPodRequest(name="qwen"), metadata=OPERATOR)
        runpod_sim.inject("GET", "/v2/catalog/gpus", status=500, count=None)
        await s.metering_stub.SetPodBudget(
            metering_pb2.SetPodBudgetRequest(name="qwen", daily_usd=0.05), metadata=OPERATOR
        )
        refused = await start(s.controller.public)
        await s.metering_stub.SetPodBudget(
            metering_pb2.SetPodBudgetRequest(name="qwen", daily_usd=100.0), metadata=OPERATOR
        )
        started = await start(s.controller.public)
    assert (refused.code, refused.http_code) == (grpc.StatusCode.ABORTED, "409")
    assert f"rate_per_hour={created.reply.price_per_hour:.4f}" in refused.details
    assert started.reply.outcome == "Started"


async def test_metering_configured_but_unreachable_refuses_the_wake(
    runpod_sim: RunPodSimulator, db_store: Store
) -> None:
    async with controller(
        runpod_sim, db_store, METERING_ADDR=f"127.0.0.1:{free_port()}", METERING_TIMEOUT_SECONDS="0.5"
    ) as ctl:
        answer = await start(ctl.public)
    assert (answer.code, answer.http_code) == (grpc.StatusCode.ABORTED, "409")
    assert "metering unreachable" in answer.details and "fail closed" in answer.details
    assert writes(runpod_sim) == []


async def test_a_budget_reached_mid_run_stops_the_pod_on_the_next_monitor_tick(
    runpod_sim: RunPodSimulator, db_store: Store
) -> None:
    async with stack(runpod_sim, db_store) as s, ledger_on(s.controller.running, db_store) as rig:
        created = await start(s.controller.public)
        assert created.reply.outcome == "Created"
        rate = created.reply.price_per_hour
        # one hour of the pod is the whole daily budget: reached an hour after it started billing
        await s.metering_stub.SetPodBudget(
            metering_pb2.SetPodBudgetRequest(name="qwen", daily_usd=rate), metadata=OPERATOR
        )
        await rig.ledger.run_once()
        ticker = PodTicker(
            pod_name="qwen",
            controller=s.controller.internal,
            scrapes=ScrapeClients(),
            states=MonitorRepository(db_store.pool),
            options=MonitorOptions(),
            replica="test-monitor",
            scrape_timeout=10,  # a hang guard only: the simulator answers at once
            controller_timeout=5,
            budget=budget_check(s.internal_stub, 5),
        )
        try:
            # metering's clock started before the pod billed (by less than the wake took): 58 minutes is short of
            # the hour, 61 is past it, and the tick after the budget is reached stops the pod. A budget's day is
            # the UTC day: when the hour would cross midnight, the hour counted is the new day's first, the pod
            # billing all along
            s.clock.advance(_to_a_day_holding(s.clock.now(), timedelta(minutes=65)).total_seconds())
            s.clock.advance(timedelta(minutes=58).total_seconds())
            first = await ticker.tick_once(s.clock.now())
            assert first is not None and first.stop is None
            assert runpod_sim.pods()[0]["status"] == "RUNNING"
            s.clock.advance(timedelta(minutes=3).total_seconds())
            await ticker.tick_once(s.clock.now())
        finally:
            await ticker.scrapes.aclose()
        history = await s.controller.public.GetPodHistory(pods_pb2.GetPodHistoryRequest(name="qwen"))
    assert runpod_sim.pods()[0]["status"] == "EXITED"
    stop = history.entries[0].action
    assert (stop.action, stop.trigger, stop.ok) == ("Stop", "budget", True)


async def test_a_wake_on_request_refused_by_its_budget_is_resource_exhausted_with_the_numbers(
    runpod_sim: RunPodSimulator, db_store: Store
) -> None:
    """Issue 34: the gateway tells a budget apart (its 429 insufficient_quota); the start route stays 409."""
    async with stack(runpod_sim, db_store) as s:
        await s.metering_stub.SetPodBudget(
            metering_pb2.SetPodBudgetRequest(name="qwen", daily_usd=0.0), metadata=OPERATOR
        )
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await s.controller.internal.WakePod(
                pods_pb2.WakePodRequest(name="qwen", trigger=pods_pb2.WAKE_TRIGGER_REQUEST), timeout=20
            )
    assert refused.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "daily budget of 0.00 USD reached" in (refused.value.details() or "")
    assert api_calls(runpod_sim) == [("GET", "/v2/pods")]
