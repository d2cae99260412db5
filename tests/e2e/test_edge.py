"""The Envoy edge, for real: a grpc.aio server behind a real Envoy, spoken to over HTTP and native gRPC."""

from __future__ import annotations

import asyncio
import json
import re
import socket
import time
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import httpx
import pytest
from google.protobuf import descriptor_pool
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase

from tests.e2e.edge_server import READY_SINCE_JSON, SERVICE, RunningServer, start_edge_test_server
from thermostat.chassis.ports import free_port
from thermostat.dev.envoy import EnvoyError, EnvoyProcess, start_envoy, validate_config
from thermostat.edgetest.v1 import edgetest_pb2, edgetest_pb2_grpc
from tools.envoy_config import (
    DEFAULT_LISTEN_PORT,
    HEALTH_FILTER,
    PLUMBING_FILTER,
    EdgeSpec,
    HealthCheckTiming,
    Upstream,
    build_envoy_config,
    listen_port_from_env,
    write_envoy_config,
)

ROOT = Path(__file__).resolve().parents[2]
DESCRIPTORS = ROOT / "build" / "edgetest.pb"
FAST_CHECKS = HealthCheckTiming(interval_s=0.2, timeout_s=1.0, no_traffic_interval_s=0.2)
BODY_LIMIT = 2 * 1024 * 1024
NO_ROUTE = "no route takes this method on this path"


def _spec(*upstreams: Upstream, **overrides: object) -> EdgeSpec:
    return EdgeSpec(upstreams=upstreams, descriptor_set=DESCRIPTORS, **overrides)  # type: ignore[arg-type]


def _upstream(cluster: str, port: int, *services: str) -> Upstream:
    return Upstream(cluster=cluster, services=services, host="127.0.0.1", port=port, health_service=services[0])


