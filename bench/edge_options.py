"""What Envoy's per-request options cost it on the pool's REST path: its CPU per POST /v1/jobs/sync, by config.

Run: .venv/bin/python bench/edge_options.py [--rounds 12] [--requests 1000] [--clients 32] [VARIANT ...]

One stub gRPC upstream answering the pool's SubmitJobSync with a fixed HttpBody (the service's own cost is not
what this measures) and one real Envoy per variant in front of it: the edge as shipped (build_envoy_config with
the pool dispatcher's upstream, as bench/pool_throughput.py builds it) and the same config with one option
changed. `--clients` aiohttp callers post `/v1/jobs/sync?machine_type=echo&wait_seconds=60` with the tenant and
token headers, `--requests` a round, each variant once a round in an order that rotates and reverses, so load
drifts hit every variant alike. Envoy's CPU is read from its threads' scheduler time (/proc/PID/task/*/schedstat,
nanoseconds; psutil's 10 ms ticks are too coarse for a round). Prints each variant's median µs per request, its
ratio to the shipped config, and every round. This machine's two cores are shared: compare the ratios, and
only trust a difference larger than the spread of the shipped config's own rounds.

The two floors are direct responses that never reach the upstream: through the router alone, and through every
filter of the shipped chain (the transcoder off on that route): Envoy's cost before any filter runs, and the
filters' when they have nothing to do.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import os
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]

import aiohttp  # noqa: E402
import grpc  # noqa: E402
from google.api import httpbody_pb2  # noqa: E402
from grpc_health.v1 import health, health_pb2, health_pb2_grpc  # noqa: E402

from thermostat.chassis.ports import free_port  # noqa: E402
from thermostat.chassis.registry import POOL_DISPATCHER  # noqa: E402
from thermostat.dev.envoy import EnvoyProcess, start_envoy  # noqa: E402
from tools.envoy_config import (  # noqa: E402
    HEALTH_FILTER,
    REST_FILTER,
    TRANSCODER,
    EdgeSpec,
    build_envoy_config,
    upstreams,
)

WARMUP = 300
ANSWER = b'{"job": 1}'
QUERY = "/v1/jobs/sync?machine_type=echo&wait_seconds=60"
FLOOR_PATH = "/floor"
# what a REST request carries upstream that no service reads (the transcoder adds the x-envoy-original-* pair)
UNREAD_HEADERS = (
    "accept",
    "accept-encoding",
    "user-agent",
    "x-forwarded-proto",
    "x-envoy-original-path",
    "x-envoy-original-method",
)


class _SubmitJobSync(grpc.GenericRpcHandler):
    def service(self, details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler | None:
        if not details.method.endswith("/SubmitJobSync"):
            return None
        answer = httpbody_pb2.HttpBody(content_type="application/octet-stream", data=ANSWER).SerializeToString()

        async def handle(_request: bytes, _context: grpc.aio.ServicerContext) -> bytes:
            return answer

        return grpc.unary_unary_rpc_method_handler(handle)


Variant = Callable[[dict[str, Any]], None]


def _hcm(config: dict[str, Any]) -> dict[str, Any]:
    return config["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]  # type: ignore[no-any-return]


def _without(name: str) -> Variant:
    def change(config: dict[str, Any]) -> None:
        _hcm(config)["http_filters"] = [f for f in _hcm(config)["http_filters"] if f["name"] != name]

    return change


def _no_request_id(config: dict[str, Any]) -> None:
    _hcm(config)["generate_request_id"] = False


def _suppress_envoy_headers(config: dict[str, Any]) -> None:
    for f in _hcm(config)["http_filters"]:
        if f["name"] == "envoy.filters.http.router":
            f["typed_config"]["suppress_envoy_headers"] = True


def _strip_unread(config: dict[str, Any]) -> None:
    _hcm(config)["route_config"]["virtual_hosts"][0]["request_headers_to_remove"] = list(UNREAD_HEADERS)


def _lean_headers(config: dict[str, Any]) -> None:
    for change in (_no_request_id, _suppress_envoy_headers, _strip_unread):
        change(config)


def _no_stats(config: dict[str, Any]) -> None:
    config["stats_config"] = {"stats_matcher": {"reject_all": True}}


def _no_path_override_routes(config: dict[str, Any]) -> None:
    host = _hcm(config)["route_config"]["virtual_hosts"][0]
    host["routes"] = [r for r in host["routes"] if r.get("direct_response", {}).get("status") != 400]


def _small_http2_windows(config: dict[str, Any]) -> None:
    """Upstream HTTP/2 windows of 1 MiB a stream and 16 MiB a connection, against Envoy's 256 MiB defaults."""
    for cluster in config["static_resources"]["clusters"]:
        options = cluster["typed_extension_protocol_options"]["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]
        options["explicit_http_config"]["http2_protocol_options"] = {
            "initial_stream_window_size": 1 << 20,
            "initial_connection_window_size": 1 << 24,
        }


def _runtime(key: str, value: bool) -> Variant:
    def change(config: dict[str, Any]) -> None:
        config["layered_runtime"]["layers"][0]["static_layer"][key] = value

    return change


def _floor(*, filters: bool) -> Variant:
    def change(config: dict[str, Any]) -> None:
        route = {
            "match": {"path": FLOOR_PATH},
            "direct_response": {"status": 200, "body": {"inline_string": ANSWER.decode()}},
            "typed_per_filter_config": {
                TRANSCODER: {"@type": "type.googleapis.com/envoy.config.route.v3.FilterConfig", "disabled": True}
            },
        }
        _hcm(config)["route_config"]["virtual_hosts"][0]["routes"].insert(0, route)
        if not filters:
            _hcm(config)["http_filters"] = _hcm(config)["http_filters"][-1:]  # the router

    return change


VARIANTS: dict[str, Variant] = {
    "shipped": lambda config: None,
    "no-request-id": _no_request_id,
    "suppress-envoy-headers": _suppress_envoy_headers,
    "strip-unread-headers": _strip_unread,
    "lean-headers": _lean_headers,
    "no-stats": _no_stats,
    "no-path-override-routes": _no_path_override_routes,
    "no-health-filter": _without(HEALTH_FILTER),
    "no-rest-filter": _without(REST_FILTER),
    "small-http2-windows": _small_http2_windows,
    "legacy-http1-parser": _runtime("envoy.reloadable_features.http1_use_balsa_parser", False),
    "nghttp2": _runtime("envoy.reloadable_features.http2_use_oghttp2", False),
    "floor-router-only": _floor(filters=False),
    "floor-all-filters": _floor(filters=True),
}
DEFAULT = ("shipped", "lean-headers", "no-stats", "no-path-override-routes", "no-health-filter", "no-rest-filter")


def _cpu_ns(pid: int) -> int:
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/schedstat", encoding="ascii") as stat:
            total += int(stat.read().split()[0])
    return total


async def main(names: list[str], rounds: int, requests: int, lanes: int) -> None:
    print(f"{rounds} rounds of {requests} requests per variant, {lanes} callers; {_load()}", flush=True)
    port = free_port()
    server = grpc.aio.server()
    checks = health.aio.HealthServicer()
    await checks.set(POOL_DISPATCHER.health_service, health_pb2.HealthCheckResponse.SERVING)
    health_pb2_grpc.add_HealthServicer_to_server(checks, server)
    server.add_generic_rpc_handlers((_SubmitJobSync(),))
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    spec = EdgeSpec(
        upstreams=upstreams((POOL_DISPATCHER,), ports={POOL_DISPATCHER.name: port}, host="127.0.0.1"),
        descriptor_set=ROOT / "build" / "thermostat.pb",
        listen_port=0,
        admin_port=0,
    )
    envoys: dict[str, EnvoyProcess] = {}
    spent: dict[str, list[float]] = {name: [] for name in names}
    headers = {"Authorization": "Bearer bench", "X-Strata-Tenant": "bench"}
    try:
        with tempfile.TemporaryDirectory(prefix="edge-options-") as tmp:
            for name in names:
                config = copy.deepcopy(build_envoy_config(spec))
                VARIANTS[name](config)
                path = Path(tmp) / f"{name}.yaml"
                path.write_text(json.dumps(config), encoding="utf-8")
                envoys[name] = await start_envoy(path, concurrency=1)
            async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:

                async def run(name: str, count: int) -> None:
                    target = FLOOR_PATH if name.startswith("floor") else QUERY
                    url = f"http://127.0.0.1:{envoys[name].listeners['edge']}{target}"
                    numbers = iter(range(count))

                    async def lane() -> None:
                        for _ in numbers:
                            async with session.post(url, data=ANSWER, headers=headers) as response:
                                body = await response.read()
                                if response.status != 200 or body != ANSWER:
                                    raise SystemExit(f"{name}: HTTP {response.status} {body[:200]!r}")

                    await asyncio.gather(*(lane() for _ in range(lanes)))

                for name in names:
                    await run(name, WARMUP)
                for r in range(rounds):
                    order = names[r % len(names) :] + names[: r % len(names)]
                    for name in order[::-1] if r % 2 else order:
                        before = _cpu_ns(envoys[name].pid)
                        await run(name, requests)
                        spent[name].append((_cpu_ns(envoys[name].pid) - before) / requests / 1e3)
    finally:
        for envoy in envoys.values():
            await envoy.stop()
        await server.stop(None)
    shipped = statistics.median(spent[names[0]])
    print(f"\n{'variant':<26}{'µs/request':>11}{'× ' + names[0]:>14}   rounds")
    for name in names:
        median = statistics.median(spent[name])
        rounds_text = " ".join(f"{v:.0f}" for v in spent[name])
        print(f"{name:<26}{median:>11.1f}{median / shipped:>13.3f}x   {rounds_text}")
    print(f"at end: {_load()}")


def _load() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.2f} (1 min) {five:.2f} (5 min) on {os.cpu_count()} cores"


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("variants", nargs="*", help=f"of: {' '.join(VARIANTS)} (default: {' '.join(DEFAULT)})")
    parser.add_argument("--rounds", type=int, default=12, help="rounds per variant (default 12)")
    parser.add_argument("--requests", type=int, default=1000, help="requests per variant a round (default 1000)")
    parser.add_argument("--clients", type=int, default=32, help="concurrent callers (default 32)")
    args = parser.parse_args()
    unknown = [v for v in args.variants if v not in VARIANTS]
    if unknown:
        parser.error(f"unknown variants {unknown}; known: {' '.join(VARIANTS)}")
    names = list(dict.fromkeys(["shipped", *(args.variants or DEFAULT)]))
    asyncio.run(main(names, args.rounds, args.requests, args.clients))


if __name__ == "__main__":
    cli()
