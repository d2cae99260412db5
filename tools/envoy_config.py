"""The Envoy edge's configuration, built from the upstream services and the descriptor set.

One listener serves native gRPC (passed through to the service that owns the path) and REST (JSON
transcoding from the same descriptor set). `build_envoy_config` is pure: same arguments, same dict.
`upstreams` reads the clusters, the gRPC services each owns and their health services from the service
registry (thermostat.chassis.registry). The config is written as JSON, which is valid YAML, so no YAML
library is needed.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Final

from google.protobuf import descriptor_pb2

from thermostat.chassis.ports import port_from_env
from thermostat.chassis.registry import SERVICES, ServiceDef, reflecting
from tools.edge_grpc import (
    GRPC_HEALTH_LUA,
    grpc_edge_filter,
    grpc_health_routes,
    reflection_routes,
    unrouted_mapper,
    unrouted_route,
)
from tools.path_bindings import PathBinding, path_bindings

DEFAULT_LISTEN_ADDRESS: Final = "127.0.0.1"
DEFAULT_LISTEN_PORT: Final = 8080
DEFAULT_ADMIN_PORT: Final = 9901
DEFAULT_STATS_PORT: Final = 9902
STATS_PATH: Final = "/stats/prometheus"
ADMIN_CLUSTER: Final = "envoy-admin"
_GET_ONLY: Final = [{"name": ":method", "string_match": {"exact": "GET"}}]
DEFAULT_CONFIG_PATH: Final = Path(__file__).resolve().parents[1] / "deploy" / "envoy" / "envoy.yaml"
REFLECTION_SERVICES: Final = ("grpc.reflection.v1alpha.ServerReflection", "grpc.reflection.v1.ServerReflection")

MAX_REGEX_PROGRAM_SIZE: Final = 4096
MIB: Final = 1024 * 1024
HCM: Final = "envoy.filters.network.http_connection_manager"
TRANSCODER: Final = "envoy.filters.http.grpc_json_transcoder"
_TYPES: Final = "type.googleapis.com/envoy.extensions"
_MATCHER_TYPES: Final = "type.googleapis.com/envoy.type.matcher.v3"
_LUA_SOURCE: Final = resources.files(__package__).joinpath("rest_responses.lua").read_text(encoding="utf-8")
_HEALTH_LUA: Final = resources.files(__package__).joinpath("health.lua").read_text(encoding="utf-8")
_HEALTH_CHECKS: Final = resources.files(__package__).joinpath("health_checks.lua").read_text(encoding="utf-8")
HEALTH_FILTER: Final = "thermostat.health"
REST_FILTER: Final = "envoy.filters.http.lua"
# Cluster and service names are written into the /health script and its JSON body as they are.
_PLAIN_NAME: Final = re.compile(r"[A-Za-z0-9_.-]{1,127}")


@dataclass(frozen=True, slots=True, kw_only=True)
class Upstream:
    """A gRPC server behind the edge: the services it owns and the health service Envoy checks."""

    cluster: str
    services: tuple[str, ...]
    host: str
    port: int
    health_service: str
    max_message_bytes: int | None = None  # its gRPC message limit: the REST body limit rises to cover it
    long_calls: tuple[str, ...] = ()  # "pkg.Service/Method": routed with long_call_seconds, not the default
    long_call_seconds: float = 0.0
    health_detail: str | None = None  # "pkg.Service/Method" answering HttpBody JSON, shown by GET /health
    # set: the detail's members also at /health's top level, this JSON object's members when it does not answer
    health_top_fallback: str | None = None
    # an HTTP API of its own (the gateway's OpenAI API): these path prefixes go to `http_port`, passed through as
    # they are (no transcoding, no REST rewriting) and streamed both ways
    http_prefixes: tuple[str, ...] = ()
    http_port: int = 0

    @property
    def http_cluster(self) -> str:
        return f"{self.cluster}-http"


@dataclass(frozen=True, slots=True, kw_only=True)
class JsonFamily:
    """REST routes under `prefix` print JSON one way: proto field names (snake_case) or lowerCamelCase."""

    prefix: str
    proto_field_names: bool


# The pod-control seed speaks lowerCamelCase (`podId`, `readySince`); the worker-pool seed speaks
# snake_case (`machine_type`, `has_result`). Both clients read false/zero fields, so those are printed.
SEED_FAMILIES: Final = (
    JsonFamily(prefix="/api/", proto_field_names=False),
    JsonFamily(prefix="/v1/", proto_field_names=True),
)


@dataclass(frozen=True, slots=True, kw_only=True)
class HealthCheckTiming:
    """Active gRPC health checking of every upstream (what routing trusts); `timeout_s` also bounds each
    upstream's check when GET /health asks them."""

    interval_s: float = 1.0
    timeout_s: float = 1.0
    # Envoy checks a cluster that carries no traffic every no_traffic_interval, 60 s by default: a cluster
    # gone NOT_SERVING kept receiving requests for >8 s (spike).
    no_traffic_interval_s: float = 1.0
    unhealthy_threshold: int = 1
    healthy_threshold: int = 1


