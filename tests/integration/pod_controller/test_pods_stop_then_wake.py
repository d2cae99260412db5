"""A stop halts only a wake already under way when it was issued (issue 7).

Each ordering is pinned with simulator holds: a call is parked at RunPod until the test lets it go, so the
interleaving is the one named, never one that a sleep makes likely. The wake's volume list is held until
the stop's record has landed: that is the interleaving in which a wake asked for after the stop used to end
409 "stopped during the wake".
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

import grpc
import pytest

from tests.fixtures.polling import eventually
from tests.fixtures.postgres import open_store
from tests.fixtures.services import OPERATOR, VOLUME
from tests.integration.pod_controller.harness import Controller, action, actions, controller, start, wakes, writes
from thermostat.dev.simulators.runpod.server import RunPodSimulator
from thermostat.pods.v1 import pods_pb2
from thermostat.store.db import Store


@contextlib.asynccontextmanager
async def two_controllers(
    sim: RunPodSimulator, database_url: str, replicas: int
) -> AsyncIterator[tuple[Controller, Controller]]:
    """The stopping and the waking controller: one replica, or two replicas on one database."""
    async with contextlib.AsyncExitStack() as stack:
        stores = [
            await stack.enter_async_context(await open_store(database_url, max_size=4, application_name=f"replica-{i}"))
            for i in range(replicas)
        ]
        running = [await stack.enter_async_context(controller(sim, store)) for store in stores]
        yield running[0], running[-1]


async def _wake_requested(store: Store) -> object:
    return await store.pool.fetchval("SELECT attempt_id FROM pod_wakes WHERE completed_at IS NULL")


def _stop_by_monitor(c: Controller, pod_id: str, trigger: int) -> asyncio.Task[pods_pb2.StopPodsResponse]:
    async def stop() -> pods_pb2.StopPodsResponse:
        return await c.internal.StopPods(
            pods_pb2.StopPodsRequest(name="qwen", pod_ids=[pod_id], trigger=trigger), timeout=30
        )

    return asyncio.create_task(stop())


@pytest.mark.parametrize("replicas", [pytest.param(1, id="one-replica"), pytest.param(2, id="stop-and-wake-on-two")])
@pytest.mark.parametrize(
    ("after_commit", "trigger"),
    [
        pytest.param(
            True, pods_pb2.STOP_TRIGGER_BOOT_GRACE, id="caller-saw-the-pod-exited-before-the-stop-was-recorded"
        ),
        pytest.param(False, pods_pb2.STOP_TRIGGER_IDLE, id="wake-arrives-while-the-idle-stop-is-at-runpod"),
    ],
)
async def test_a_wake_requested_after_a_stop_was_issued_waits_for_it_and_starts_the_pod(
    runpod_sim, db_store, database_url, replicas, after_commit, trigger
) -> None:
    """Stop issued → wake requested → stop settles → the wake starts the stopped pod: Started, not 409."""
    pod = runpod_sim.add_pod(volume_id=VOLUME, status="RUNNING")
    stop_at_runpod = runpod_sim.hold("POST", f"/v2/pods/{pod}/action", after_commit=after_commit)
    async with two_controllers(runpod_sim, database_url, replicas) as (stopping, waking):
        stop = _stop_by_monitor(stopping, pod, trigger)
        await stop_at_runpod.reached()
        list_of_the_wake = runpod_sim.hold("GET", "/v2/pods")  # the stop listed the volume already
        assert runpod_sim.pod(pod)["status"] == ("EXITED" if after_commit else "RUNNING")
        wake = asyncio.create_task(start(waking.public))
        await eventually(lambda: _wake_requested(db_store))
        stop_at_runpod.release()
        assert (await stop).ok  # recorded and settled
        list_of_the_wake.release()
        answer = await wake
        assert answer.code is grpc.StatusCode.OK, answer.details
        assert answer.reply is not None
        assert (answer.reply.outcome, answer.reply.pod_id) == ("Started", pod)
        assert runpod_sim.pod(pod)["status"] == "RUNNING"
        assert [(a.action, a.trigger, a.ok) for a in await actions(waking.public)] == [
            ("Stop", "boot-grace" if after_commit else "idle", True),
            ("Start", "wake", True),
        ]
        (record,) = await wakes(waking.public)
        assert (record.outcome, record.wake_outcome) == ("Succeeded", "Started")


async def test_a_stop_issued_while_a_wake_is_under_way_is_waited_for_and_not_undone(
    runpod_sim, db_store, caplog
) -> None:
    """Wake requested → stop issued, accepted by RunPod but not yet settled → the wake, about to start the
    stopped pod, waits for the stop → it settles → the wake ends Failed; the start is never sent."""
    caplog.set_level(logging.INFO, logger="thermostat.pod_controller.wake_gate")
    pod = runpod_sim.add_pod(volume_id=VOLUME, status="RUNNING")
    list_of_the_wake = runpod_sim.hold("GET", "/v2/pods")
    async with controller(runpod_sim, db_store) as c:
        wake = asyncio.create_task(start(c.public))
        await list_of_the_wake.reached()
        stop_at_runpod = runpod_sim.hold("POST", f"/v2/pods/{pod}/action", after_commit=True)
        stop = asyncio.ensure_future(
            c.public.StopPod(pods_pb2.StopPodRequest(name="qwen"), metadata=OPERATOR, timeout=30)
        )
        await stop_at_runpod.reached()
        list_of_the_wake.release()  # the wake now sees the pod EXITED and would start it

        async def fence_waits() -> bool | None:
            return True if "manual stop issued during the wake is in flight" in caplog.text else None

        await eventually(fence_waits, timeout=10)
        assert writes(runpod_sim) == [action(pod)]  # the stop only: the wake is waiting, not starting
        stop_at_runpod.release()
        assert (await stop).ok
        answer = await wake
    assert answer.code is grpc.StatusCode.ABORTED
    assert f"pod {pod} was stopped (manual) during the wake" in answer.details
    assert writes(runpod_sim) == [action(pod)]  # still the stop only: no start, no create
    assert runpod_sim.pod(pod)["status"] == "EXITED"


async def test_a_refused_stop_issued_during_a_wake_does_not_halt_it(runpod_sim, db_store) -> None:
    """The stop RunPod refused stopped nothing: the wake that waited on it goes on and starts the pod."""
    pod = runpod_sim.add_pod(volume_id=VOLUME, status="EXITED")
    list_of_the_wake = runpod_sim.hold("GET", "/v2/pods")
    async with controller(runpod_sim, db_store) as c:
        wake = asyncio.create_task(start(c.public))
        await list_of_the_wake.reached()
        runpod_sim.inject("POST", f"/v2/pods/{pod}/action", status=500)
        stopped = await c.internal.StopPods(
            pods_pb2.StopPodsRequest(name="qwen", pod_ids=[pod], trigger=pods_pb2.STOP_TRIGGER_IDLE), timeout=30
        )
        assert not stopped.ok
        list_of_the_wake.release()
        answer = await wake
    assert answer.reply is not None
    assert answer.reply.outcome == "Started"
