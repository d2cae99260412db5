"""A stop and a wake between two monitor ticks: the monitor never sees the pod down, yet readySince comes back.

The controller clears readiness on the stop; RunPod restarts the same pod id. Before the fix the monitor,
still Ready and publishing only "the first time a pod answers", never sent readiness again, so GET,
WatchPod and ensure_ready waited out their deadlines. The controller's incarnation of the pod (its newest
accepted start/stop) tells the monitor the process changed. Each ordering of {stop, wake, tick, model
ready} that matters is one test; the simulator and the ticker share a manual clock, so nothing sleeps.
"""

from __future__ import annotations

import asyncio

import pytest

from tests.fixtures.services import OPERATOR
from tests.integration.idle_monitor.conftest import POD, POD_ID, MonitorRig, messages, minutes
from thermostat.pods.v1 import pods_pb2
from thermostat.policy.idle.idle_phase import Phase


async def ready_pod(rig: MonitorRig) -> None:
    rig.add_pod(POD_ID, model_ready_seconds=0)
    ready = await rig.tick()
    assert ready.state.phase is Phase.READY
    assert await rig.ready_since() is not None


async def stop(rig: MonitorRig) -> None:
    reply = await rig.pods.StopPod(pods_pb2.StopPodRequest(name=POD), metadata=OPERATOR, timeout=10)
    assert reply.ok
    assert await rig.ready_since() is None, "the controller clears readiness on the stop"


async def wake(rig: MonitorRig, outcome: str = "Started") -> str:
    woke = await rig.pods.StartPod(pods_pb2.StartPodRequest(name=POD), metadata=OPERATOR, timeout=30)
    assert woke.outcome == outcome
    return woke.pod_id


async def test_stop_and_wake_between_two_ticks_with_the_model_ready_before_the_next_publishes_readiness_again(
    rig: MonitorRig, monitor_log: pytest.LogCaptureFixture
) -> None:
    """The next tick finds the same id answering: a new readySince at that tick, and its own idle window."""
    await ready_pod(rig)
    await stop(rig)
    assert await wake(rig) == POD_ID

    ready_tick = rig.now
    decision = await rig.tick()
    assert (decision.state.phase, decision.state.counters.idle_streak) == (Phase.READY, 0)
    assert await rig.ready_since() == ready_tick
    assert messages(monitor_log, f"pod {POD_ID} was stopped or restarted between two ticks")
    assert len(messages(monitor_log, f"pod {POD_ID} ready after")) == 2, "ready is logged once per boot"

    _ticks, stopped_at, _ = await rig.tick_until_stop(limit=30)
    assert stopped_at - ready_tick == minutes(15), "the idle window starts at the new ready"


async def test_stop_and_wake_between_two_ticks_with_the_model_still_loading_boots_then_publishes(
    rig: MonitorRig,
) -> None:
    """The next ticks find the same id RUNNING without metrics: Booting on a fresh budget, not idle accrual."""
    await ready_pod(rig)
    await stop(rig)
    rig.sim.set_pod_lifecycle(POD_ID, model_ready_seconds=3 * 60)
    await wake(rig)
    woken_at = rig.now

    booting = await rig.ticks(3)
    assert [(d.state.phase, d.state.counters.booting_ticks, d.state.counters.idle_streak) for d in booting] == [
        (Phase.BOOTING, 1, 0),
        (Phase.BOOTING, 2, 0),
        (Phase.BOOTING, 3, 0),
    ]
    assert await rig.ready_since() is None, "not usable while the model loads"

    ready = await rig.tick()
    assert ready.state.phase is Phase.READY
    assert await rig.ready_since() == woken_at + minutes(3)


async def test_a_stop_alone_between_two_ticks_goes_down_and_publishes_nothing(rig: MonitorRig) -> None:
    await ready_pod(rig)
    await stop(rig)
    decision = await rig.tick()
    assert decision.state.phase is Phase.DOWN
    assert decision.state.readiness == {}
    assert await rig.ready_since() is None


async def test_a_stop_between_two_ticks_then_a_wake_after_one_boots_as_before(
    rig: MonitorRig, monitor_log: pytest.LogCaptureFixture
) -> None:
    """The monitor saw the pod down: the old Down → Booting → Ready path, unchanged."""
    await ready_pod(rig)
    await stop(rig)
    assert (await rig.tick()).state.phase is Phase.DOWN
    seen_stop = messages(monitor_log, "between two ticks")
    await wake(rig)
    ready_tick = rig.now
    assert (await rig.tick()).state.phase is Phase.READY
    assert await rig.ready_since() == ready_tick
    assert messages(monitor_log, "between two ticks") == seen_stop, "a wake after a seen stop is no unseen restart"


async def test_a_wake_that_replaces_the_stopped_pod_boots_the_replacement_instead_of_billing_its_load_as_idle(
    rig: MonitorRig,
) -> None:
    """Its start refused, the wake creates a new pod id; the stale one is still listed (EXITED) next tick."""
    await ready_pod(rig)
    await stop(rig)
    rig.sim.inject("POST", f"/v2/pods/{POD_ID}/action", status=500)
    rig.sim.configure(model_ready_seconds=2 * 60)
    fresh = await wake(rig, outcome="Created")
    assert fresh != POD_ID
    woken_at = rig.now

    decisions = await rig.ticks(2)
    assert [(d.state.phase, d.state.counters.idle_streak) for d in decisions] == [
        (Phase.BOOTING, 0),
        (Phase.BOOTING, 0),
    ]
    assert await rig.ready_since() is None

    assert (await rig.tick()).state.phase is Phase.READY
    view = await rig.view()
    assert view.pod_id == fresh
    assert await rig.ready_since() == woken_at + minutes(2)


async def test_a_stop_and_wake_while_a_tick_is_scraping_are_corrected_on_the_next_tick(rig: MonitorRig) -> None:
    """The tick read the old process answering, then published after the stop: the controller refuses that
    stale report (its observe predates the stop), the next tick boots the new process, which publishes its own
    once its model answers."""
    rig.add_pod(POD_ID, model_ready_seconds=0)
    scrape = rig.sim.hold("GET", f"/proxy/{POD_ID}-*/metrics", after_commit=True)
    ticking = asyncio.create_task(rig.ticker.tick_once(rig.now))
    await scrape.reached()
    rig.sim.set_pod_lifecycle(POD_ID, model_ready_seconds=2 * 60)
    await stop(rig)
    await wake(rig)
    scrape.release()
    assert (await ticking) is not None
    rig.advance(rig.options.check_seconds)
    assert await rig.ready_since() is None, "the stale report landed after the stop and was refused"

    decision = await rig.tick()
    assert (decision.state.phase, decision.state.counters.booting_ticks) == (Phase.BOOTING, 1)
    assert await rig.ready_since() is None, "the next tick saw the new incarnation: a fresh boot"
    ready_tick = rig.now  # two minutes after the wake: the new model answers
    assert (await rig.tick()).state.phase is Phase.READY
    assert await rig.ready_since() == ready_tick