@dataclass(frozen=True, slots=True, kw_only=True)
class EdgeTracing:
    """Envoy's own span per request (OpenTelemetry tracer), sent over OTLP/gRPC to a collector at host:port.

    Off unless asked for (EDGE_OTLP_ENDPOINT): without it the edge still passes the caller's traceparent through
    to the services untouched, on native gRPC and REST alike. With it, the services' spans sit under the edge's.
    """

    collector_host: str
    collector_port: int
    service_name: str = "thermostat-edge"
    flush_interval_ms: int = 5000  # Envoy's default; a test shortens it


COLLECTOR_CLUSTER: Final = "opentelemetry_collector"


def edge_tracing_from_env(environ: Mapping[str, str]) -> EdgeTracing | None:
    """EDGE_OTLP_ENDPOINT (`host:port` of an OTLP/gRPC collector, e.g. `otel-collector:4317`), or None: off."""
    value = environ.get("EDGE_OTLP_ENDPOINT", "").strip()
    if not value:
        return None
    host, _, port = value.removeprefix("http://").rpartition(":")
    if not host or not _digits(port, 5) or not 0 < int(port) < 65536:
        raise ValueError(f"EDGE_OTLP_ENDPOINT must be host:port of an OTLP/gRPC collector, got {value!r}")
    return EdgeTracing(collector_host=host.strip("[]"), collector_port=int(port))


@dataclass(frozen=True, slots=True, kw_only=True)
class EdgeSpec:
    """Everything the edge's config depends on."""

    upstreams: tuple[Upstream, ...]
    descriptor_set: Path  # read here, to find the routes' path bindings and check the long calls
    # where Envoy reads the descriptor set, when not at `descriptor_set` (a container's mount); None: the same path
    envoy_descriptor_path: Path | None = None
    reflection_cluster: str | None = None
    listen_address: str = DEFAULT_LISTEN_ADDRESS
    listen_port: int = DEFAULT_LISTEN_PORT
    admin_address: str = "127.0.0.1"
    admin_port: int = DEFAULT_ADMIN_PORT
    # A listener of its own answering only Envoy's Prometheus stats (GET /stats/prometheus, and /metrics for
    # Prometheus's default path) from the admin interface, which stays on loopback: the admin also answers
    # /quitquitquit and /config_dump, so it is never exposed, and the public listener never routes to it. None:
    # no stats listener (the admin's own /stats/prometheus still answers on the admin address).
    stats_address: str = "127.0.0.1"
    stats_port: int | None = None
    families: tuple[JsonFamily, ...] = SEED_FAMILIES
    health: HealthCheckTiming = field(default_factory=HealthCheckTiming)
    health_path: str = "/health"
    # Cloudflare Access closes an origin connection at 100 s (pod-control seed: 524); the edge waits a little longer
    # so the service, not Envoy, decides what a slow request answers.
    route_timeout_s: float = 120.0
    # The transcoder buffers a whole REST body. Unset, its limit is the 1 MiB stream buffer (a 2 MB job
    # payload was a 413); 4 MiB matches a gRPC server's default max receive message size.
    max_body_bytes: int = 4 * 1024 * 1024
    tracing: EdgeTracing | None = None


def listen_port_from_env(environ: Mapping[str, str], default: int = DEFAULT_LISTEN_PORT) -> int:
    """The edge's port: EDGE_PORT when set, else `default`."""
    return port_from_env(environ, "EDGE_PORT", default)


