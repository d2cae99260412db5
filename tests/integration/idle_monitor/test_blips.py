"""Fail closed on cost (#1998): when the volume cannot be read — RunPod's list fails, or the pod controller
itself is unreachable — a tick is Unknown and holds every counter: a blip is neither idle nor down."""

from __future__ import annotations

import grpc
import pytest

from tests.integration.idle_monitor.conftest import POD_ID, MonitorRig
from thermostat.pods.v1 import pods_pb2_grpc
from thermostat.policy.idle.idle_phase import Phase
from thermostat.policy.idle.pod_signal import PodSignal


async def test_an_unreadable_volume_list_holds_the_streak_and_stops_nothing(rig: MonitorRig) -> None:
    """Twenty minutes of a failing GET /v2/pods neither stop the pod nor reset the ten idle minutes before."""
    rig.add_pod(POD_ID)
    await rig.ticks(11)
    rig.sim.inject("GET", "/v2/pods", status=500, count=None)
    blips = await rig.ticks(20)
    assert {d.signal.signal for d in blips} == {PodSignal.UNKNOWN}
    assert {(d.state.phase, d.state.counters.idle_streak) for d in blips} == {(Phase.READY, 10)}
    assert not any(d.stop for d in blips)
    assert (await rig.saved()).last_signal == "UNKNOWN"
    rig.sim.clear_faults()
    ticks, _, _ = await rig.tick_until_stop(limit=10)
    assert ticks == 5, "the streak goes on from 10 to 15"


async def test_an_unreachable_pod_controller_holds_everything(
    rig: MonitorRig, caplog: pytest.LogCaptureFixture
) -> None:
    """Ticks through a channel to nowhere are Unknown: the cap start, the phase and the streak stand still."""
    rig.add_pod(POD_ID)
    await rig.ticks(3)
    before = (await rig.saved()).state
    async with grpc.aio.insecure_channel("127.0.0.1:1") as nowhere:
        rig.ticker.controller = pods_pb2_grpc.PodControllerInternalStub(nowhere)
        rig.ticker.controller_timeout = 1
        blips = await rig.ticks(3)
    assert {d.signal.signal for d in blips} == {PodSignal.UNKNOWN}
    assert (await rig.saved()).state == before
    assert "controller unreachable (UNAVAILABLE); tick holds" in caplog.text
