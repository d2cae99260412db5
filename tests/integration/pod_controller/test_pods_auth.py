"""Start and stop cost money: the operator token admits both, the wake token only start, GET is open."""

from __future__ import annotations

import grpc
import pytest

from tests.fixtures.services import OPERATOR_TOKEN, VOLUME, WAKE_TOKEN
from tests.integration.pod_controller.harness import start
from thermostat.pods.v1 import pods_pb2

OK = grpc.StatusCode.OK
UNAUTHENTICATED = grpc.StatusCode.UNAUTHENTICATED
DENIED = grpc.StatusCode.PERMISSION_DENIED

CREDENTIALS = [
    pytest.param((), UNAUTHENTICATED, UNAUTHENTICATED, id="missing"),
    pytest.param((("x-rig-operator-token", ""),), UNAUTHENTICATED, UNAUTHENTICATED, id="empty-header"),
    pytest.param((("x-rig-operator-token", "guess"),), DENIED, DENIED, id="wrong-header"),
    pytest.param((("authorization", "Bearer guess"),), DENIED, DENIED, id="wrong-bearer"),
    pytest.param((("x-rig-operator-token", OPERATOR_TOKEN),), OK, OK, id="operator-header"),
    pytest.param((("authorization", f"Bearer {OPERATOR_TOKEN}"),), OK, OK, id="operator-bearer"),
    pytest.param((("x-rig-operator-token", WAKE_TOKEN),), OK, DENIED, id="wake-token-header"),
    pytest.param((("authorization", f"Bearer {WAKE_TOKEN}"),), OK, DENIED, id="wake-token-bearer"),
]


@pytest.mark.parametrize(("metadata", "start_code", "stop_code"), CREDENTIALS)
async def test_start_and_stop_admit_exactly_their_tokens(
    pods_stub, runpod_sim, metadata, start_code, stop_code
) -> None:
    """Missing → UNAUTHENTICATED, wrong → PERMISSION_DENIED; the wake token starts but never stops."""
    runpod_sim.add_pod(volume_id=VOLUME, status="RUNNING")
    started = await start(pods_stub, metadata=metadata)
    assert started.code is start_code
    try:
        await pods_stub.StopPod(pods_pb2.StopPodRequest(name="qwen"), metadata=metadata, timeout=10)
        stopped = OK
    except grpc.aio.AioRpcError as error:
        stopped = error.code()
    assert stopped is stop_code
    refused = [code for code in (start_code, stop_code) if code is not OK]
    if len(refused) == 2:
        assert runpod_sim.requests() == []  # a refused caller never reaches RunPod


async def test_get_pod_and_history_are_open_to_anyone(pods_stub, runpod_sim) -> None:
    """Reads carry no token: GetPod and GetPodHistory answer without one."""
    runpod_sim.add_pod(volume_id=VOLUME, status="RUNNING")
    view = await pods_stub.GetPod(pods_pb2.GetPodRequest(name="qwen"), timeout=10)
    assert view.is_running
    page = await pods_stub.GetPodHistory(pods_pb2.GetPodHistoryRequest(name="qwen"), timeout=10)
    assert list(page.entries) == []