def _hcm(config: dict) -> dict:
    return config["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]


# --- the config builder, without Envoy ---------------------------------------------------------------


def test_config_routes_each_service_to_its_owner_and_reflection_to_the_designated_one() -> None:
    """Each service's gRPC prefix goes to the cluster owning it; reflection goes to the designated one."""
    config = build_envoy_config(
        _spec(
            _upstream("pods", 1, "a.v1.Pods"),
            _upstream("pool", 2, "b.v1.Pool", "b.v1.Admin"),
            reflection_cluster="pool",
        )
    )
    routes = {
        r["match"].get("prefix", r["match"].get("path")): r.get("route", {}).get("cluster")
        for r in _hcm(config)["route_config"]["virtual_hosts"][0]["routes"]
    }
    assert routes["/a.v1.Pods/"] == "pods"
    assert routes["/b.v1.Pool/"] == "pool"
    assert routes["/b.v1.Admin/"] == "pool"
    assert routes["/grpc.reflection.v1alpha.ServerReflection/"] == "pool"
    transcoder = next(f for f in _hcm(config)["http_filters"] if f["name"].endswith("grpc_json_transcoder"))
    assert transcoder["typed_config"]["services"] == ["a.v1.Pods", "b.v1.Pool", "b.v1.Admin"]


def test_config_health_checks_every_cluster_and_health_asks_all_of_them() -> None:
    """Every cluster has an active gRPC health check with a short no-traffic interval (routing); the /health
    route alone runs the health script, which names every cluster with its health service."""
    config = build_envoy_config(_spec(_upstream("pods", 1, "a.v1.Pods"), _upstream("pool", 2, "b.v1.Pool")))
    for cluster in config["static_resources"]["clusters"]:
        (check,) = cluster["health_checks"]
        assert check["grpc_health_check"]["service_name"] in {"a.v1.Pods", "b.v1.Pool"}
        assert check["no_traffic_interval"] == "1.000s"
    (health_filter,) = [f for f in _hcm(config)["http_filters"] if f["name"] == HEALTH_FILTER]
    assert "default_source_code" not in health_filter["typed_config"]  # no script for any other request
    assert _hcm(config)["http_filters"][0] is health_filter
    routes = _hcm(config)["route_config"]["virtual_hosts"][0]["routes"]
    (health,) = [r for r in routes if r["match"].get("path") == "/health"]
    script = health["typed_per_filter_config"][HEALTH_FILTER]["source_code"]["inline_string"]
    assert 'cluster = "pods", health_service = "a.v1.Pods"' in script
    assert 'cluster = "pool", health_service = "b.v1.Pool"' in script
    assert [r for r in routes if HEALTH_FILTER in r.get("typed_per_filter_config", {})] == [health]


def test_the_rest_response_filter_is_skipped_for_native_grpc_calls() -> None:
    """Matched on the request's content-type, so a native gRPC call runs no Lua at all."""
    config = build_envoy_config(_spec(_upstream("pods", 1, "a.v1.Pods")))
    (rest,) = [f for f in _hcm(config)["http_filters"] if f["name"] == "envoy.filters.http.lua"]
    (matcher,) = rest["typed_config"]["xds_matcher"]["matcher_list"]["matchers"]
    predicate = matcher["predicate"]["single_predicate"]
    assert (predicate["input"]["typed_config"]["header_name"], predicate["value_match"]) == (
        "content-type",
        {"prefix": "application/grpc"},
    )
    assert matcher["on_match"]["action"]["typed_config"]["@type"].endswith("SkipFilter")


def test_grpc_plumbing_is_removed_from_rest_responses_before_lua_and_never_from_native_grpc() -> None:
    """Listed before the Lua filter, so on the response path it runs after Lua has read grpc-message."""
    filters = _hcm(build_envoy_config(_spec(_upstream("pods", 1, "a.v1.Pods"))))["http_filters"]
    names = [f["name"] for f in filters]
    assert names.index(PLUMBING_FILTER) < names.index("envoy.filters.http.lua")
    plumbing = filters[names.index(PLUMBING_FILTER)]["typed_config"]
    (native,) = plumbing["xds_matcher"]["matcher_list"]["matchers"]
    assert native["predicate"]["single_predicate"]["value_match"] == {"prefix": "application/grpc"}
    mutations = plumbing["extension_config"]["typed_config"]["mutations"]
    assert mutations == {"response_mutations": [{"remove_on_match": {"key_matcher": {"prefix": "grpc-"}}}]}


LONG_CALL = f"{SERVICE}/GetJobResult"


def test_a_long_call_has_its_own_route_whose_timeouts_cover_it_ahead_of_its_services_prefix() -> None:
    """A registry's long call (the pool's sync submit) is matched on its method path, REST re-routed by the
    transcoder and native gRPC alike, with route and idle timeouts of long_call_seconds plus the usual margin."""
    upstream = Upstream(
        cluster="edgetest",
        services=(SERVICE,),
        host="127.0.0.1",
        port=1,
        health_service=SERVICE,
        long_calls=(LONG_CALL,),
        long_call_seconds=3600.0,
    )
    routes = _hcm(build_envoy_config(_spec(upstream)))["route_config"]["virtual_hosts"][0]["routes"]
    paths = [r["match"].get("path", r["match"].get("prefix")) for r in routes]
    long = routes[paths.index(f"/{LONG_CALL}")]["route"]
    assert (long["cluster"], long["timeout"], long["idle_timeout"]) == ("edgetest", "3720.000s", "3720.000s")
    assert paths.index(f"/{LONG_CALL}") < paths.index(f"/{SERVICE}/")
    assert routes[paths.index(f"/{SERVICE}/")]["route"]["timeout"] == "120.000s"


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        pytest.param({"long_calls": (f"{SERVICE}/NoSuchMethod",)}, "not among", id="unknown-method"),
        pytest.param({"long_calls": ("grpc.health.v1.Health/Check",)}, "not among", id="another-services-method"),
        pytest.param({"health_detail": f"{SERVICE}/Nope"}, "not among", id="unknown-health-detail"),
        pytest.param({"long_calls": (LONG_CALL,), "long_call_seconds": 0.0}, "positive", id="no-seconds"),
    ],
)
def test_a_long_call_or_health_detail_that_is_not_its_upstreams_method_is_refused(fields: dict, message: str) -> None:
    upstream = Upstream(
        cluster="edgetest", services=(SERVICE,), host="127.0.0.1", port=1, health_service=SERVICE, **fields
    )
    with pytest.raises(ValueError, match=message):
        build_envoy_config(_spec(upstream))