def upstreams(
    services: Sequence[ServiceDef] = SERVICES, *, ports: Mapping[str, int] | None = None, host: str | None = None
) -> tuple[Upstream, ...]:
    """One upstream per registered service, owning its public gRPC services (internal ones are never routed).

    `host` None: each service's own name, as its Kubernetes Service is named; `ports` default to the registry's.
    """
    ports = ports or {}
    return tuple(
        Upstream(
            cluster=s.name,
            services=s.public_services,
            host=s.name if host is None else host,
            port=ports.get(s.name, s.default_port),
            health_service=s.health_service,
            max_message_bytes=s.max_message_bytes,
            long_calls=s.long_calls,
            long_call_seconds=s.long_call_seconds,
            health_detail=s.health_detail,
            health_top_fallback=s.health_top_fallback,
            http_prefixes=s.http_prefixes,
            http_port=ports.get(f"{s.name}-http", s.default_http_port),
        )
        for s in services
    )


def deployment_spec(descriptor_set: Path, *, envoy_descriptor_path: Path) -> EdgeSpec:
    """The edge of a deployment (Kubernetes, compose): every registered service reached by its name on its
    registry port, the listener on every interface; the config `make k8s` ships (tools/k8s_manifests.py)."""
    reflection = reflecting()
    return EdgeSpec(
        upstreams=upstreams(),
        descriptor_set=descriptor_set,
        envoy_descriptor_path=envoy_descriptor_path,
        reflection_cluster=reflection.name if reflection else None,
        listen_address="0.0.0.0",
        # Prometheus scrapes the edge from another pod: the stats listener (only /stats/prometheus and /metrics)
        # on every interface; the admin interface stays on loopback
        stats_address="0.0.0.0",
        stats_port=DEFAULT_STATS_PORT,
    )


def body_limit(spec: EdgeSpec) -> int:
    """The transcoder's request and response body limit: the spec's, raised to every upstream's gRPC message
    limit, so a body the service would take (or refuse with its own 413 and detail) is never cut by the edge."""
    return max([spec.max_body_bytes, *(u.max_message_bytes or 0 for u in spec.upstreams)])


def _duration(seconds: float) -> str:
    return f"{seconds:.3f}s"


def _address(host: str, port: int) -> dict[str, Any]:
    return {"socket_address": {"address": host, "port_value": port}}


def _transcoder(spec: EdgeSpec, services: list[str], *, proto_field_names: bool) -> dict[str, Any]:
    return {
        "@type": f"{_TYPES}.filters.http.grpc_json_transcoder.v3.GrpcJsonTranscoder",
        "proto_descriptor": str(spec.envoy_descriptor_path or spec.descriptor_set),
        "services": services,
        "print_options": {
            "preserve_proto_field_names": proto_field_names,
            "always_print_primitive_fields": True,
        },
        # Without this a gRPC error reaches the client as an empty body with grpc-* headers only.
        "convert_grpc_status": True,
        "max_request_body_size": body_limit(spec),
        "max_response_body_size": body_limit(spec),
        # Each default is a silent pass-through of the raw REST request to a gRPC server, which resets
        # the stream: the client sees 503 "upstream connect error" instead of 404/400 (toolchain spike).
        "request_validation_options": {
            "reject_unknown_method": True,
            "reject_unknown_query_parameters": True,
            "reject_binding_body_field_collisions": True,
        },
    }


def _health_route(spec: EdgeSpec) -> dict[str, Any]:
    """GET /health, answered by the health script (the direct response is only its backstop)."""
    return {
        "match": {"path": spec.health_path},
        "direct_response": {"status": 503, "body": {"inline_string": "health script did not answer"}},
        "typed_per_filter_config": {
            HEALTH_FILTER: {
                "@type": f"{_TYPES}.filters.http.lua.v3.LuaPerRoute",
                "source_code": {"inline_string": _health_script(spec)},
            },
            # its reply still runs the response filters: the 503 is this JSON, not a problem+json rewrite
            REST_FILTER: {"@type": f"{_TYPES}.filters.http.lua.v3.LuaPerRoute", "disabled": True},
        },
    }


