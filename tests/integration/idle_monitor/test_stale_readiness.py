"""A readiness report the monitor observed before a stop, delivered after the stop was accepted, must not bring
readiness back: readySince is for the process the monitor saw answer, and a stop (or a stop and a re-wake of the
same pod id) ended that process.

The monitor's report is held at the wire (an interceptor on its channel parks ReportReadiness until the test
releases it), so each ordering of {the monitor sees the pod answer, its report lands, a stop is accepted, the
same id is woken again, another replica ticks} is forced, not made likely. The simulator and the ticker share a
manual clock: nothing sleeps.

Orderings:
  report lands, then the stop           the stop clears it (the ordinary Down edge)
  stop accepted, then the report lands  refused: the pod's incarnation moved past the one the report saw
  stop and re-wake, then the report     refused: GET says isRunning with readySince null ("waking") until the
                                        new process answers, which publishes its own readySince
  a second replica published the new    the first replica's late report is refused and does not roll readySince
  boot's readiness, then the first's    back to the old process's
  late report lands
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import grpc

from tests.fixtures.services import INTERNAL_TOKEN
from tests.integration.idle_monitor.conftest import POD, POD_ID, MonitorRig, minutes
from tests.integration.idle_monitor.test_unseen_restart import stop, wake
from thermostat.chassis.internal_auth import InternalTokenInterceptor
from thermostat.idle_monitor.ticker import PodTicker
from thermostat.pod_controller.repository import PodRepository
from thermostat.pods.v1 import pods_pb2_grpc
from thermostat.policy.idle.idle_phase import Phase
from thermostat.policy.idle.monitor_tick import TickDecision
from thermostat.store.db import Store


class HoldReadinessReports(grpc.aio.UnaryUnaryClientInterceptor):  # type: ignore[misc]
    """Parks every ReportReadiness that publishes (ready_since set) until `release` is set; `held` says one is
    parked. Clears pass through."""

    def __init__(self) -> None:
        self.held = asyncio.Event()
        self.release = asyncio.Event()

    async def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        if details.method.endswith(b"/ReportReadiness") and request.HasField("ready_since"):
            self.held.set()
            await self.release.wait()
        return await continuation(details, request)


@contextlib.asynccontextmanager
async def held_ready_tick(rig: MonitorRig, ticker: PodTicker) -> AsyncIterator[HoldReadinessReports]:
    """POD_ID added and `ticker`'s ready tick started on a channel that parks its readiness report; inside the
    block the monitor has seen the pod answer and its report has not landed. Leaving the block releases the
    report and finishes the tick."""
    hold = HoldReadinessReports()
    async with grpc.aio.insecure_channel(
        rig.controller.address, interceptors=[hold, InternalTokenInterceptor(INTERNAL_TOKEN)]
    ) as channel:
        ticker.controller = pods_pb2_grpc.PodControllerInternalStub(channel)
        rig.add_pod(POD_ID, model_ready_seconds=0)
        tick = asyncio.create_task(ticker.tick_once(rig.now))
        await hold.held.wait()
        try:
            yield hold
        finally:
            hold.release.set()
            decision: TickDecision | None = await tick
            assert decision is not None and decision.state.phase is Phase.READY, "the held tick saw the pod answer"
            ticker.controller = rig.internal
    rig.advance(rig.options.check_seconds)


async def stored(store: Store) -> bool:
    """Whether the controller holds readiness for POD_ID: GET shows it only while the pod runs."""
    return await PodRepository(store.pool).readiness(POD, POD_ID) is not None


async def test_a_report_that_lands_before_the_stop_is_cleared_by_the_stop(rig: MonitorRig, db_store: Store) -> None:
    async with held_ready_tick(rig, rig.ticker):
        pass
    assert await rig.ready_since() is not None, "the report landed while the pod ran"
    await stop(rig)
    assert not await stored(db_store)


async def test_a_report_observed_before_an_accepted_stop_and_delivered_after_it_does_not_restore_readiness(
    rig: MonitorRig, db_store: Store
) -> None:
    async with held_ready_tick(rig, rig.ticker):
        await stop(rig)
    assert not await stored(db_store), "readiness came back for a stopped pod"


async def test_a_stale_report_racing_a_re_wake_of_the_same_pod_id_leaves_it_waking_until_the_new_process_answers(
    rig: MonitorRig,
) -> None:
    """The finding's symptom: isRunning:true with the old readySince while the new model loads."""
    async with held_ready_tick(rig, rig.ticker):
        await stop(rig)
        rig.sim.set_pod_lifecycle(POD_ID, model_ready_seconds=3 * 60)
        assert await wake(rig) == POD_ID
        woken_at = rig.now
    view = await rig.view()
    assert view.is_running and not view.HasField("ready_since"), "a loading model must read 'waking, not usable'"

    decisions = await rig.ticks(2)
    assert [d.state.phase for d in decisions] == [Phase.BOOTING] * 2, "a fresh boot, not the old Ready"
    assert await rig.ready_since() is None
    await rig.tick()
    assert await rig.ready_since() == woken_at + minutes(3), "the new process publishes its own"


async def test_a_late_report_from_a_replica_that_lost_the_lease_does_not_roll_back_the_new_boots_readiness(
    rig: MonitorRig,
) -> None:
    """Replica A saw the old process answer; the pod is stopped and woken, and replica B (the new leader) sees the
    new process answer and publishes. A's report then lands: refused, B's readySince stands."""
    replica_b = rig.new_ticker("replica-b")
    async with held_ready_tick(rig, rig.ticker):
        await stop(rig)
        assert await wake(rig) == POD_ID
        new_ready = rig.now + minutes(1)
        rig.advance(rig.options.check_seconds)
        assert (await replica_b.tick_once(rig.now)) is not None
        assert await rig.ready_since() == new_ready
    assert await rig.ready_since() == new_ready, "the old process's readySince came back"