def test_the_transcoders_body_limits_rise_to_the_largest_upstream_message_limit() -> None:
    """A service taking 33 MiB messages (the pool's 32 MiB payloads) gets them through REST: the edge never cuts
    a body the service would take, or would refuse with its own 413 naming its limit."""
    big = Upstream(
        cluster="edgetest",
        services=(SERVICE,),
        host="127.0.0.1",
        port=1,
        health_service=SERVICE,
        max_message_bytes=33 * 1024 * 1024,
    )
    config = build_envoy_config(_spec(big, max_body_bytes=BODY_LIMIT))
    routes = _hcm(config)["route_config"]["virtual_hosts"][0]["routes"]
    transcoders = [f["typed_config"] for f in _hcm(config)["http_filters"] if f["name"].endswith("json_transcoder")]
    transcoders += [
        r["typed_per_filter_config"]["envoy.filters.http.grpc_json_transcoder"]
        for r in routes
        if "envoy.filters.http.grpc_json_transcoder" in r.get("typed_per_filter_config", {})
        and "services" in r["typed_per_filter_config"]["envoy.filters.http.grpc_json_transcoder"]
    ]
    assert len(transcoders) == 3
    for transcoder in transcoders:
        assert transcoder["max_request_body_size"] == transcoder["max_response_body_size"] == 33 * 1024 * 1024
    plain = build_envoy_config(_spec(_upstream("edgetest", 1, SERVICE), max_body_bytes=BODY_LIMIT))
    (transcoder,) = [f["typed_config"] for f in _hcm(plain)["http_filters"] if f["name"].endswith("json_transcoder")]
    assert transcoder["max_request_body_size"] == BODY_LIMIT


def test_a_cluster_or_service_name_that_is_not_plain_is_refused() -> None:
    with pytest.raises(ValueError, match="must be plain"):
        build_envoy_config(_spec(_upstream('po"ds', 1, "a.v1.Pods")))


def test_config_prints_proto_names_only_on_the_v1_family() -> None:
    """/api/ routes print lowerCamelCase and /v1/ routes snake_case, both printing zero values."""
    config = build_envoy_config(_spec(_upstream("pods", 1, "a.v1.Pods")))
    routes = _hcm(config)["route_config"]["virtual_hosts"][0]["routes"]
    options = {
        r["match"]["prefix"]: r["typed_per_filter_config"]["envoy.filters.http.grpc_json_transcoder"]["print_options"]
        for r in routes
        if "envoy.filters.http.grpc_json_transcoder" in r.get("typed_per_filter_config", {})
    }
    assert options == {
        "/api/": {"preserve_proto_field_names": False, "always_print_primitive_fields": True},
        "/v1/": {"preserve_proto_field_names": True, "always_print_primitive_fields": True},
    }


@pytest.mark.parametrize(
    ("host", "discovery"),
    [
        pytest.param("127.0.0.1", "STATIC", id="ipv4"),
        pytest.param("::1", "STATIC", id="ipv6"),
        pytest.param("pool.thermostat.svc.cluster.local", "STRICT_DNS", id="dns-name"),
    ],
)
def test_upstream_named_by_dns_is_resolved_by_envoy(host: str, discovery: str) -> None:
    """An IP upstream is a static endpoint; a DNS name (a Kubernetes service) is resolved by Envoy."""
    upstream = Upstream(cluster="pool", services=("b.v1.Pool",), host=host, port=50051, health_service="")
    (cluster,) = build_envoy_config(_spec(upstream))["static_resources"]["clusters"]
    assert cluster["type"] == discovery


def test_relative_descriptor_path_is_refused() -> None:
    """Envoy resolves a relative descriptor path against its own cwd, so the builder refuses one."""
    with pytest.raises(ValueError, match="absolute"):
        build_envoy_config(
            EdgeSpec(upstreams=(_upstream("pods", 1, "a.v1.Pods"),), descriptor_set=Path("build/edgetest.pb"))
        )


@pytest.mark.parametrize(
    ("environ", "port"),
    [
        pytest.param({}, DEFAULT_LISTEN_PORT, id="unset-is-8080"),
        pytest.param({"EDGE_PORT": ""}, DEFAULT_LISTEN_PORT, id="blank-is-8080"),
        pytest.param({"EDGE_PORT": "18181"}, 18181, id="set-overrides"),
    ],
)
def test_edge_port_env_overrides_the_listener_port(environ: dict[str, str], port: int) -> None:
    """EDGE_PORT, when set, is the listener's port in the written config."""
    config = build_envoy_config(_spec(_upstream("pods", 1, "a.v1.Pods"), listen_port=listen_port_from_env(environ)))
    assert config["static_resources"]["listeners"][0]["address"]["socket_address"]["port_value"] == port


@pytest.mark.parametrize("raw", [pytest.param("http", id="not-a-number"), pytest.param("70000", id="too-big")])
def test_edge_port_env_that_is_not_a_port_is_refused(raw: str) -> None:
    """A malformed EDGE_PORT stops the edge instead of binding somewhere unexpected."""
    with pytest.raises(ValueError, match="EDGE_PORT"):
        listen_port_from_env({"EDGE_PORT": raw})


