"""The gateway's calls to the pod controller wait for a controller that is not up yet (the stack starts its services
side by side; a controller restarts), rather than refusing the request at once with UNAVAILABLE."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from thermostat.chassis.ports import free_port
from thermostat.gateway.views import PodViews
from thermostat.pods.v1 import pods_pb2, pods_pb2_grpc
from thermostat.policy.common.pod_options import PodOptions


class _Controller(pods_pb2_grpc.PodControllerInternalServicer):  # type: ignore[misc]
    async def WakePod(self, request: pods_pb2.WakePodRequest, context: object) -> pods_pb2.StartPodResponse:
        return pods_pb2.StartPodResponse(name=request.name, outcome="Started", pod_id="p1")


async def test_a_wake_asked_before_the_controller_listens_waits_for_it() -> None:
    port = free_port()
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        views = PodViews(
            [PodOptions(name="qwen")],
            pods_pb2_grpc.PodControllerStub(channel),
            pods_pb2_grpc.PodControllerInternalStub(channel),
            timeout=20,
        )
        wake = asyncio.create_task(views.wake("qwen"))
        # the barrier: the channel has tried the port and found nobody there
        state = channel.get_state(try_to_connect=True)
        while state is not grpc.ChannelConnectivity.TRANSIENT_FAILURE:
            await channel.wait_for_state_change(state)
            state = channel.get_state()
        assert not wake.done()
        server = grpc.aio.server()
        pods_pb2_grpc.add_PodControllerInternalServicer_to_server(_Controller(), server)
        server.add_insecure_port(f"127.0.0.1:{port}")
        await server.start()
        try:
            answer = await asyncio.wait_for(wake, 20)
        finally:
            await server.stop(None)
    assert (answer.code, answer.outcome) == ("OK", "Started")


@pytest.mark.parametrize("code", [grpc.StatusCode.ABORTED, grpc.StatusCode.RESOURCE_EXHAUSTED])
async def test_a_refused_wake_is_answered_with_its_code_and_reason(code: grpc.StatusCode) -> None:
    class Refusing(pods_pb2_grpc.PodControllerInternalServicer):  # type: ignore[misc]
        async def WakePod(self, request: pods_pb2.WakePodRequest, context: grpc.aio.ServicerContext) -> None:
            await context.abort(code, "no GPU under 1.00 USD/h")

    server = grpc.aio.server()
    pods_pb2_grpc.add_PodControllerInternalServicer_to_server(Refusing(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            views = PodViews(
                [PodOptions(name="qwen")],
                pods_pb2_grpc.PodControllerStub(channel),
                pods_pb2_grpc.PodControllerInternalStub(channel),
                timeout=20,
            )
            answer = await views.wake("qwen")
    finally:
        await server.stop(None)
    assert (answer.code, answer.message) == (code.name, "no GPU under 1.00 USD/h")