def _health_script(spec: EdgeSpec) -> str:
    def lua_list(names: tuple[str, ...]) -> str:
        return "{" + ", ".join(f'"{n}"' for n in names) + "}"

    def detail(u: Upstream) -> str:
        if not u.health_detail:
            return ""
        top = ""
        if u.health_top_fallback is not None:
            fallback = json.loads(u.health_top_fallback)
            if not isinstance(fallback, dict):
                raise ValueError(f"{u.cluster}: health_top_fallback must be a JSON object")
            text = json.dumps(fallback, separators=(",", ":"))
            if "]=]" in text:
                raise ValueError(f"{u.cluster}: health_top_fallback must not hold ']=]'")
            top = f", top = [=[{text}]=]"  # a Lua long string: no escapes
        return f', detail = "/{u.health_detail}"{top}'

    upstreams = ",\n".join(
        f'  {{cluster = "{u.cluster}", health_service = "{u.health_service}", services = {lua_list(u.services)}'
        f"{detail(u)}}}"
        for u in spec.upstreams
    )
    prelude = f"UPSTREAMS = {{\n{upstreams}\n}}\nTIMEOUT_MS = {int(spec.health.timeout_s * 1000)}\n\n"
    return prelude + _HEALTH_CHECKS + _HEALTH_LUA


def _grpc_health_script(spec: EdgeSpec) -> str:
    """grpc.health.v1.Health's script (edge_grpc.py): GET /health's upstreams and checks, its own answer."""
    return _health_script(spec).removesuffix(_HEALTH_LUA) + GRPC_HEALTH_LUA


def _encoded_either_way(name: str) -> str:
    """A regex for `name` with any of its characters percent-encoded (the transcoder decodes parameter names:
    `n%61me=llama` sets name)."""

    def hex_digit(d: str) -> str:
        return f"[{d.lower()}{d.upper()}]" if d.isalpha() else d

    def either(char: str) -> str:
        code = f"{ord(char):02X}"
        return f"(?:{re.escape(char)}|%{hex_digit(code[0])}{hex_digit(code[1])})"

    return "".join(either(c) for c in name)


def path_override_message(parameter: str) -> str:
    return (
        f"query parameter {parameter!r} names a field the path binds; "
        "give it in the path only (a query parameter must not override the path)"
    )


def _path_override_routes(bindings: Sequence[PathBinding]) -> list[dict[str, Any]]:
    """A 400 for a REST request whose query names a field its path binds (path_bindings.py), one route per
    parameter name so the answer names it. Matched on `:path`, which holds the query; listed after the native
    gRPC routes, so only REST requests test them. The transcoder is off on these routes: it would otherwise
    transcode the request and re-route it to the service."""
    templates: dict[str, list[str]] = {}
    for binding in bindings:
        for name in binding.bound:
            templates.setdefault(name, [])
            if binding.path_regex not in templates[name]:
                templates[name].append(binding.path_regex)
    routes = []
    for name, paths in sorted(templates.items()):
        # Envoy matches the whole :path: the path (a trailing slash too, as the transcoder accepts it), then the
        # parameter first or after any '&', with or without a value, spelled plainly or percent-encoded
        regex = f"(?:{'|'.join(paths)})/?\\?(?:[^#]*&)?{_encoded_either_way(name)}(?:[=&#].*)?"
        routes.append(
            {
                "match": {
                    "prefix": "/",
                    "headers": [{"name": ":path", "string_match": {"safe_regex": {"regex": regex}}}],
                },
                "direct_response": {"status": 400, "body": {"inline_string": path_override_message(name)}},
                "typed_per_filter_config": {
                    TRANSCODER: {"@type": "type.googleapis.com/envoy.config.route.v3.FilterConfig", "disabled": True}
                },
            }
        )
    return routes