def test_written_config_is_accepted_by_envoy_validate(tmp_path: Path) -> None:
    """`envoy --mode validate` accepts the generated config, transcoder descriptors included."""
    path = write_envoy_config(
        _spec(_upstream("edgetest", 50051, SERVICE), reflection_cluster="edgetest"), tmp_path / "envoy.yaml"
    )
    json.loads(path.read_text())  # JSON is the YAML subset Envoy reads
    validate_config(path)


def test_config_naming_a_service_missing_from_the_descriptors_is_rejected(tmp_path: Path) -> None:
    """Envoy refuses a transcoder service the descriptor set does not define."""
    path = write_envoy_config(_spec(_upstream("x", 50051, "thermostat.nothing.v1.Missing")), tmp_path / "envoy.yaml")
    with pytest.raises(EnvoyError, match=re.escape("thermostat.nothing.v1.Missing")):
        validate_config(path)


# --- the real edge -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
async def upstream() -> AsyncIterator[RunningServer]:
    server = await start_edge_test_server()
    yield server
    await server.stop()


@pytest.fixture(scope="module")
async def edge(upstream: RunningServer, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[EnvoyProcess]:
    spec = _spec(
        _upstream("edgetest", upstream.port, SERVICE),
        reflection_cluster="edgetest",
        listen_port=0,
        admin_port=0,
        health=FAST_CHECKS,
        max_body_bytes=BODY_LIMIT,
    )
    path = write_envoy_config(spec, tmp_path_factory.mktemp("edge") / "envoy.yaml")
    envoy = await start_envoy(path, concurrency=1)
    yield envoy
    assert await envoy.stop() == 0


@pytest.fixture(scope="module")
async def http(edge: EnvoyProcess) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{edge.listeners['edge']}", timeout=5.0) as client:
        yield client


@pytest.fixture(scope="module")
async def stub(edge: EnvoyProcess) -> AsyncIterator[edgetest_pb2_grpc.EdgeTestServiceStub]:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{edge.listeners['edge']}") as channel:
        yield edgetest_pb2_grpc.EdgeTestServiceStub(channel)


async def _health_becomes(http: httpx.AsyncClient, status: int, within_s: float = 5.0) -> int:
    deadline = time.monotonic() + within_s
    while True:
        code = (await http.get("/health")).status_code
        if code == status or time.monotonic() > deadline:
            return code
        await asyncio.sleep(0.05)


def _no_grpc_plumbing(response: httpx.Response) -> list[str]:
    return [
        name
        for name in response.headers
        if name.startswith("grpc-") or name.startswith("x-http-code") or name == "x-problem-title"
    ]


@pytest.mark.e2e
async def test_health_follows_the_upstream_grpc_health_status(http: httpx.AsyncClient, upstream: RunningServer) -> None:
    """/health is 200 while the upstream is SERVING, 503 naming it once it is NOT_SERVING, 200 again after."""
    assert await _health_becomes(http, 200) == 200
    try:
        await upstream.set_serving(False)
        down = await http.get("/health")
        assert down.status_code == 503
        assert down.headers["content-type"] == "application/json"
        assert down.json() == {
            "status": "unavailable",
            "serving": "NOT_SERVING",
            "upstreams": [{"name": "edgetest", "services": [SERVICE], "serving": False, "status": "NOT_SERVING"}],
        }
    finally:
        await upstream.set_serving(True)
    up = await http.get("/health")
    assert up.status_code == 200
    assert up.json() == {
        "status": "ok",
        "serving": "SERVING",
        "upstreams": [{"name": "edgetest", "services": [SERVICE], "serving": True, "status": "SERVING"}],
    }


async def _grpc_health(channel: grpc.aio.Channel, service: str) -> int:
    reply = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
    return int(reply.status)


@pytest.mark.e2e
async def test_grpc_health_at_the_edge_answers_for_the_stack_and_for_each_service(
    edge: EnvoyProcess, http: httpx.AsyncClient, upstream: RunningServer
) -> None:
    """grpc.health.v1.Health/Check at the edge: the empty name says what GET /health says, the service's full name
    is that service's own status; a name the edge serves not is NOT_FOUND naming the ones it does."""
    serving, not_serving = health_pb2.HealthCheckResponse.SERVING, health_pb2.HealthCheckResponse.NOT_SERVING
    assert await _health_becomes(http, 200) == 200
    async with grpc.aio.insecure_channel(f"127.0.0.1:{edge.listeners['edge']}") as channel:
        assert (await _grpc_health(channel, ""), await _grpc_health(channel, SERVICE)) == (serving, serving)
        try:
            await upstream.set_serving(False)
            assert (await _grpc_health(channel, ""), await _grpc_health(channel, SERVICE)) == (not_serving, not_serving)
        finally:
            await upstream.set_serving(True)
        assert await _grpc_health(channel, "") == serving
        with pytest.raises(grpc.aio.AioRpcError) as unknown:
            await _grpc_health(channel, "thermostat.pods.v1.PodControllerInternal")
    assert unknown.value.code() == grpc.StatusCode.NOT_FOUND
    assert unknown.value.details() == (
        "the edge serves no thermostat.pods.v1.PodControllerInternal: ask for the empty name (the whole stack)"
        f" or one of {SERVICE}"
    )


@pytest.mark.e2e
async def test_grpc_health_at_the_edge_is_unavailable_when_no_upstream_answers(tmp_path: Path) -> None:
    """Nothing listens behind the edge: the stack's Check fails UNAVAILABLE naming each upstream's state."""
    spec = _spec(_upstream("edgetest", free_port(), SERVICE), listen_port=0, admin_port=0, health=FAST_CHECKS)
    envoy = await start_envoy(write_envoy_config(spec, tmp_path / "envoy.yaml"), concurrency=1)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{envoy.listeners['edge']}") as channel:
            with pytest.raises(grpc.aio.AioRpcError) as failure:
                await _grpc_health(channel, "")
    finally:
        assert await envoy.stop() == 0
    assert failure.value.code() == grpc.StatusCode.UNAVAILABLE
    assert failure.value.details().startswith("no service behind the edge answers its health check: edgetest")


@pytest.mark.e2e
async def test_grpc_health_watch_at_the_edge_follows_a_named_service(edge: EnvoyProcess) -> None:
    """Watch of a service's full name streams that service's status; the whole stack answers Check only."""
    async with grpc.aio.insecure_channel(f"127.0.0.1:{edge.listeners['edge']}") as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        watch = stub.Watch(health_pb2.HealthCheckRequest(service=SERVICE), timeout=5)
        first = await watch.read()
        watch.cancel()
        assert first.status == health_pb2.HealthCheckResponse.SERVING
        whole = stub.Watch(health_pb2.HealthCheckRequest(service=""), timeout=5)
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await whole.read()
    assert refused.value.code() == grpc.StatusCode.UNIMPLEMENTED
    assert "the whole stack (the empty name) answers Check" in (refused.value.details() or "")


@pytest.mark.e2e
async def test_health_with_one_upstream_down_is_503_naming_which_one(upstream: RunningServer, tmp_path: Path) -> None:
    """Two upstreams, nothing listening behind the second: 503, the first serving, the second not."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        dead_port = probe.getsockname()[1]
    # the dead upstream owns no route (a service the descriptor set lacks would fail the transcoder's config)
    dead = Upstream(cluster="pool", services=(), host="127.0.0.1", port=dead_port, health_service="b.v1.Pool")
    spec = _spec(_upstream("edgetest", upstream.port, SERVICE), dead, listen_port=0, admin_port=0, health=FAST_CHECKS)
    envoy = await start_envoy(write_envoy_config(spec, tmp_path / "envoy.yaml"), concurrency=1)
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{envoy.listeners['edge']}", timeout=5.0) as http:
            response = await http.get("/health")
    finally:
        assert await envoy.stop() == 0
    assert response.status_code == 503
    body = response.json()
    assert (body["status"], body["serving"]) == ("unavailable", "NOT_SERVING")
    assert [(u["name"], u["services"], u["serving"]) for u in body["upstreams"]] == [
        ("edgetest", [SERVICE], True),
        ("pool", [], False),
    ]
    assert body["upstreams"][1]["status"].startswith("unreachable")


@pytest.mark.e2e
async def test_a_health_detail_that_fails_shows_null_and_leaves_the_status_to_the_health_service(
    upstream: RunningServer, tmp_path: Path
) -> None:
    """The detail call (GetJobResult for no job: NOT_FOUND) does not answer a JSON body: "detail" is null, and the
    upstream still counts as serving (the pool's own detail is shown in test_pool_through_edge)."""
    detailed = Upstream(
        cluster="edgetest",
        services=(SERVICE,),
        host="127.0.0.1",
        port=upstream.port,
        health_service=SERVICE,
        health_detail=f"{SERVICE}/GetJobResult",
    )
    spec = _spec(detailed, listen_port=0, admin_port=0, health=FAST_CHECKS)
    envoy = await start_envoy(write_envoy_config(spec, tmp_path / "envoy.yaml"), concurrency=1)
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{envoy.listeners['edge']}", timeout=5.0) as http:
            response = await http.get("/health")
    finally:
        assert await envoy.stop() == 0
    assert response.status_code == 200, response.text
    assert response.json()["upstreams"] == [
        {"name": "edgetest", "services": [SERVICE], "serving": True, "status": "SERVING", "detail": None}
    ]


@pytest.mark.e2e
async def test_a_top_level_detail_that_fails_prints_its_fallback_members_at_the_top(
    upstream: RunningServer, tmp_path: Path
) -> None:
    """An upstream whose detail belongs at /health's top level (the pool's: the original strata-pool shape) and
    does not answer: the fallback's members stand in, so a client reading `workers` still finds the key."""
    detailed = Upstream(
        cluster="edgetest",
        services=(SERVICE,),
        host="127.0.0.1",
        port=upstream.port,
        health_service=SERVICE,
        health_detail=f"{SERVICE}/GetJobResult",
        health_top_fallback='{"workers": {}, "machine_types": []}',
    )
    spec = _spec(detailed, listen_port=0, admin_port=0, health=FAST_CHECKS)
    envoy = await start_envoy(write_envoy_config(spec, tmp_path / "envoy.yaml"), concurrency=1)
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{envoy.listeners['edge']}", timeout=5.0) as http:
            response = await http.get("/health")
    finally:
        assert await envoy.stop() == 0
    assert response.status_code == 200, response.text
    assert response.json() == {
        "status": "ok",
        "serving": "SERVING",
        "workers": {},
        "machine_types": [],
        "upstreams": [
            {"name": "edgetest", "services": [SERVICE], "serving": True, "status": "SERVING", "detail": None}
        ],
    }


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("method", "path", "status", "title", "detail"),
    [
        pytest.param("POST", "/api/pods/other/start", 404, "Not Found", "pod 'other' is not known", id="not-found"),
        pytest.param(
            "POST",
            "/api/pods/failed/start",
            409,
            "Wake failed",
            'no GPU under 2.00 USD/h: A100 "80GB" 2.49',
            id="409-with-title",
        ),
        pytest.param(
            "GET", "/v1/jobs/crashed/result", 502, "Bad Gateway", "worker exited with status 1", id="502-worker-failed"
        ),
    ],
)
async def test_grpc_error_becomes_problem_json_with_the_service_status(
    http: httpx.AsyncClient, method: str, path: str, status: int, title: str, detail: str
) -> None:
    """A failed RPC answers application/problem+json with the status, the title and the gRPC message."""
    response = await http.request(method, path)
    assert response.status_code == status
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json() == {"type": "about:blank", "status": status, "title": title, "detail": detail}
    assert _no_grpc_plumbing(response) == []


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("method", "path", "body", "status", "detail"),
    [
        pytest.param(
            "GET", "/nowhere", None, 404, "/nowhere: no route takes this method on this path", id="unknown-route"
        ),
        pytest.param(
            "GET",
            "/api/pods",
            None,
            404,
            "/api/pods: no route takes this method on this path",
            id="unknown-route-in-a-family",
        ),
        pytest.param(
            "GET",
            "/api/pods/qwen?colour=red",
            None,
            400,
            "colour: no such query parameter on this route",
            id="unknown-query-parameter",
        ),
        pytest.param(
            "POST",
            "/api/pods/qwen/start",
            {"name": "other"},
            400,
            'body.name: conflicts with the path\'s name "qwen"; leave it out of the body',
            id="body-path-collision",
        ),
        pytest.param("PUT", "/v1/machine-types", [{"name": "cpu", "max_workers": "many"}], 400, None, id="bad-value"),
    ],
)
async def test_envoy_own_rejections_are_problem_json(
    http: httpx.AsyncClient, method: str, path: str, body: object, status: int, detail: str | None
) -> None:
    """Envoy's local replies (no such route, unknown parameter, collision, bad value) are problem+json too."""
    response = await http.request(method, path, json=body)
    assert response.status_code == status
    assert response.headers["content-type"] == "application/problem+json"
    problem = response.json()
    assert (problem["status"], problem["title"]) == (status, "Not Found" if status == 404 else "Bad Request")
    if detail is None:
        assert "max_workers" in problem["detail"]
    else:
        assert problem["detail"] == detail


