"""WakePod (issue 34): the gateway's wake on request runs the start route's wake, recorded with trigger `request` on
the wake's history entry and on the billable calls it issues; two at once through two replicas wake once."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from tests.fixtures.services import OPERATOR, VOLUME, RunningService, pod_controller_env, start_pod_controller
from thermostat.dev.simulators.runpod.server import RunPodSimulator
from thermostat.pods.v1 import pods_pb2, pods_pb2_grpc
from thermostat.store.db import Store

REQUEST = pods_pb2.WAKE_TRIGGER_REQUEST


async def _history(stub: pods_pb2_grpc.PodControllerStub) -> list[pods_pb2.HistoryEntry]:
    return list((await stub.GetPodHistory(pods_pb2.GetPodHistoryRequest(name="qwen"), timeout=10)).entries)


async def test_a_wake_on_request_starts_the_pod_with_trigger_request_in_the_history(
    runpod_sim: RunPodSimulator,
    pods_stub: pods_pb2_grpc.PodControllerStub,
    internal_stub: pods_pb2_grpc.PodControllerInternalStub,
) -> None:
    pod_id = runpod_sim.add_pod(volume_id=VOLUME, status="EXITED")
    answer = await internal_stub.WakePod(pods_pb2.WakePodRequest(name="qwen", trigger=REQUEST), timeout=20)
    assert (answer.outcome, answer.pod_id) == ("Started", pod_id)
    entries = await _history(pods_stub)
    wakes = [e.wake for e in entries if e.WhichOneof("entry") == "wake"]
    actions = [e.action for e in entries if e.WhichOneof("entry") == "action"]
    assert [(w.trigger, w.outcome) for w in wakes] == [("request", "Succeeded")]
    assert [(a.action, a.trigger) for a in actions] == [("Start", "request")]
    view = await pods_stub.GetPod(pods_pb2.GetPodRequest(name="qwen"), timeout=10)
    assert view.last_wake.trigger == "request"


async def test_the_start_route_records_its_wakes_with_trigger_wake(
    runpod_sim: RunPodSimulator, pods_stub: pods_pb2_grpc.PodControllerStub
) -> None:
    runpod_sim.add_pod(volume_id=VOLUME, status="EXITED")
    await pods_stub.StartPod(pods_pb2.StartPodRequest(name="qwen"), metadata=OPERATOR, timeout=20)
    wakes = [e.wake for e in await _history(pods_stub) if e.WhichOneof("entry") == "wake"]
    assert [w.trigger for w in wakes] == ["wake"]


async def test_a_wake_without_a_trigger_is_refused_naming_the_field(
    runpod_sim: RunPodSimulator, internal_stub: pods_pb2_grpc.PodControllerInternalStub
) -> None:
    runpod_sim.add_pod(volume_id=VOLUME, status="EXITED")
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await internal_stub.WakePod(pods_pb2.WakePodRequest(name="qwen"), timeout=10)
    assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "trigger" in (refused.value.details() or "")
    assert runpod_sim.requests("/v2/pods") == []


async def test_an_unknown_pod_is_not_found(internal_stub: pods_pb2_grpc.PodControllerInternalStub) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await internal_stub.WakePod(pods_pb2.WakePodRequest(name="nope", trigger=REQUEST), timeout=10)
    assert refused.value.code() is grpc.StatusCode.NOT_FOUND


async def test_two_wakes_on_request_through_two_replicas_at_once_start_the_pod_once(
    runpod_sim: RunPodSimulator, db_store: Store, pod_controller: RunningService
) -> None:
    """Two gateway replicas asking two controller replicas at the same moment: one Start, both answered."""
    pod_id = runpod_sim.add_pod(volume_id=VOLUME, status="EXITED")
    hold = runpod_sim.hold("POST", f"/v2/pods/{pod_id}/action")
    async with (
        start_pod_controller(pod_controller_env(runpod_sim), db_store) as second,
        pod_controller.channel() as one,
        second.channel() as two,
    ):

        async def wake(channel: grpc.aio.Channel) -> pods_pb2.StartPodResponse:
            stub = pods_pb2_grpc.PodControllerInternalStub(channel)
            return await stub.WakePod(pods_pb2.WakePodRequest(name="qwen", trigger=REQUEST), timeout=30)

        calls = [asyncio.create_task(wake(channel)) for channel in (one, two)]
        await hold.reached()
        hold.release()
        answers = await asyncio.gather(*calls)
    assert {a.pod_id for a in answers} == {pod_id}
    starts = [r for r in runpod_sim.requests("/v2/pods") if r.method == "POST"]
    assert [r.path for r in starts] == [f"/v2/pods/{pod_id}/action"]
