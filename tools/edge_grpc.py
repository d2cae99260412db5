"""The edge's answers to native gRPC callers beyond the services' own routes (tools/envoy_config.py lists them):
grpc.health.v1.Health for the whole stack and for each service (grpc_health.lua), reflection told it is asked
through the edge, and an Unimplemented in our words for a method the edge does not route."""

from __future__ import annotations

from importlib import resources
from typing import Any, Final

GRPC_HEALTH_LUA: Final = resources.files(__package__).joinpath("grpc_health.lua").read_text(encoding="utf-8")
GRPC_HEALTH_PREFIX: Final = "/grpc.health.v1.Health/"
HEALTH_ROUTE_HEADER: Final = "x-thermostat-health-upstream"
"""Set by grpc_health.lua only (a caller's own is removed): the upstream a health call is forwarded to."""
REFLECTION_HEADER: Final = ("x-thermostat-reflection", "edge")
"""Sent with every reflection call the edge routes: the reflecting service then describes what the edge routes
(libs/thermostat/chassis/reflection.py), not what its own port serves."""
_LUA_PER_ROUTE: Final = "type.googleapis.com/envoy.extensions.filters.http.lua.v3.LuaPerRoute"
_NATIVE_GRPC: Final = {"name": "content-type", "string_match": {"prefix": "application/grpc"}}


GRPC_EDGE_FILTER: Final = "thermostat.grpc_edge"


def grpc_edge_filter() -> dict[str, Any]:
    """The Lua filter the health routes give their script (no default: no other request runs Lua here). Listed
    after the filters that skip native gRPC calls, so they have decided to when it answers one itself: before,
    the plumbing filter would strip that answer's grpc-status."""
    return {
        "name": GRPC_EDGE_FILTER,
        "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua"},
    }


def grpc_health_routes(clusters: list[str], script: str, action: dict[str, Any]) -> list[dict[str, Any]]:
    """grpc.health.v1.Health's routes: one per upstream, taken once the script has named it, then the route every
    call first matches. Each runs the script (a route is chosen before it runs, so a caller's own header would
    otherwise pick the upstream); only native gRPC calls match."""
    per_route = {GRPC_EDGE_FILTER: {"@type": _LUA_PER_ROUTE, "source_code": {"inline_string": script}}}
    routes = [
        {
            "match": {
                "prefix": GRPC_HEALTH_PREFIX,
                "headers": [_NATIVE_GRPC, {"name": HEALTH_ROUTE_HEADER, "string_match": {"exact": cluster}}],
            },
            "route": {"cluster": cluster, **action},
            "typed_per_filter_config": per_route,
        }
        for cluster in clusters
    ]
    # the script always answers or re-routes: this route's backstop is never sent
    routes.append(
        {
            "match": {"prefix": GRPC_HEALTH_PREFIX, "headers": [_NATIVE_GRPC]},
            "direct_response": {"status": 503, "body": {"inline_string": "the edge's health script did not answer"}},
            "typed_per_filter_config": per_route,
        }
    )
    return routes


def reflection_routes(cluster: str, services: tuple[str, ...], action: dict[str, Any]) -> list[dict[str, Any]]:
    """Reflection to the one service that describes the edge, told so (a caller's own header is overwritten)."""
    told = {
        "header": {"key": REFLECTION_HEADER[0], "value": REFLECTION_HEADER[1]},
        "append_action": "OVERWRITE_IF_EXISTS_OR_ADD",
    }
    return [
        {
            "match": {"prefix": f"/{service}/"},
            "route": {"cluster": cluster, **action},
            "request_headers_to_add": [told],
        }
        for service in services
    ]


def unrouted_route() -> dict[str, Any]:
    """Every native gRPC call no route before it took: Envoy's 404, which a gRPC caller reads as UNIMPLEMENTED, with
    the message unrouted_mapper writes (Envoy's own has none)."""
    return {
        "match": {"prefix": "/", "headers": [_NATIVE_GRPC]},
        "direct_response": {"status": 404, "body": {"inline_string": "the edge routes no such method"}},
    }


def unrouted_message(services: list[str]) -> str:
    """What a gRPC caller of a method the edge does not route reads (Envoy fills in the method's path)."""
    return (
        "the edge does not route %REQ(:PATH)%: it routes "
        + ", ".join([*services, "grpc.health.v1.Health", "server reflection"])
        + " (grpcurl -plaintext <edge> list); an internal service answers only the deployment's own services, "
        "on that service's port"
    )


def unrouted_mapper(services: list[str]) -> dict[str, Any]:
    """The local reply mapper giving unrouted_route's 404 to a native gRPC call its message (grpc-message)."""
    return {
        "filter": {
            "and_filter": {
                "filters": [
                    {
                        "status_code_filter": {
                            "comparison": {
                                "op": "EQ",
                                "value": {"default_value": 404, "runtime_key": "edge.local_reply_404"},
                            }
                        }
                    },
                    {"header_filter": {"header": _NATIVE_GRPC}},
                ]
            }
        },
        "body_format_override": {
            "text_format_source": {"inline_string": unrouted_message(services)},
            "content_type": "text/plain",
        },
    }