@pytest.mark.e2e
async def test_a_transcoded_body_that_is_not_utf8_is_a_400_problem_that_is_still_json(http: httpx.AsyncClient) -> None:
    """Found by the chaos fuzzing: the transcoder quotes the body's bytes in its error, and the problem it became
    was not UTF-8 (a client could not decode it). Bytes that are not UTF-8 are replaced by U+FFFD."""
    for body in (b"\x80", b'{"name": "\xff\xfe"}', b"\xed\xa0\x80"):
        answer = await http.post("/api/pods/qwen/start", content=body)
        assert answer.status_code == 400
        assert answer.headers["content-type"] == "application/problem+json"
        problem = answer.content.decode("utf-8")  # strict: raises on a byte that is not UTF-8
        assert "\ufffd" in answer.json()["detail"], problem


@pytest.mark.e2e
async def test_a_transcoded_body_that_is_not_a_json_object_is_a_400_naming_the_body(http: httpx.AsyncClient) -> None:
    """Found by the chaos fuzzing: the transcoder's error at the body's root has an empty field path (": Root
    element must be a message."); the edge names the body as the field at fault."""
    for body in (b"[1, 2]", b'"five"', b"7"):
        answer = await http.post("/api/pods/qwen/start", content=body)
        assert answer.status_code == 400, answer.text
        detail = answer.json()["detail"]
        assert detail.startswith("body: "), detail