def _routes(spec: EdgeSpec, services: list[str]) -> list[dict[str, Any]]:
    timeout = _duration(spec.route_timeout_s)
    grpc_action = {"timeout": timeout, "max_stream_duration": {"grpc_timeout_header_max": "0s"}}
    routes: list[dict[str, Any]] = [_health_route(spec), *_http_routes(spec)]
    clusters = [u.cluster for u in spec.upstreams]
    routes.extend(grpc_health_routes(clusters, _grpc_health_script(spec), grpc_action))
    # Calls that may rightly last long (a sync submit's wait), matched on the method's path before the service's
    # prefix: native gRPC and transcoded REST alike. The stream idle timeout (5 min by default) is lifted with
    # the route timeout, as nothing flows while the service waits.
    for upstream in spec.upstreams:
        long = _duration(upstream.long_call_seconds + spec.route_timeout_s)
        routes.extend(
            {
                "match": {"path": f"/{call}"},
                "route": {"cluster": upstream.cluster, **grpc_action, "timeout": long, "idle_timeout": long},
            }
            for call in upstream.long_calls
        )
    # Native gRPC, and transcoded REST once the transcoder has rewritten :path to /pkg.Service/Method.
    for upstream in spec.upstreams:
        routes.extend(
            {"match": {"prefix": f"/{service}/"}, "route": {"cluster": upstream.cluster, **grpc_action}}
            for service in upstream.services
        )
    if spec.reflection_cluster is not None:
        routes.extend(reflection_routes(spec.reflection_cluster, REFLECTION_SERVICES, grpc_action))
    routes.append(unrouted_route())
    routes.extend(_path_override_routes(path_bindings(spec.descriptor_set.read_bytes(), services)))
    # REST: the route matched on the original path chooses the transcoder's print options. A request
    # the transcoder accepts is re-routed by its rewritten path (the route cache is cleared); one it
    # rejects is answered locally, so the direct response below is only a backstop.
    routes.extend(
        {
            "match": {"prefix": family.prefix},
            "direct_response": {"status": 404, "body": {"inline_string": "no route for this path"}},
            "typed_per_filter_config": {
                TRANSCODER: _transcoder(spec, services, proto_field_names=family.proto_field_names)
            },
        }
        for family in spec.families
    )
    return routes


def _http_routes(spec: EdgeSpec) -> list[dict[str, Any]]:
    """A service's own HTTP API: passed through untouched (the transcoder and the REST filter are off for it) and
    never cut by the edge's timeouts: a held request waits for a pod to wake, a stream lasts as long as the answer,
    and the service bounds both itself (GATEWAY_WAKE_WAIT_SECONDS)."""
    off = {"@type": "type.googleapis.com/envoy.config.route.v3.FilterConfig", "disabled": True}
    return [
        {
            "match": {"prefix": prefix},
            "route": {"cluster": upstream.http_cluster, "timeout": "0s", "idle_timeout": "0s"},
            "typed_per_filter_config": {TRANSCODER: off, REST_FILTER: off, PLUMBING_FILTER: off},
        }
        for upstream in spec.upstreams
        for prefix in upstream.http_prefixes
    ]


def _health_filter() -> dict[str, Any]:
    # No default script: only the /health route gives it one, so no other request pays for a Lua call.
    return {"name": HEALTH_FILTER, "typed_config": {"@type": f"{_TYPES}.filters.http.lua.v3.Lua"}}


PLUMBING_FILTER: Final = "thermostat.grpc_plumbing"
_SKIP: Final = {
    "action": {"name": "skip", "typed_config": {"@type": f"{_TYPES}.filters.common.matcher.action.v3.SkipFilter"}}
}


def _header_is(header: str, value_match: dict[str, Any], *, response: bool = False) -> dict[str, Any]:
    """A matcher predicate on one request (or response) header's value; an absent header never matches."""
    kind = "HttpResponseHeaderMatchInput" if response else "HttpRequestHeaderMatchInput"
    return {
        "single_predicate": {
            "input": {"name": header, "typed_config": {"@type": f"{_MATCHER_TYPES}.{kind}", "header_name": header}},
            "value_match": value_match,
        }
    }


# Native gRPC calls (and transcoded REST, whose content-type is still the client's when the request arrives).
_NATIVE_GRPC: Final = {"predicate": _header_is("content-type", {"prefix": "application/grpc"}), "on_match": _SKIP}


def _skipped_when(extension: dict[str, Any], *matchers: dict[str, Any]) -> dict[str, Any]:
    """`extension` run unless one of `matchers` (first match wins) says to skip it for this request."""
    return {
        "name": extension["name"],
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.common.matching.v3.ExtensionWithMatcher",
            "extension_config": extension,
            "xds_matcher": {"matcher_list": {"matchers": list(matchers)}},
        },
    }


def _rest_filter() -> dict[str, Any]:
    """The REST response filter (Lua), skipped for native gRPC calls: they need nothing from it, and a skipped
    filter costs them no Lua coroutine. Decided on the request's content-type when it arrives (a transcoded
    REST request is application/json then); a per-route switch would not do, as the transcoder re-routes REST
    onto the gRPC routes and the filter reads the route again on the response. (Skipping it for a plain
    success on the response's headers would not do either: Envoy 1.40's matcher then skips it for every
    response, so the script returns at once for those instead.)"""
    lua = {
        "name": REST_FILTER,
        "typed_config": {
            "@type": f"{_TYPES}.filters.http.lua.v3.Lua",
            "default_source_code": {"inline_string": _LUA_SOURCE},
        },
    }
    return _skipped_when(lua, _NATIVE_GRPC)


