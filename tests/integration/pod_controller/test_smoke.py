"""A first wake through the real gRPC server, the simulator and Postgres."""

from __future__ import annotations

from tests.fixtures.services import OPERATOR
from thermostat.pods.v1 import pods_pb2


async def test_a_wake_with_no_pod_on_the_volume_creates_one_on_the_cheapest_card_that_places(
    pods_stub, runpod_sim
) -> None:
    """The price-capped walk skips the card with no capacity (400) and creates on the A100 at 1.59."""
    reply = await pods_stub.StartPod(pods_pb2.StartPodRequest(name="QWEN"), metadata=OPERATOR, timeout=30)
    assert reply.outcome == "Created"
    assert reply.gpu_id == "NVIDIA A100 80GB PCIe"
    assert reply.price_per_hour == 1.59
    view = await pods_stub.GetPod(pods_pb2.GetPodRequest(name="qwen"), timeout=10)
    assert view.is_running
    assert view.pod_id == reply.pod_id
    assert view.last_wake.outcome == "Succeeded"
