"""Pods that bill without serving are stopped: a vLLM that died after serving (#1998), a model that never
loads (#2041, #2101), a phantom busy request (the runtime cap)."""

from __future__ import annotations

import logging

import pytest

from tests.integration.idle_monitor.conftest import POD_ID, MakeRig, MonitorRig, messages, minutes
from thermostat.policy.idle.idle_phase import Phase, StopTrigger
from thermostat.policy.idle.pod_signal import PodSignal


async def test_a_vllm_that_dies_after_serving_accrues_and_is_stopped(rig: MonitorRig) -> None:
    """Running but not answering is billed: it counts toward the idle window and the pod is stopped (#1998)."""
    rig.add_pod(POD_ID)
    await rig.tick()
    rig.sim.record_turn(POD_ID, prompt_tokens=500, gen_tokens=200)
    await rig.tick()
    ready = await rig.ready_since()
    rig.sim.kill_vllm(POD_ID)
    died = rig.now

    decisions = await rig.ticks(14)
    assert {d.signal.signal for d in decisions} == {PodSignal.UNREACHABLE_BUT_RUNNING}
    assert [d.state.counters.idle_streak for d in decisions] == list(range(1, 15))
    assert {d.state.counters.phase for d in decisions} == {Phase.READY}
    assert await rig.ready_since() == ready, "readiness of a pod that served stays published until it stops"

    _ticks, stopped_at, decision = await rig.tick_until_stop(limit=1)
    assert stopped_at - died == minutes(14)
    assert decision.stop is not None and decision.stop.trigger is StopTrigger.IDLE
    assert rig.status(POD_ID) == "EXITED"
    assert [(s.pod_id, s.trigger) for s in await rig.stops()] == [(POD_ID, "idle")]


async def test_a_flapping_metrics_endpoint_still_accrues_to_a_stop(rig: MonitorRig) -> None:
    """The baseline survives an unreachable tick, so answer/blip/answer never re-seeds into a busy tick."""
    rig.add_pod(POD_ID)
    await rig.tick()
    for minute in range(14):
        (rig.sim.kill_vllm if minute % 2 == 0 else rig.sim.revive_vllm)(POD_ID)
        decision = await rig.tick()
        assert decision.state.counters.idle_streak == minute + 1
    rig.sim.revive_vllm(POD_ID)
    _ticks, _, decision = await rig.tick_until_stop(limit=1)
    assert decision.signal.signal is PodSignal.IDLE
    assert rig.status(POD_ID) == "EXITED"


@pytest.mark.parametrize(
    ("status", "hold"),
    [
        pytest.param("PROVISIONING", {"provisioning_seconds": -1}, id="held-provisioning"),
        pytest.param("STARTING", {"starting_seconds": -1}, id="held-starting"),
        pytest.param("RUNNING", {"model_ready_seconds": -1}, id="running-but-the-model-never-answers"),
    ],
)
async def test_a_never_ready_pod_is_stopped_at_boot_grace(
    rig: MonitorRig, monitor_log: pytest.LogCaptureFixture, status: str, hold: dict[str, float]
) -> None:
    """Provisioning, Starting and Running-without-metrics share one 20-minute boot budget (#2041, #2101)."""
    rig.add_pod(POD_ID, status=status)
    rig.sim.set_pod_lifecycle(POD_ID, **hold)
    first_seen = rig.now

    decisions = await rig.ticks(19)
    assert [d.state.counters.booting_ticks for d in decisions] == list(range(1, 20))
    assert {d.state.counters.phase for d in decisions} == {Phase.BOOTING}
    assert not any(d.stop for d in decisions)

    _ticks, stopped_at, decision = await rig.tick_until_stop(limit=1)
    assert stopped_at - first_seen == minutes(19), "the 20th booting tick, counting the first"
    assert decision.stop is not None and decision.stop.trigger is StopTrigger.BOOT_GRACE
    assert rig.status(POD_ID) == "EXITED"
    assert [(s.pod_id, s.trigger, s.ok) for s in await rig.stops()] == [(POD_ID, "boot-grace", True)]
    assert await rig.ready_since() is None
    assert messages(monitor_log, f"pod {POD_ID} ready after") == []
    assert messages(
        monitor_log, f"stopping {POD_ID} (boot-grace: not ready after 20/20 booting ticks)", logging.WARNING
    )


