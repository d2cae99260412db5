"""The stall guard end to end (issue 26): a vLLM that reports a request running while no token is generated is
stopped after STALL_MINUTES through the real controller, trigger `stall` in the history, one log line with the
gauges, and the count visible in GET /api/pods/{name}/monitor while it builds."""

from __future__ import annotations

import logging

import pytest

from tests.fixtures.services import INTERNAL_TOKEN
from tests.integration.idle_monitor.conftest import POD_ID, MakeRig, in_process_monitor, messages
from tests.integration.idle_monitor.test_monitor_state import monitor_service, state_of
from thermostat.chassis.internal_auth import INTERNAL_TOKEN_ENV
from thermostat.policy.common.warm_hours import parse_warm_hours
from thermostat.policy.idle.idle_phase import StopTrigger
from thermostat.store.db import Store


async def test_a_stuck_engine_is_stopped_with_trigger_stall(
    make_rig: MakeRig, monitor_log: pytest.LogCaptureFixture
) -> None:
    """Running 1 and generation_tokens still: 5 scrapes without work (STALL_MINUTES=5) stop the pod."""
    rig = await make_rig(IDLE_MINUTES="15", STALL_MINUTES="5")
    rig.add_pod(POD_ID, model_ready_seconds=0)
    rig.sim.record_turn(POD_ID, 120, 80)
    await rig.tick()  # ready: the counter's baseline is seeded
    rig.sim.set_in_flight(POD_ID, running=1)  # the client disconnected mid-stream; the gauge stays
    async with monitor_service(rig) as stub:
        await rig.ticks(3)
        building = await state_of(stub)
        assert (building.stall_ticks, building.stall_threshold, building.stalled_pod_id) == (3, 5, POD_ID)
        assert building.projected_stop_trigger == "stall"
        assert building.idle_streak == 0, "the gauges still read busy: the idle window never starts"
        count, _, decision = await rig.tick_until_stop(limit=5)
    assert count == 2
    assert decision.stop is not None and decision.stop.trigger is StopTrigger.STALL
    stops = await rig.stops()
    assert [(s.pod_id, s.trigger, s.ok) for s in stops] == [(POD_ID, "stall", True)]
    assert rig.status(POD_ID) == "EXITED"
    logged = messages(monitor_log, "(stall:", logging.WARNING)
    assert logged == [
        f"pod qwen: stopping {POD_ID} (stall: in flight with no work for 5 scrapes: {POD_ID} running 1, waiting 0, "
        "work counter 201 unchanged for 5 scrapes)"  # 120 + 80 tokens + 1 success, summed
    ]


async def test_tokens_that_flow_keep_a_long_request_running(make_rig: MakeRig) -> None:
    """A generation that lasts far beyond STALL_MINUTES is never stalled while its counter moves."""
    rig = await make_rig(IDLE_MINUTES="15", STALL_MINUTES="2")
    rig.add_pod(POD_ID, model_ready_seconds=0)
    await rig.tick()
    rig.sim.set_in_flight(POD_ID, running=1)
    for _ in range(10):
        rig.sim.record_turn(POD_ID, 0, 25)
        decision = await rig.tick()
        assert decision.stop is None
    assert (await rig.saved()).state.pods[POD_ID].stall_ticks == 0
    assert rig.status(POD_ID) == "RUNNING"


async def test_stall_minutes_zero_keeps_the_seed_gauge_rule(make_rig: MakeRig) -> None:
    rig = await make_rig(IDLE_MINUTES="1", STALL_MINUTES="0")
    rig.add_pod(POD_ID, model_ready_seconds=0)
    await rig.tick()
    rig.sim.set_in_flight(POD_ID, running=1)
    for decision in await rig.ticks(10):
        assert decision.stop is None
    assert rig.status(POD_ID) == "RUNNING"


async def test_the_monitor_view_says_when_warm_hours_hold_the_idle_stop(make_rig: MakeRig) -> None:
    rig = await make_rig()
    hours = parse_warm_hours("Mon-Sun 00:00-24:00 UTC", "RUNPOD_WARM_HOURS")
    async with monitor_service(rig, warm_hours={"qwen": hours}) as stub:
        view = await state_of(stub)
    assert (view.warm_hours, view.in_warm_hours) == ("Mon-Sun 00:00-24:00 UTC", True)
    assert view.HasField("warm_until")


async def test_a_malformed_warm_hours_stops_the_monitor_start_naming_the_variable(
    db_store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    env = {
        "RUNPOD_PODS": "qwen",
        "RUNPOD_QWEN_WARM_HOURS": "Mon-Fri 09:00-17:00 Europe/Atlantis",
        "POD_CONTROLLER_ADDR": "127.0.0.1:9",
        INTERNAL_TOKEN_ENV: INTERNAL_TOKEN,
    }
    with pytest.raises(SystemExit) as exit_:
        async with in_process_monitor(env, db_store):
            pass
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "RUNPOD_QWEN_WARM_HOURS='Mon-Fri 09:00-17:00 Europe/Atlantis': unknown time zone" in err