def _plumbing_filter() -> dict[str, Any]:
    """Removes every grpc-* response header (grpc-status, grpc-message, grpc-accept-encoding, ...) from REST
    answers, natively, after the Lua filter has read them: a header walk in Lua on every REST response cost
    more. Native gRPC calls skip this filter (their status travels in those headers)."""
    mutation = {
        "name": PLUMBING_FILTER,
        "typed_config": {
            "@type": f"{_TYPES}.filters.http.header_mutation.v3.HeaderMutation",
            "mutations": {"response_mutations": [{"remove_on_match": {"key_matcher": {"prefix": "grpc-"}}}]},
        },
    }
    return _skipped_when(mutation, _NATIVE_GRPC)


def _cluster(spec: EdgeSpec, upstream: Upstream) -> dict[str, Any]:
    timing = spec.health
    return {
        **_http2_cluster(upstream.cluster, upstream.host, upstream.port),
        "health_checks": [
            {
                "timeout": _duration(timing.timeout_s),
                "interval": _duration(timing.interval_s),
                "no_traffic_interval": _duration(timing.no_traffic_interval_s),
                "unhealthy_threshold": timing.unhealthy_threshold,
                "healthy_threshold": timing.healthy_threshold,
                "grpc_health_check": {"service_name": upstream.health_service},
            }
        ],
    }


def _http2_cluster(name: str, host: str, port: int) -> dict[str, Any]:
    """A cluster of one gRPC (HTTP/2) endpoint: an IP as given, a name resolved by DNS."""
    return {
        "name": name,
        "type": "STATIC" if _is_ip(host) else "STRICT_DNS",
        "connect_timeout": "1s",
        "typed_extension_protocol_options": {
            "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
                "@type": f"{_TYPES}.upstreams.http.v3.HttpProtocolOptions",
                "explicit_http_config": {"http2_protocol_options": {}},
            }
        },
        "load_assignment": {
            "cluster_name": name,
            "endpoints": [{"lb_endpoints": [{"endpoint": {"address": _address(host, port)}}]}],
        },
    }


def _http1_cluster(name: str, host: str, port: int) -> dict[str, Any]:
    """A cluster of one plain HTTP/1.1 endpoint (a service's own HTTP API)."""
    cluster = _http2_cluster(name, host, port)
    del cluster["typed_extension_protocol_options"]
    return cluster


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def descriptor_methods(descriptor_set: bytes) -> frozenset[str]:
    """Every method of the descriptor set as "pkg.Service/Method"."""
    files = descriptor_pb2.FileDescriptorSet.FromString(descriptor_set).file
    return frozenset(
        f"{f.package}.{service.name}/{method.name}" if f.package else f"{service.name}/{method.name}"
        for f in files
        for service in f.service
        for method in service.method
    )


def _check_calls(spec: EdgeSpec) -> None:
    """Long calls and health details name methods of the upstream's own services, present in the descriptors."""
    named = [(u, c) for u in spec.upstreams for c in (*u.long_calls, *([u.health_detail] if u.health_detail else []))]
    if not named:
        return
    known = descriptor_methods(spec.descriptor_set.read_bytes())
    wrong = [c for u, c in named if c not in known or c.partition("/")[0] not in u.services]
    if wrong:
        raise ValueError(f"calls not among their upstream's methods in {spec.descriptor_set.name}: {wrong}")
    short = [u.cluster for u in spec.upstreams if u.long_calls and u.long_call_seconds <= 0]
    if short:
        raise ValueError(f"long calls need a positive long_call_seconds: {short}")