@pytest.mark.e2e
async def test_x_http_code_sets_the_rest_status_and_leaves_native_grpc_alone(
    http: httpx.AsyncClient, stub: edgetest_pb2_grpc.EdgeTestServiceStub
) -> None:
    """x-http-code 202 makes the REST answer 202, while a gRPC client on the same port gets a plain OK."""
    response = await http.post("/api/pods/waiting/start", json={})
    assert (response.status_code, response.json()) == (202, {"name": "waiting", "outcome": "Waiting"})
    assert _no_grpc_plumbing(response) == []

    call = stub.StartPod(edgetest_pb2.StartPodRequest(name="waiting"))
    assert (await call).outcome == "Waiting"
    assert await call.code() == grpc.StatusCode.OK
    assert ("x-http-code", "202") in tuple(await call.initial_metadata())


@pytest.mark.e2e
async def test_native_grpc_error_through_the_edge_keeps_its_grpc_status(
    stub: edgetest_pb2_grpc.EdgeTestServiceStub,
) -> None:
    """A gRPC client through the edge sees FAILED_PRECONDITION and the message, not a 409 or problem+json."""
    with pytest.raises(grpc.aio.AioRpcError) as failure:
        await stub.StartPod(edgetest_pb2.StartPodRequest(name="failed"))
    assert failure.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert failure.value.details() == 'no GPU under 2.00 USD/h: A100 "80GB" 2.49'


