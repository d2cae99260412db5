"""A warm-hours wake is refused by the budget like any wake (issue 26): metering says the pod's budget is reached,
so the schedule's wake writes nothing to RunPod and records no billable action."""

from __future__ import annotations

from datetime import timedelta

from tests.fixtures.clock import FakeClock
from tests.fixtures.services import OPERATOR, SIM_API_KEY, VOLUME
from tests.integration.metering.test_budgets import stack, writes
from tests.integration.pod_controller.test_warm_schedule import HOURS, OPENS, _control, actions_of
from thermostat.dev.simulators.runpod.server import RunPodSimulator
from thermostat.metering.v1 import metering_pb2, metering_pb2_grpc
from thermostat.pod_controller.budget_guard import BudgetGuard
from thermostat.pod_controller.wake_service import WakeService
from thermostat.pod_controller.warm_schedule import WarmSchedule
from thermostat.policy.common.pod_options import PodOptions
from thermostat.policy.idle.monitor_options import MonitorOptions
from thermostat.policy.wake.wake_result import WakeOutcome, WakeResult
from thermostat.providers.runpod.client import RunPodV2Client
from thermostat.store.db import Store


async def test_a_scheduled_wake_over_budget_is_refused_before_any_runpod_write(
    runpod_sim: RunPodSimulator, db_store: Store
) -> None:
    runpod_sim.add_pod(volume_id=VOLUME, status="EXITED")
    async with stack(runpod_sim, db_store) as s, s.metering.channel() as channel:
        await s.metering_stub.SetPodBudget(
            metering_pb2.SetPodBudgetRequest(name="qwen", daily_usd=0.0), metadata=OPERATOR
        )
        async with RunPodV2Client(SIM_API_KEY, base_url=runpod_sim.base_url, timeout_seconds=2) as client:
            control = _control(runpod_sim, db_store, "replica-a", client)
            guard = BudgetGuard(metering_pb2_grpc.MeteringInternalStub(channel), MonitorOptions(), timeout=5)
            control.wake_service = WakeService(client, control.records, budget=guard)
            results: list[WakeResult] = []

            async def wake(pod: PodOptions) -> WakeResult:
                result = await control.run_wake(pod, trigger="schedule")
                results.append(result)
                return result

            schedule = WarmSchedule(
                control.pods,
                {"qwen": HOURS},
                control.records,
                db_store.leases,
                wake,
                replica="replica-a",
                clock=FakeClock(wall=OPENS - timedelta(minutes=5)),
            )
            assert len(await schedule.run_pass()) == 1
            await schedule.settle()
    [result] = results
    assert result.outcome is WakeOutcome.FAILED
    assert "daily budget of 0.00 USD reached" in result.message
    assert writes(runpod_sim) == []
    assert await actions_of(control) == []
