"""ObserveVolume carries each pod's incarnation: the newest accepted start, create, stop or terminate of the id.

RunPod reuses a pod id across stop/start, so the idle monitor tells a new process behind the same id by it.
"""

from __future__ import annotations

from tests.fixtures.postgres import open_store
from tests.fixtures.services import OPERATOR, VOLUME
from tests.integration.pod_controller.harness import controller, start
from thermostat.pods.v1 import pods_pb2


async def incarnations(internal_stub) -> dict[str, int | None]:
    volume = await internal_stub.ObserveVolume(pods_pb2.ObserveVolumeRequest(name="qwen"), timeout=10)
    return {p.pod_id: p.incarnation if p.HasField("incarnation") else None for p in volume.pods}


async def test_a_pod_with_no_recorded_action_is_incarnation_zero(internal_stub, runpod_sim) -> None:
    pod = runpod_sim.add_pod(volume_id=VOLUME, status="RUNNING")
    assert await incarnations(internal_stub) == {pod: 0}


async def test_each_accepted_stop_and_start_moves_the_incarnation_and_a_refused_one_does_not(
    pods_stub, internal_stub, runpod_sim
) -> None:
    pod = runpod_sim.add_pod(volume_id=VOLUME, status="RUNNING")
    await pods_stub.StopPod(pods_pb2.StopPodRequest(name="qwen"), metadata=OPERATOR, timeout=10)
    stopped = (await incarnations(internal_stub))[pod]
    assert stopped is not None and stopped > 0

    started = await start(pods_stub)
    assert started.reply is not None and (started.reply.outcome, started.reply.pod_id) == ("Started", pod)
    restarted = (await incarnations(internal_stub))[pod]
    assert restarted is not None and restarted > stopped

    runpod_sim.inject("POST", f"/v2/pods/{pod}/action", status=500)
    refused = await pods_stub.StopPod(pods_pb2.StopPodRequest(name="qwen"), metadata=OPERATOR, timeout=10)
    assert not refused.ok
    assert (await incarnations(internal_stub))[pod] == restarted


async def test_incarnations_are_per_pod_id(pods_stub, internal_stub, runpod_sim) -> None:
    """A sibling's actions say nothing about this pod's process."""
    first = runpod_sim.add_pod(volume_id=VOLUME, status="RUNNING")
    second = runpod_sim.add_pod(volume_id=VOLUME, status="EXITED")
    await pods_stub.StopPod(pods_pb2.StopPodRequest(name="qwen"), metadata=OPERATOR, timeout=10)
    seen = await incarnations(internal_stub)
    assert seen[second] == 0 and (seen[first] or 0) > 0


async def test_with_the_store_down_the_volume_is_observed_without_incarnations(runpod_sim, database_url) -> None:
    """Unset, not 0: the monitor must not read "no action recorded" into a store it could not read."""
    pod = runpod_sim.add_pod(volume_id=VOLUME, status="RUNNING")
    store = await open_store(database_url, max_size=2, application_name="doomed")
    try:
        async with controller(runpod_sim, store) as c:
            await store.close()
            assert await incarnations(c.internal) == {pod: None}
    finally:
        await store.close()
