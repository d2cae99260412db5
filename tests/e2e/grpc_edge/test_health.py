"""grpc.health.v1.Health through the edge of the whole stack, as a load balancer or grpcurl asks it: the empty
name is the stack (what GET /health says), each public service's full name is that service."""

from __future__ import annotations

import json

import grpc
import httpx
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.e2e.cli.stack import CliStack
from tests.e2e.grpc_edge.grpcurl import grpcurl
from thermostat.chassis.registry import SERVICES, public_services

pytestmark = pytest.mark.e2e
SERVING = health_pb2.HealthCheckResponse.SERVING


async def test_the_stack_and_every_public_service_answer_serving_at_the_edge(
    stack: CliStack, edge: grpc.aio.Channel
) -> None:
    """Check "" is SERVING while GET /health is 200; each public service and each health name answers for itself."""
    stub = health_pb2_grpc.HealthStub(edge)
    async with httpx.AsyncClient(timeout=10) as http:
        assert (await http.get(f"http://{stack.edge}/health")).status_code == 200
    assert (await stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=10)).status == SERVING
    for name in {*public_services(), *(s.health_service for s in SERVICES)}:
        assert (await stub.Check(health_pb2.HealthCheckRequest(service=name), timeout=10)).status == SERVING, name


async def test_an_internal_service_is_not_found_at_the_edge(edge: grpc.aio.Channel) -> None:
    """The edge answers for what it routes: an internal service's name is NOT_FOUND, not its status."""
    request = health_pb2.HealthCheckRequest(service="thermostat.pool.v1.PoolDispatcherInternal")
    with pytest.raises(grpc.aio.AioRpcError) as failure:
        await health_pb2_grpc.HealthStub(edge).Check(request, timeout=10)
    assert failure.value.code() == grpc.StatusCode.NOT_FOUND
    assert "thermostat.pool.v1.PoolDispatcher," in (failure.value.details() or "")


async def test_grpcurl_checks_the_stack_as_an_operator_types_it(stack: CliStack) -> None:
    """`grpcurl -plaintext EDGE grpc.health.v1.Health/Check` prints SERVING."""
    ran = await grpcurl("-plaintext", stack.edge, "grpc.health.v1.Health/Check")
    assert (ran.returncode, json.loads(ran.stdout)) == (0, {"status": "SERVING"}), ran.stderr