@pytest.mark.e2e
async def test_server_reflection_is_reachable_through_the_edge(edge: EnvoyProcess) -> None:
    """grpc.reflection.v1alpha through the edge lists the upstream's services."""

    # The reflection descriptor database is synchronous; run it on a worker thread.
    def services() -> list[str]:
        with grpc.insecure_channel(f"127.0.0.1:{edge.listeners['edge']}") as sync_channel:
            database = ProtoReflectionDescriptorDatabase(sync_channel)
            names = list(database.get_services())
            descriptor_pool.DescriptorPool(database).FindServiceByName(SERVICE)
            return names

    assert SERVICE in await asyncio.to_thread(services)


@pytest.mark.e2e
async def test_http_body_passes_byte_for_byte_both_ways(http: httpx.AsyncClient, upstream: RunningServer) -> None:
    """A raw request body reaches the service verbatim with its content type, and comes back verbatim."""
    payload = bytes(range(256)) + b"\x00\xff{not json"
    response = await http.post(
        "/v1/jobs",
        params={"machine_type": "gpu"},
        content=payload,
        headers={"content-type": "application/x-thermostat-test"},
    )
    assert response.status_code == 202
    job = response.json()
    assert job == {
        "job_id": job["job_id"],
        "payload_size": len(payload),
        "payload_content_type": "application/x-thermostat-test",
        "machine_type": "gpu",
    }
    assert upstream.received.payloads[job["job_id"]].data == payload

    result = await http.get(f"/v1/jobs/{job['job_id']}/result")
    assert result.status_code == 200
    assert result.headers["content-type"] == "application/x-thermostat-test"
    assert result.content == payload
    assert _no_grpc_plumbing(result) == []


