"""StopPod and the idle monitor's StopPods: every pod on the volume, per-pod results, the trigger recorded."""

from __future__ import annotations

from datetime import UTC, datetime

import grpc
import pytest

from tests.fixtures.services import OPERATOR, VOLUME
from tests.integration.pod_controller.harness import LIST, action, actions, api_calls, writes
from thermostat.chassis.timestamps import to_timestamp
from thermostat.pods.v1 import pods_pb2

QWEN = pods_pb2.StopPodRequest(name="qwen")


async def test_stop_stops_every_pod_on_the_volume_and_records_each_as_manual(pods_stub, runpod_sim) -> None:
    """A stale pod and its replacement both billing: one list, one stop action each, ok for both."""
    first = runpod_sim.add_pod(volume_id=VOLUME, status="RUNNING")
    second = runpod_sim.add_pod(volume_id=VOLUME, status="STARTING")
    elsewhere = runpod_sim.add_pod(volume_id="agv6w2qcg7", status="RUNNING")
    reply = await pods_stub.StopPod(QWEN, metadata=OPERATOR, timeout=10)
    assert reply.name == "qwen"
    assert reply.ok
    assert sorted((p.pod_id, p.ok) for p in reply.pods) == sorted([(first, True), (second, True)])
    calls = api_calls(runpod_sim)
    assert calls[0] == LIST
    assert sorted(calls[1:]) == sorted([action(first), action(second)])
    assert all(r.json_body == {"action": "stop"} for r in runpod_sim.requests() if r.method == "POST")
    assert {s["id"]: s["status"] for s in runpod_sim.pods()} == {
        first: "EXITED",
        second: "EXITED",
        elsewhere: "RUNNING",
    }
    recorded = await actions(pods_stub)
    assert sorted((a.action, a.pod_id, a.ok, a.trigger, a.http_status) for a in recorded) == sorted(
        [("Stop", first, True, "manual", 200), ("Stop", second, True, "manual", 200)]
    )


async def test_a_pod_that_refuses_the_stop_makes_ok_false_but_the_answer_is_still_200(pods_stub, runpod_sim) -> None:
    """One pod's action answers 500: its ok is false, the other is stopped, the call succeeds, both recorded."""
    good = runpod_sim.add_pod(volume_id=VOLUME, status="RUNNING")
    bad = runpod_sim.add_pod(volume_id=VOLUME, status="RUNNING")
    runpod_sim.inject("POST", f"/v2/pods/{bad}/action", status=500)
    reply = await pods_stub.StopPod(QWEN, metadata=OPERATOR, timeout=10)
    assert not reply.ok
    assert {p.pod_id: p.ok for p in reply.pods} == {good: True, bad: False}
    assert sorted((a.pod_id, a.ok, a.http_status) for a in await actions(pods_stub)) == sorted(
        [(good, True, 200), (bad, False, 500)]
    )


async def test_stop_with_no_pod_on_the_volume_is_not_found(pods_stub, runpod_sim) -> None:
    """An empty, readable list: NOT_FOUND (404) after the one list call."""
    with pytest.raises(grpc.aio.AioRpcError) as error:
        await pods_stub.StopPod(QWEN, metadata=OPERATOR, timeout=10)
    assert error.value.code() is grpc.StatusCode.NOT_FOUND
    assert api_calls(runpod_sim) == [LIST]


async def test_stop_on_an_unreadable_list_is_unavailable_and_stops_nothing(pods_stub, runpod_sim) -> None:
    """A 503 on GET /v2/pods: UNAVAILABLE, no stop issued, the running pod keeps running."""
    pod = runpod_sim.add_pod(volume_id=VOLUME, status="RUNNING")
    runpod_sim.inject("GET", "/v2/pods", status=503)
    with pytest.raises(grpc.aio.AioRpcError) as error:
        await pods_stub.StopPod(QWEN, metadata=OPERATOR, timeout=10)
    assert error.value.code() is grpc.StatusCode.UNAVAILABLE
    assert "nothing was stopped" in (error.value.details() or "")
    assert writes(runpod_sim) == []
    assert runpod_sim.pod(pod)["status"] == "RUNNING"
    assert await actions(pods_stub) == []


