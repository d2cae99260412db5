"""A query parameter never overrides a field the REST path binds: every annotated route, through the real Envoy.

The routes are read here from the descriptor sets on their own (google.api.http, additional bindings included),
not from the edge's code, so a route the edge's reading missed fails this walk.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from google.api import annotations_pb2, http_pb2
from google.protobuf import descriptor_pb2

from tests.e2e.edge_server import SERVICE, RunningServer, start_edge_test_server
from thermostat.chassis.ports import free_port
from thermostat.chassis.registry import SERVICES, public_services
from thermostat.dev.envoy import EnvoyProcess, start_envoy
from tools.envoy_config import EdgeSpec, HealthCheckTiming, Upstream, upstreams, write_envoy_config

ROOT = Path(__file__).resolve().parents[2]
HOUSE = ROOT / "build" / "thermostat.pb"
EDGETEST = ROOT / "build" / "edgetest.pb"
FAST_CHECKS = HealthCheckTiming(interval_s=0.2, timeout_s=1.0, no_traffic_interval_s=0.2)


@dataclass(frozen=True)
class Route:
    method: str
    verb: str
    path: str  # the template with every variable filled in
    bound: tuple[str, ...]  # the bound fields' proto names (dotted when nested)


def _rules(rule: http_pb2.HttpRule) -> Iterator[http_pb2.HttpRule]:
    yield rule
    for extra in rule.additional_bindings:
        yield from _rules(extra)


def _filled(template: str) -> tuple[str, tuple[str, ...]]:
    bound: list[str] = []

    def fill(match: re.Match[str]) -> str:
        bound.append(match.group(1))
        pattern = match.group(2) or "*"
        return "/".join("seg-a/seg-b" if s == "**" else "path-value" if s == "*" else s for s in pattern.split("/"))

    return re.sub(r"\{([^}=]+)(?:=([^}]*))?\}", fill, template), tuple(bound)


def annotated_routes(descriptor_set: Path, services: set[str]) -> list[Route]:
    routes = []
    for file in descriptor_pb2.FileDescriptorSet.FromString(descriptor_set.read_bytes()).file:
        for service in file.service:
            if f"{file.package}.{service.name}" not in services:
                continue
            for method in service.method:
                if not method.options.HasExtension(annotations_pb2.http):
                    continue
                for rule in _rules(method.options.Extensions[annotations_pb2.http]):
                    kind = rule.WhichOneof("pattern")
                    verb, template = (
                        (rule.custom.kind, rule.custom.path)
                        if kind == "custom"
                        else (kind.upper(), getattr(rule, kind))
                    )
                    path, bound = _filled(template)
                    routes.append(Route(f"{service.name}/{method.name}", verb, path, bound))
    return routes


def camel(name: str) -> str:
    first, *rest = name.split("_")
    return first + "".join(part.capitalize() for part in rest)


def spellings(field: str) -> list[tuple[str, str]]:
    """(what the query says, what the edge's answer names): proto name, JSON name, one percent-encoded."""
    out = {(field, field), (".".join(camel(s) for s in field.split(".")), ".".join(camel(s) for s in field.split(".")))}
    out.add((f"%{ord(field[0]):02X}{field[1:]}", field))
    return sorted(out)


HOUSE_ROUTES = annotated_routes(HOUSE, set(public_services()))
EDGETEST_ROUTES = annotated_routes(EDGETEST, {SERVICE})


def _cases(routes: list[Route]) -> list[object]:
    return [
        pytest.param(route, query, named, id=f"{route.verb} {route.path}?{query}")
        for route in routes
        for field in route.bound
        for query, named in spellings(field)
    ]


def test_the_walk_covers_every_service_route_with_a_path_binding() -> None:
    """The walk is not empty: each pod and monitor route binds `name`; the edge test service binds job_id too."""
    assert {r.path for r in HOUSE_ROUTES if r.bound} >= {
        "/api/pods/path-value",
        "/api/pods/path-value/start",
        "/api/pods/path-value/stop",
        "/api/pods/path-value/monitor",
    }
    assert any("job_id" in r.bound for r in EDGETEST_ROUTES)


@pytest.fixture(scope="module")
async def upstream() -> AsyncIterator[RunningServer]:
    server = await start_edge_test_server()
    yield server
    await server.stop()


async def _edge(spec: EdgeSpec, path: Path) -> EnvoyProcess:
    return await start_envoy(write_envoy_config(spec, path), concurrency=1)


@pytest.fixture(scope="module")
async def house_edge(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[httpx.AsyncClient]:
    """The house's edge config with nothing listening behind it: the refusal must not need a service."""
    nowhere = {s.name: free_port() for s in SERVICES}
    spec = EdgeSpec(
        upstreams=upstreams(ports=nowhere, host="127.0.0.1"),
        descriptor_set=HOUSE,
        listen_port=0,
        admin_port=0,
        health=FAST_CHECKS,
    )
    envoy = await _edge(spec, tmp_path_factory.mktemp("house") / "envoy.yaml")
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{envoy.listeners['edge']}", timeout=5) as http:
        yield http
    await envoy.stop()


@pytest.fixture(scope="module")
async def service_edge(
    upstream: RunningServer, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[httpx.AsyncClient]:
    """The edge test service behind the edge: a request the edge lets through reaches it."""
    spec = EdgeSpec(
        upstreams=(
            Upstream(
                cluster="edgetest", services=(SERVICE,), host="127.0.0.1", port=upstream.port, health_service=SERVICE
            ),
        ),
        descriptor_set=EDGETEST,
        listen_port=0,
        admin_port=0,
        health=FAST_CHECKS,
    )
    envoy = await _edge(spec, tmp_path_factory.mktemp("edgetest") / "envoy.yaml")
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{envoy.listeners['edge']}", timeout=5) as http:
        yield http
    await envoy.stop()


def _assert_refused(answer: httpx.Response, named: str) -> None:
    assert answer.status_code == 400, answer.text
    assert answer.headers["content-type"] == "application/problem+json"
    body = answer.json()
    assert body["status"] == 400
    assert f"'{named}'" in body["detail"] and "path" in body["detail"], body


@pytest.mark.e2e
@pytest.mark.parametrize(("route", "query", "named"), _cases(HOUSE_ROUTES))
async def test_every_house_route_refuses_a_query_naming_a_path_bound_field(
    house_edge: httpx.AsyncClient, route: Route, query: str, named: str
) -> None:
    answer = await house_edge.request(route.verb, f"{route.path}?{query}=other")
    _assert_refused(answer, named)
    later = await house_edge.request(route.verb, f"{route.path}?{query}=other&x=1")
    _assert_refused(later, named)
    plain = await house_edge.request(route.verb, route.path)
    assert "names a field the path binds" not in plain.text, "the plain path is not refused"


@pytest.mark.e2e
@pytest.mark.parametrize(("route", "query", "named"), _cases(EDGETEST_ROUTES))
async def test_every_edge_test_route_refuses_a_query_naming_a_path_bound_field(
    service_edge: httpx.AsyncClient, route: Route, query: str, named: str
) -> None:
    body = {} if route.verb in {"POST", "PUT", "PATCH"} else None
    for path in (f"{route.path}?{query}=other", f"{route.path}/?{query}", f"{route.path}?a=1&{query}=other"):
        _assert_refused(await service_edge.request(route.verb, path, json=body), named)


@pytest.mark.e2e
async def test_without_the_bound_name_the_request_acts_on_the_path_and_other_parameters_stay_the_transcoders(
    service_edge: httpx.AsyncClient,
) -> None:
    """Without the bound name the request reaches the service for the path's pod; other parameters are unchanged."""
    assert (await service_edge.get("/api/pods/qwen")).json()["name"] == "qwen"
    assert (await service_edge.post("/api/pods/qwen/start", json={})).json()["name"] == "qwen"
    unknown = await service_edge.get("/api/pods/qwen?namex=1")
    assert unknown.status_code == 400 and "namex" in unknown.json()["detail"]