@pytest.mark.e2e
async def test_bodies_beyond_envoys_1_mib_buffer_pass_up_to_the_configured_limit(http: httpx.AsyncClient) -> None:
    """A 1.5 MiB payload and result pass (the transcoder's default limit is 1 MiB); past the limit is 413."""
    payload = b"\xff" * (3 * BODY_LIMIT // 4)
    job = (await http.post("/v1/jobs", content=payload, headers={"content-type": "application/octet-stream"})).json()
    assert (await http.get(f"/v1/jobs/{job['job_id']}/result")).content == payload

    response = await http.post("/v1/jobs", content=b"\x00" * (BODY_LIMIT + 1))
    assert response.status_code == 413
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["title"] == "Content Too Large"


@pytest.mark.e2e
async def test_api_family_prints_camel_case_and_false_and_zero(http: httpx.AsyncClient) -> None:
    """/api/ answers lowerCamelCase, prints false and 0, and leaves an unset optional field out."""
    response = await http.get("/api/pods/qwen")
    assert response.json() == {
        "name": "qwen",
        "podId": "pod-123",
        "configured": False,
        "gpuCount": 0,
        "readySince": READY_SINCE_JSON,
        "pricePerHour": 0,
    }


@pytest.mark.e2e
async def test_fields_a_service_names_in_x_json_nulls_print_null_whether_printed_empty_or_absent(
    http: httpx.AsyncClient,
) -> None:
    """An empty plain string ("" from the printer) and unset message/optional fields each become null, once."""
    response = await http.get("/api/pods/podless")
    assert response.status_code == 200
    assert "x-json-nulls" not in response.headers
    assert response.text.count('"podId"') == 1
    assert response.json() == {
        "name": "podless",
        "podId": None,
        "configured": False,
        "gpuCount": 0,
        "readySince": None,
        "gpuId": None,
        "pricePerHour": 0,
    }
    assert int(response.headers["content-length"]) == len(response.content)


@pytest.mark.e2e
async def test_v1_family_prints_snake_case_and_false_and_zero(http: httpx.AsyncClient) -> None:
    """/v1/ answers the proto field names and prints false and 0."""
    response = await http.get("/v1/jobs/j-1")
    assert response.json() == {"job_id": "j-1", "machine_type": "cpu", "has_result": False, "attempt_count": 0}


@pytest.mark.e2e
async def test_top_level_json_array_maps_to_a_repeated_field_both_ways(http: httpx.AsyncClient) -> None:
    """A JSON array request body fills `items`; the HttpBody response_body answers an array again."""
    catalogue = [{"name": "cpu", "max_workers": 3, "gpu": False}, {"name": "a100", "max_workers": 0, "gpu": True}]
    response = await http.put("/v1/machine-types", json=catalogue)
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert response.json() == catalogue


@pytest.mark.e2e
async def test_the_edge_s_prometheus_stats_answer_on_their_own_listener_and_never_on_the_public_one(
    upstream: RunningServer, tmp_path: Path
) -> None:
    """The stats listener proxies the admin's /stats/prometheus (and /metrics) and nothing else of the admin; the
    public listener routes none of it."""
    admin_port = free_port()
    spec = _spec(
        _upstream("edgetest", upstream.port, SERVICE),
        listen_port=0,
        admin_port=admin_port,
        stats_port=0,
        health=FAST_CHECKS,
    )
    envoy = await start_envoy(write_envoy_config(spec, tmp_path / "envoy.yaml"), concurrency=1)
    try:
        async with httpx.AsyncClient(timeout=5.0) as http:
            stats = f"http://127.0.0.1:{envoy.listeners['stats']}"
            public = f"http://127.0.0.1:{envoy.listeners['edge']}"
            await http.get(f"{public}/health")  # some traffic for the counters
            prometheus = await http.get(f"{stats}/stats/prometheus")
            default_path = await http.get(f"{stats}/metrics")
            other_admin = await http.get(f"{stats}/config_dump")
            quit_ = await http.post(f"{stats}/quitquitquit")
            on_public = await http.get(f"{public}/stats/prometheus")
    finally:
        assert await envoy.stop() == 0, "nothing through the stats listener stopped Envoy"
    assert prometheus.status_code == 200
    assert "# TYPE envoy_cluster_upstream_cx_total counter" in prometheus.text
    assert 'envoy_cluster_name="edgetest"' in prometheus.text
    assert default_path.status_code == 200 and "envoy_server_live" in default_path.text
    assert other_admin.status_code == 404 and "configs" not in other_admin.text
    assert quit_.status_code == 404
    assert on_public.status_code == 404 and "envoy_" not in on_public.text


def test_a_stats_listener_needs_a_known_admin_port() -> None:
    with pytest.raises(ValueError, match="fixed admin port"):
        build_envoy_config(_spec(_upstream("edgetest", 1, SERVICE), admin_port=0, stats_port=9902))
