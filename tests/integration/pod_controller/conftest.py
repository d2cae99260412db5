"""Fixtures of the pod-controller tests beyond the shared ones (tests/fixtures/services.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.fixtures.services import RunningService
from thermostat.pods.v1 import pods_pb2_grpc


@pytest.fixture
async def internal_stub(pod_controller: RunningService) -> AsyncIterator[pods_pb2_grpc.PodControllerInternalStub]:
    """The idle monitor's stub on the same controller as `pods_stub`."""
    async with pod_controller.channel() as channel:
        yield pods_pb2_grpc.PodControllerInternalStub(channel)
