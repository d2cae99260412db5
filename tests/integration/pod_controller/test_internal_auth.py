"""The controller's internal RPCs admit only the deployment's internal token; reflection never lists nor describes
them."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
import pytest
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from tests.fixtures.services import (
    INTERNAL_TOKEN,
    OPERATOR_TOKEN,
    VOLUME,
    RunningService,
    pod_controller_env,
    start_pod_controller,
)
from thermostat.chassis.internal_auth import INTERNAL_TOKEN_ENV, INTERNAL_TOKEN_HEADER
from thermostat.chassis.reflection import EDGE_HEADER, EDGE_VALUE
from thermostat.chassis.registry import POD_CONTROLLER, public_services
from thermostat.dev.simulators.runpod.server import RunPodSimulator
from thermostat.pods.v1 import pods_pb2, pods_pb2_grpc
from thermostat.store.db import Store

OK = grpc.StatusCode.OK
UNAUTHENTICATED = grpc.StatusCode.UNAUTHENTICATED
DENIED = grpc.StatusCode.PERMISSION_DENIED

Call = Callable[[pods_pb2_grpc.PodControllerInternalStub, tuple[tuple[str, str], ...]], Awaitable[Any]]
CALLS: dict[str, Call] = {
    "ObserveVolume": lambda stub, md: stub.ObserveVolume(
        pods_pb2.ObserveVolumeRequest(name="qwen"), metadata=md, timeout=10
    ),
    "StopPods": lambda stub, md: stub.StopPods(
        pods_pb2.StopPodsRequest(name="qwen", pod_ids=["nopod00000001"], trigger=pods_pb2.STOP_TRIGGER_IDLE),
        metadata=md,
        timeout=10,
    ),
    "WakePod": lambda stub, md: stub.WakePod(
        pods_pb2.WakePodRequest(name="qwen", trigger=pods_pb2.WAKE_TRIGGER_REQUEST), metadata=md, timeout=10
    ),
    "ReportReadiness": lambda stub, md: stub.ReportReadiness(
        pods_pb2.ReportReadinessRequest(name="qwen", pod_id="nopod00000001"), metadata=md, timeout=10
    ),
}

CREDENTIALS = [
    pytest.param((), UNAUTHENTICATED, id="no-token"),
    pytest.param(((INTERNAL_TOKEN_HEADER, ""),), UNAUTHENTICATED, id="empty-token"),
    pytest.param(((INTERNAL_TOKEN_HEADER, "guess"),), DENIED, id="wrong-token"),
    pytest.param(((INTERNAL_TOKEN_HEADER, INTERNAL_TOKEN + "x"),), DENIED, id="token-with-a-suffix"),
    pytest.param((("authorization", f"Bearer {INTERNAL_TOKEN}"),), UNAUTHENTICATED, id="internal-token-as-bearer"),
    pytest.param((("x-rig-operator-token", OPERATOR_TOKEN),), UNAUTHENTICATED, id="operator-token"),
    pytest.param(((INTERNAL_TOKEN_HEADER, OPERATOR_TOKEN),), DENIED, id="operator-token-in-the-internal-header"),
    pytest.param(((INTERNAL_TOKEN_HEADER, INTERNAL_TOKEN),), OK, id="internal-token"),
]


async def _code(
    call: Call, stub: pods_pb2_grpc.PodControllerInternalStub, metadata: tuple[tuple[str, str], ...]
) -> grpc.StatusCode:
    try:
        await call(stub, metadata)
    except grpc.aio.AioRpcError as error:
        return error.code()
    return OK


@pytest.mark.parametrize("method", list(CALLS))
@pytest.mark.parametrize(("metadata", "expected"), CREDENTIALS)
async def test_each_internal_rpc_admits_only_the_internal_token(
    pod_controller: RunningService,
    runpod_sim: RunPodSimulator,
    method: str,
    metadata: tuple[tuple[str, str], ...],
    expected: grpc.StatusCode,
) -> None:
    """No token → UNAUTHENTICATED, any other token (the operator's too) → PERMISSION_DENIED, and no pod is touched."""
    pod_id = runpod_sim.add_pod(volume_id=VOLUME, status="RUNNING")
    async with grpc.aio.insecure_channel(pod_controller.address) as channel:
        stub = pods_pb2_grpc.PodControllerInternalStub(channel)
        calls = {
            **CALLS,
            "StopPods": lambda s, md: s.StopPods(
                pods_pb2.StopPodsRequest(name="qwen", pod_ids=[pod_id], trigger=pods_pb2.STOP_TRIGGER_IDLE),
                metadata=md,
                timeout=10,
            ),
        }
        assert await _code(calls[method], stub, metadata) is expected
    stopped = runpod_sim.pod(pod_id)["status"] != "RUNNING"
    assert stopped is (expected is OK and method == "StopPods")


async def test_a_refusal_is_logged_with_the_method_and_never_the_token(
    pod_controller: RunningService, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    async with grpc.aio.insecure_channel(pod_controller.address) as channel:
        stub = pods_pb2_grpc.PodControllerInternalStub(channel)
        assert await _code(CALLS["ObserveVolume"], stub, ()) is UNAUTHENTICATED
        assert await _code(CALLS["ReportReadiness"], stub, ((INTERNAL_TOKEN_HEADER, "guessed-token"),)) is DENIED
    refusals = [r.getMessage() for r in caplog.records if r.getMessage().startswith("refused")]
    assert any(
        "/thermostat.pods.v1.PodControllerInternal/ObserveVolume" in m and "UNAUTHENTICATED" in m for m in refusals
    ), refusals
    assert any(
        "/thermostat.pods.v1.PodControllerInternal/ReportReadiness" in m and "PERMISSION_DENIED" in m for m in refusals
    ), refusals
    assert not any("guessed-token" in r.getMessage() for r in caplog.records)


async def test_without_an_internal_token_every_internal_call_is_refused_and_the_start_says_so(
    runpod_sim: RunPodSimulator, db_store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    """Fail closed: an unset THERMOSTAT_INTERNAL_TOKEN admits no token at all, the empty one included."""
    caplog.set_level(logging.WARNING)
    env = {k: v for k, v in pod_controller_env(runpod_sim).items() if k != INTERNAL_TOKEN_ENV}
    async with start_pod_controller(env, db_store) as running, running.channel() as channel:
        stub = pods_pb2_grpc.PodControllerInternalStub(channel)
        for call in CALLS.values():
            assert await _code(call, stub, ()) is DENIED  # the channel presents the tests' internal token
        reply = await pods_pb2_grpc.PodControllerStub(channel).GetPod(pods_pb2.GetPodRequest(name="qwen"), timeout=10)
        assert reply.name == "qwen", "public RPCs are served as before"
    said = [r.getMessage() for r in caplog.records if INTERNAL_TOKEN_ENV in r.getMessage()]
    assert any("is unset" in m and "thermostat.pods.v1.PodControllerInternal" in m for m in said), said


async def _reflect(address: str, request: reflection_pb2.ServerReflectionRequest, *, edge: bool) -> Any:
    metadata = ((EDGE_HEADER, EDGE_VALUE),) if edge else ()
    async with grpc.aio.insecure_channel(address) as channel:
        call = reflection_pb2_grpc.ServerReflectionStub(channel).ServerReflectionInfo(
            iter([request]), metadata=metadata, timeout=10
        )
        (answer,) = [response async for response in call]
        return answer


@pytest.mark.parametrize("edge", [False, True], ids=["own-port", "for-the-edge"])
async def test_reflection_never_lists_nor_describes_an_internal_service(
    pod_controller: RunningService, edge: bool
) -> None:
    """Neither the port's own view nor the edge's advertises what the edge never routes, nor describes it."""
    listed = await _reflect(pod_controller.address, reflection_pb2.ServerReflectionRequest(list_services=""), edge=edge)
    names = {s.name for s in listed.list_services_response.service}
    assert not names & set(POD_CONTROLLER.internal_services)
    internal = reflection_pb2.ServerReflectionRequest(file_containing_symbol=POD_CONTROLLER.internal_services[0])
    described = await _reflect(pod_controller.address, internal, edge=edge)
    assert described.error_response.error_code == grpc.StatusCode.NOT_FOUND.value[0]


async def test_reflection_on_the_port_describes_what_it_serves_and_for_the_edge_what_the_edge_routes(
    pod_controller: RunningService,
) -> None:
    """Its own port: the controller's public service, health and reflection; asked by the edge: every public one."""
    ask = reflection_pb2.ServerReflectionRequest(list_services="")
    own = await _reflect(pod_controller.address, ask, edge=False)
    assert sorted(s.name for s in own.list_services_response.service) == [
        "grpc.health.v1.Health",
        "grpc.reflection.v1alpha.ServerReflection",
        *POD_CONTROLLER.public_services,
    ]
    other = reflection_pb2.ServerReflectionRequest(file_containing_symbol="thermostat.pool.v1.PoolDispatcher")
    assert (await _reflect(pod_controller.address, other, edge=False)).HasField("error_response")
    for_edge = await _reflect(pod_controller.address, ask, edge=True)
    assert sorted(s.name for s in for_edge.list_services_response.service) == sorted(
        [*public_services(), "grpc.health.v1.Health", "grpc.reflection.v1alpha.ServerReflection"]
    )
    assert (await _reflect(pod_controller.address, other, edge=True)).HasField("file_descriptor_response")