async def test_boot_grace_zero_leaves_a_never_ready_pod_to_the_runtime_cap(make_rig: MakeRig) -> None:
    """RUNPOD_BOOT_GRACE_MINUTES=0 disables the dead-model guard; the cap still stops the pod."""
    rig = await make_rig(RUNPOD_BOOT_GRACE_MINUTES="0", MAX_RUNTIME_MINUTES="45")
    rig.add_pod(POD_ID, model_ready_seconds=-1)
    first_seen = rig.now
    _ticks, stopped_at, decision = await rig.tick_until_stop(limit=60)
    assert stopped_at - first_seen == minutes(45)
    assert decision.stop is not None and decision.stop.trigger is StopTrigger.RUNTIME_CAP


async def test_a_phantom_busy_request_is_stopped_by_the_runtime_cap(
    make_rig: MakeRig, monitor_log: pytest.LogCaptureFixture
) -> None:
    """A wedged vLLM reporting a request in flight forever reads Busy; the wall-clock cap stops it anyway."""
    rig = await make_rig(MAX_RUNTIME_MINUTES="12.5")
    rig.add_pod(POD_ID)
    rig.sim.set_in_flight(POD_ID, running=1)
    first_seen = rig.now

    decisions = await rig.ticks(13)
    assert {d.signal.signal for d in decisions} == {PodSignal.BUSY}
    assert not any(d.stop for d in decisions)
    assert {d.state.cap_started_at for d in decisions} == {first_seen}

    _ticks, stopped_at, decision = await rig.tick_until_stop(limit=1)
    assert stopped_at - first_seen == minutes(13), "the first tick at or past 12.5 minutes"
    assert decision.stop is not None and decision.stop.trigger is StopTrigger.RUNTIME_CAP
    assert rig.status(POD_ID) == "EXITED"
    assert [(s.pod_id, s.trigger) for s in await rig.stops()] == [(POD_ID, "runtime-cap")]
    (line,) = messages(monitor_log, "stopping", logging.WARNING)
    assert line == (f"pod qwen: stopping {POD_ID} (runtime-cap: up since {first_seen.isoformat()}, cap 0:12:30)")


async def test_max_runtime_zero_disables_the_cap(make_rig: MakeRig) -> None:
    """MAX_RUNTIME_MINUTES=0 (and STALL_MINUTES=0): a phantom busy pod runs past six hours; the operator chose no
    backstop."""
    rig = await make_rig(MAX_RUNTIME_MINUTES="0", CHECK_SECONDS="600", STALL_MINUTES="0")
    rig.add_pod(POD_ID)
    rig.sim.set_in_flight(POD_ID, running=1)
    decisions = await rig.ticks(40)
    assert not any(d.stop for d in decisions)
    assert {d.state.cap_started_at for d in decisions} == {decisions[0].state.cap_started_at}
    assert rig.status(POD_ID) == "RUNNING"


async def test_a_dead_vllm_on_a_pod_listed_without_runtime_is_unreachable_not_booting(rig: MonitorRig) -> None:
    """A RUNNING list entry without `runtime` is observed by id: the monitor sees RUNNING, so a dead vLLM
    accrues toward the idle stop instead of reading as a pod still booting (issue 7)."""
    rig.sim.configure(list_without_runtime=True)
    rig.add_pod(POD_ID)
    await rig.tick()
    rig.sim.record_turn(POD_ID, prompt_tokens=500, gen_tokens=200)
    await rig.tick()
    rig.sim.kill_vllm(POD_ID)
    decision = await rig.tick()
    assert decision.signal.signal is PodSignal.UNREACHABLE_BUT_RUNNING
    assert decision.state.counters.idle_streak == 1