def _check(spec: EdgeSpec) -> None:
    for path in (spec.descriptor_set, spec.envoy_descriptor_path or spec.descriptor_set):
        if not path.is_absolute():
            raise ValueError(f"descriptor set path must be absolute (Envoy's cwd is not ours): {path}")
    clusters = [u.cluster for u in spec.upstreams]
    if not clusters:
        raise ValueError("the edge needs at least one upstream")
    if len(set(clusters)) != len(clusters):
        raise ValueError(f"cluster names must be unique: {clusters}")
    services = [s for u in spec.upstreams for s in u.services]
    odd = [
        n
        for u in spec.upstreams
        for n in (u.cluster, *u.services, *([u.health_service] if u.health_service else []))
        if not _PLAIN_NAME.fullmatch(n)
    ]
    if odd:
        raise ValueError(f"cluster and service names must be plain (letters, digits, _ . -): {odd}")
    if len(set(services)) != len(services):
        raise ValueError(f"a service is owned by exactly one upstream: {services}")
    if ADMIN_CLUSTER in clusters:
        raise ValueError(f"{ADMIN_CLUSTER!r} names the edge's own admin cluster; an upstream may not take it")
    if spec.stats_port is not None and spec.admin_port == 0:
        raise ValueError("a stats listener needs a fixed admin port (admin_port 0 is picked by Envoy at start)")
    if spec.reflection_cluster is not None and spec.reflection_cluster not in clusters:
        raise ValueError(f"reflection cluster {spec.reflection_cluster!r} is not one of {clusters}")
    prefixes = [f.prefix for f in spec.families]
    if any(not p.startswith("/") or not p.endswith("/") for p in prefixes) or len(set(prefixes)) != len(prefixes):
        raise ValueError(f"family prefixes must be distinct and look like /name/: {prefixes}")
    _check_calls(spec)


def _stats_listener(spec: EdgeSpec, port: int) -> dict[str, Any]:
    """GET /stats/prometheus (or /metrics) → the admin's /stats/prometheus; anything else 404."""
    to_admin = {"cluster": ADMIN_CLUSTER, "timeout": "5s"}
    routes = [
        {"match": {"path": STATS_PATH, "headers": _GET_ONLY}, "route": to_admin},
        {"match": {"path": "/metrics", "headers": _GET_ONLY}, "route": {**to_admin, "prefix_rewrite": STATS_PATH}},
        {
            "match": {"prefix": "/"},
            "direct_response": {"status": 404, "body": {"inline_string": f"only GET {STATS_PATH} here"}},
        },
    ]
    hcm = {
        "@type": f"{_TYPES}.filters.network.http_connection_manager.v3.HttpConnectionManager",
        "stat_prefix": "stats",
        "codec_type": "AUTO",
        "route_config": {"name": "stats", "virtual_hosts": [{"name": "stats", "domains": ["*"], "routes": routes}]},
        "http_filters": [
            {"name": "envoy.filters.http.router", "typed_config": {"@type": f"{_TYPES}.filters.http.router.v3.Router"}}
        ],
    }
    return {
        "name": "stats",
        "address": _address(spec.stats_address, port),
        "filter_chains": [{"filters": [{"name": HCM, "typed_config": hcm}]}],
    }


def _admin_cluster(spec: EdgeSpec) -> dict[str, Any]:
    return {
        "name": ADMIN_CLUSTER,
        "type": "STATIC",
        "connect_timeout": "1s",
        "load_assignment": {
            "cluster_name": ADMIN_CLUSTER,
            "endpoints": [{"lb_endpoints": [{"endpoint": {"address": _address(spec.admin_address, spec.admin_port)}}]}],
        },
    }


def build_envoy_config(spec: EdgeSpec) -> dict[str, Any]:
    """Envoy's bootstrap config for the edge described by `spec`."""
    _check(spec)
    services = [s for u in spec.upstreams for s in u.services]
    hcm = {
        "@type": f"{_TYPES}.filters.network.http_connection_manager.v3.HttpConnectionManager",
        "stat_prefix": "edge",
        "codec_type": "AUTO",
        "route_config": {
            "name": "edge",
            "virtual_hosts": [{"name": "all", "domains": ["*"], "routes": _routes(spec, services)}],
        },
        "http_filters": [
            _health_filter(),
            # Responses pass the filters in reverse: the transcoder, then Lua (which reads grpc-message), then this.
            _plumbing_filter(),
            # Before the transcoder: the response path runs in reverse, so Lua sees transcoded responses.
            _rest_filter(),
            grpc_edge_filter(),
            {"name": TRANSCODER, "typed_config": _transcoder(spec, services, proto_field_names=False)},
            {"name": "envoy.filters.http.router", "typed_config": {"@type": f"{_TYPES}.filters.http.router.v3.Router"}},
        ],
        "local_reply_config": _local_replies(spec),
    }
    runtime: dict[str, Any] = {"re2.max_program_size.error_level": MAX_REGEX_PROGRAM_SIZE}
    listeners = [
        {
            "name": "edge",
            "address": _address(spec.listen_address, spec.listen_port),
            "filter_chains": [{"filters": [{"name": HCM, "typed_config": hcm}]}],
        }
    ]
    clusters = [_cluster(spec, u) for u in spec.upstreams]
    clusters.extend(_http1_cluster(u.http_cluster, u.host, u.http_port) for u in spec.upstreams if u.http_prefixes)
    if spec.stats_port is not None:
        listeners.append(_stats_listener(spec, spec.stats_port))
        clusters.append(_admin_cluster(spec))
    if spec.tracing is not None:
        hcm["tracing"] = _tracing(spec.tracing)
        runtime["tracing.opentelemetry.flush_interval_ms"] = spec.tracing.flush_interval_ms
        clusters.append(_collector_cluster(spec.tracing))
    return {
        "admin": {"address": _address(spec.admin_address, spec.admin_port)},
        # RE2 refuses a program over 100 instructions by default; the path-override routes' regexes (each path
        # that binds a name, the name with any character percent-encoded) pass that with a handful of routes.
        "layered_runtime": {"layers": [{"name": "static", "static_layer": runtime}]},
        "static_resources": {"listeners": listeners, "clusters": clusters},
    }