@pytest.mark.parametrize(
    ("trigger", "recorded"),
    [
        pytest.param(pods_pb2.STOP_TRIGGER_IDLE, "idle", id="idle"),
        pytest.param(pods_pb2.STOP_TRIGGER_BOOT_GRACE, "boot-grace", id="boot-grace"),
        pytest.param(pods_pb2.STOP_TRIGGER_RUNTIME_CAP, "runtime-cap", id="runtime-cap"),
        pytest.param(pods_pb2.STOP_TRIGGER_MANUAL, "manual", id="manual"),
    ],
)
async def test_internal_stop_records_its_trigger_and_clears_the_stopped_pods_readiness(
    pods_stub, internal_stub, runpod_sim, trigger, recorded
) -> None:
    """StopPods stops only the pods named, records the monitor's trigger, and an accepted stop ends readiness."""
    pod = runpod_sim.add_pod(volume_id=VOLUME, status="RUNNING")
    sibling = runpod_sim.add_pod(volume_id=VOLUME, status="EXITED")
    await internal_stub.ReportReadiness(
        pods_pb2.ReportReadinessRequest(name="qwen", pod_id=pod, ready_since=to_timestamp(datetime.now(UTC))),
        timeout=10,
    )
    assert (await pods_stub.GetPod(pods_pb2.GetPodRequest(name="qwen"), timeout=10)).HasField("ready_since")
    runpod_sim.clear_requests()

    reply = await internal_stub.StopPods(
        pods_pb2.StopPodsRequest(name="qwen", pod_ids=[pod, pod], trigger=trigger), timeout=10
    )
    assert reply.ok
    assert [(p.pod_id, p.ok) for p in reply.pods] == [(pod, True)]
    assert api_calls(runpod_sim) == [LIST, action(pod)]
    assert runpod_sim.pod(sibling)["status"] == "EXITED"
    (stop,) = await actions(pods_stub)
    assert (stop.action, stop.pod_id, stop.trigger, stop.ok) == ("Stop", pod, recorded, True)
    view = await pods_stub.GetPod(pods_pb2.GetPodRequest(name="qwen"), timeout=10)
    assert not view.HasField("ready_since")


async def test_an_internal_stop_never_touches_a_pod_that_is_not_on_the_volume(internal_stub, runpod_sim) -> None:
    """A pod id the volume does not list is refused (ok false) without a stop request; ours is stopped."""
    ours = runpod_sim.add_pod(volume_id=VOLUME, status="RUNNING")
    foreign = runpod_sim.add_pod(volume_id="agv6w2qcg7", datacenter_id="US-TX-3", status="RUNNING")
    runpod_sim.clear_requests()
    reply = await internal_stub.StopPods(
        pods_pb2.StopPodsRequest(name="qwen", pod_ids=[foreign, ours], trigger=pods_pb2.STOP_TRIGGER_IDLE), timeout=10
    )
    assert not reply.ok
    assert sorted((p.pod_id, p.ok) for p in reply.pods) == sorted([(ours, True), (foreign, False)])
    assert api_calls(runpod_sim) == [LIST, action(ours)]
    assert runpod_sim.pod(foreign)["status"] == "RUNNING"


async def test_a_refused_internal_stop_keeps_the_pods_readiness(pods_stub, internal_stub, runpod_sim) -> None:
    """RunPod refused the stop (409): the pod is still up and still ready, and the refusal is recorded."""
    pod = runpod_sim.add_pod(volume_id=VOLUME, status="RUNNING")
    await internal_stub.ReportReadiness(
        pods_pb2.ReportReadinessRequest(name="qwen", pod_id=pod, ready_since=to_timestamp(datetime.now(UTC))),
        timeout=10,
    )
    runpod_sim.inject("POST", f"/v2/pods/{pod}/action", status=409)
    reply = await internal_stub.StopPods(
        pods_pb2.StopPodsRequest(name="qwen", pod_ids=[pod], trigger=pods_pb2.STOP_TRIGGER_IDLE), timeout=10
    )
    assert not reply.ok
    view = await pods_stub.GetPod(pods_pb2.GetPodRequest(name="qwen"), timeout=10)
    assert view.HasField("ready_since")
    (stop,) = await actions(pods_stub)
    assert (stop.ok, stop.http_status, stop.trigger) == (False, 409, "idle")


@pytest.mark.parametrize(
    ("request_", "field"),
    [
        pytest.param(pods_pb2.StopPodsRequest(name="qwen", pod_ids=["p1"]), "trigger", id="no-trigger"),
        pytest.param(
            pods_pb2.StopPodsRequest(name="qwen", pod_ids=[" "], trigger=pods_pb2.STOP_TRIGGER_IDLE),
            "pod_ids",
            id="blank-pod-id",
        ),
    ],
)
async def test_an_internal_stop_without_a_trigger_or_a_pod_is_invalid_and_calls_nothing(
    internal_stub, runpod_sim, request_, field
) -> None:
    """StopPods must say why and what: INVALID_ARGUMENT naming the field, before any RunPod call."""
    with pytest.raises(grpc.aio.AioRpcError) as error:
        await internal_stub.StopPods(request_, timeout=10)
    assert error.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert field in (error.value.details() or "")
    assert runpod_sim.requests() == []
