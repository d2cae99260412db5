"""A readiness report pending when a replica dies is published by the next one: readySince is not lost for the boot."""

from __future__ import annotations

import grpc

from tests.fixtures.services import INTERNAL_TOKEN
from tests.integration.idle_monitor.conftest import POD_ID, MonitorRig
from tests.integration.idle_monitor.test_gathering import DropFirstReadinessReport
from tests.integration.idle_monitor.test_restart import restarted
from thermostat.chassis.internal_auth import InternalTokenInterceptor
from thermostat.pods.v1 import pods_pb2_grpc


async def test_a_readiness_report_pending_at_failover_is_published_by_the_next_replica(
    rig: MonitorRig, database_url: str
) -> None:
    """Ready tick's report dropped, then the replica dies: the next replica must still publish readySince."""
    dropper = DropFirstReadinessReport()
    async with grpc.aio.insecure_channel(
        rig.controller.address, interceptors=[dropper, InternalTokenInterceptor(INTERNAL_TOKEN)]
    ) as flaky:
        rig.ticker.controller = pods_pb2_grpc.PodControllerInternalStub(flaky)
        rig.add_pod(POD_ID)
        ready_tick = rig.now
        await rig.tick()
        assert dropper.dropped == 1
    async with restarted(rig, database_url):
        await rig.ticks(5)
        assert (await rig.saved()).state.readiness, "the monitor's own state says the pod is ready"
        assert await rig.ready_since() == ready_tick, "GetPod still says 'waking, not usable yet'"
