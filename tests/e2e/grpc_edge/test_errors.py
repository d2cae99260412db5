"""Errors in our words through the edge: a gRPC method the edge does not route is UNIMPLEMENTED saying so and
where to go, and a REST request the transcoder refuses is problem+json naming the field, never the transcoder's
own wording (protobuf type names, request message names)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc
import httpx
import pytest

from tests.e2e.cli.stack import CliStack
from tests.integration.pool_dispatcher.conftest import API_TOKEN
from thermostat.chassis.registry import public_services

pytestmark = pytest.mark.e2e
POOL = {"Authorization": f"Bearer {API_TOKEN}", "X-Strata-Tenant": "errors"}


@pytest.fixture
async def http(stack: CliStack) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=f"http://{stack.edge}", headers=POOL, timeout=10) as client:
        yield client


async def _unimplemented(channel: grpc.aio.Channel, path: str) -> str:
    with pytest.raises(grpc.aio.AioRpcError) as failure:
        await channel.unary_unary(path)(b"", timeout=10)
    assert failure.value.code() == grpc.StatusCode.UNIMPLEMENTED
    return failure.value.details() or ""


@pytest.mark.parametrize(
    "path", ["/thermostat.pods.v1.PodControllerInternal/StopPods", "/thermostat.pool.v2.PoolDispatcher/SubmitJob"]
)
async def test_a_method_the_edge_does_not_route_is_unimplemented_saying_so_and_where_to_go(
    edge: grpc.aio.Channel, path: str
) -> None:
    """An internal service's method, or a service the house lacks: UNIMPLEMENTED naming it and what is routed."""
    details = await _unimplemented(edge, path)
    assert details.startswith(f"the edge does not route {path}: it routes ")
    assert all(name in details for name in public_services())
    assert "grpcurl -plaintext <edge> list" in details and "internal service" in details


async def test_a_method_a_routed_service_lacks_is_unimplemented_naming_its_methods(edge: grpc.aio.Channel) -> None:
    """The service behind the edge answers in the same words, not grpcio's `Method not found!`."""
    details = await _unimplemented(edge, "/thermostat.pods.v1.PodController/Bogus")
    assert details.startswith("thermostat.pods.v1.PodController has no method 'Bogus'; its methods: StartPod, ")


@pytest.mark.parametrize(
    ("method", "url", "detail"),
    [
        ("GET", "/api/pods/qwen?bogus=1", "bogus: no such query parameter on this route"),
        ("POST", "/v1/jobs?machine_type=local&bogus=1", "bogus: no such query parameter on this route"),
        ("PUT", "/api/pods/qwen/budget?bogus=1", "bogus: no such query parameter on this route"),
        ("GET", "/api/pods/qwen/history?page_size=abc", 'page_size: must be a whole number (32-bit), got "abc"'),
        ("GET", "/api/pods/qwen/history?pageSize=1.5", 'page_size: must be a whole number (32-bit), got "1.5"'),
        ("GET", "/v1/spend?since=abc", 'since: must be a finite number, got "abc"'),
        ("GET", "/v1/usage?afterPosition=x", 'after_position: must be a whole number (64-bit), got "x"'),
    ],
)
async def test_a_request_the_transcoder_refuses_is_problem_json_naming_the_field(
    http: httpx.AsyncClient, method: str, url: str, detail: str
) -> None:
    """400 application/problem+json whose detail names the field and what it must be."""
    response = await http.request(method, url, content=b"{}" if method != "GET" else None)
    assert (response.status_code, response.headers["content-type"]) == (400, "application/problem+json")
    assert response.json() == {"type": "about:blank", "status": 400, "title": "Bad Request", "detail": detail}
