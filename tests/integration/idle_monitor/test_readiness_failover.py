"""A readiness report pending when a replica dies is published by the next one: readySince is not lost for the boot."""

from __future__ import annotations

from tests.integration.idle_monitor.conftest import MonitorRig
from tests.integration.idle_monitor.test_gathering import ready_tick_report_dropped
from tests.integration.idle_monitor.test_restart import restarted


async def test_a_readiness_report_pending_at_failover_is_published_by_the_next_replica(
    rig: MonitorRig, database_url: str
) -> None:
    """Ready tick's report dropped, then the replica dies: the next replica must still publish readySince."""
    async with ready_tick_report_dropped(rig) as ready_tick:
        pass  # the report is still owed when the replica below restarts
    async with restarted(rig, database_url):
        await rig.ticks(5)
        assert (await rig.saved()).state.readiness, "the monitor's own state says the pod is ready"
        assert await rig.ready_since() == ready_tick, "GetPod still says 'waking, not usable yet'"