def body_over_limit_message(limit: int) -> str:
    """The detail of the edge's own 413 for a REST body over the transcoder's limit, with Envoy's command
    operators for the route the request named (before the transcoder rewrote its method to POST and its path: a
    PUT route's 413 said POST, issue 35)."""
    return (
        f"body: over {_mib(limit)}, the largest REST body the edge reads "
        "(%REQ(X-ENVOY-ORIGINAL-METHOD?:METHOD)% %REQ(X-ENVOY-ORIGINAL-PATH?:PATH)%); nothing was sent on"
    )


def _mib(size: int) -> str:
    return f"{size // MIB} MiB" if size % MIB == 0 else f"{size:,} bytes"


def _local_replies(spec: EdgeSpec) -> dict[str, Any]:
    """Envoy's own replies a REST client reads: the transcoder's 413 for a body over its buffer says
    `Request rejected because the transcoder's internal buffer size exceeds the configured limit.`, naming
    neither the limit nor the route; this mapper gives it a detail that does, and the REST filter then writes it
    as the problem's detail. Only the transcoder answers 413 at the edge, and only to REST: a native gRPC call is
    passed through, and its limit is the service's RESOURCE_EXHAUSTED."""
    over_limit = {
        "status_code_filter": {
            "comparison": {"op": "EQ", "value": {"default_value": 413, "runtime_key": "edge.local_reply_413"}}
        }
    }
    return {
        "mappers": [
            unrouted_mapper([s for u in spec.upstreams for s in u.services]),
            {
                "filter": over_limit,
                "body_format_override": {
                    "text_format_source": {"inline_string": body_over_limit_message(body_limit(spec))},
                    "content_type": "text/plain",
                },
            },
        ]
    }


def _tracing(tracing: EdgeTracing) -> dict[str, Any]:
    """The connection manager's OpenTelemetry tracer: a span per request, under the caller's traceparent when
    one came (its sampled flag is kept), whose own context is what the service receives."""
    return {
        "provider": {
            "name": "envoy.tracers.opentelemetry",
            "typed_config": {
                "@type": "type.googleapis.com/envoy.config.trace.v3.OpenTelemetryConfig",
                "grpc_service": {"envoy_grpc": {"cluster_name": COLLECTOR_CLUSTER}, "timeout": "1s"},
                "service_name": tracing.service_name,
            },
        },
    }


def _collector_cluster(tracing: EdgeTracing) -> dict[str, Any]:
    return _http2_cluster(COLLECTOR_CLUSTER, tracing.collector_host, tracing.collector_port)


def render_envoy_config(spec: EdgeSpec) -> str:
    """The config as JSON text (valid YAML), stable for diffs."""
    return json.dumps(build_envoy_config(spec), indent=2) + "\n"


def write_envoy_config(spec: EdgeSpec, path: Path = DEFAULT_CONFIG_PATH) -> Path:
    """Write the config to `path` atomically and return the path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(render_envoy_config(spec), encoding="utf-8")
    tmp.replace(path)
    return path


def _digits(text: str, most: int) -> bool:
    """ASCII digits only, at most `most` of them: str.isdigit() admits '²' and other digits int() refuses."""
    return text.isascii() and text.isdigit() and len(text) <= most
