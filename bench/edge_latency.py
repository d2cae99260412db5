"""What the Envoy edge costs per call, seen from the client and as Envoy itself sees it.

Run: .venv/bin/python bench/edge_latency.py [--calls 2000]

Starts the test-only EdgeTestService and two real Envoys in front of it on free loopback ports: the edge as
shipped, and the same config without the REST response filter (Lua: statuses, problem+json, nulls). Then
makes one trivial unary call `--calls` times per path, every path interleaved in one loop so machine noise
hits them alike:

  REST via Envoy            GET /v1/jobs/j-1: a reply with nothing to rewrite
  REST, nulls to write      GET /api/pods/podless: the service names null fields (x-json-nulls), so the
                            filter buffers the body and rewrites it
  REST without Lua filter   the first path through the Envoy without the response filter
  gRPC via Envoy            GetJob, native gRPC through the edge
  gRPC direct               GetJob straight to the service: the client-side baseline

Client side: p50/p99 per path and the ratio to direct gRPC. Client-side Python (httpx, grpc.aio) is part of
every such number, so Envoy's own access log is read too: per request, the downstream duration (first byte
in to last byte out) minus the upstream time (first byte sent upstream to last byte back), both to the
microsecond — what the edge itself adds: transcoding, filters, routing, its two extra socket hops' syscalls.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests" / "gen"), str(ROOT)]

import grpc  # noqa: E402
import httpx  # noqa: E402

from tests.e2e.edge_server import SERVICE, start_edge_test_server  # noqa: E402
from thermostat.dev.envoy import EnvoyProcess, start_envoy  # noqa: E402
from thermostat.edgetest.v1 import edgetest_pb2, edgetest_pb2_grpc  # noqa: E402
from tools.envoy_config import REST_FILTER, EdgeSpec, Upstream, build_envoy_config  # noqa: E402

WARMUP = 200
BUDGET_S = 300.0
TAG = "x-bench-path"
# Envoy's own view of each request, to the microsecond (%DURATION% and x-envoy-upstream-service-time are
# whole milliseconds, too coarse for a sub-millisecond edge).
ACCESS_LOG_FORMAT = {
    "path": f"%REQ({TAG.upper()})%",
    "status": "%RESPONSE_CODE%",
    "total_us": "%COMMON_DURATION(DS_RX_BEG:DS_TX_END:us)%",
    "upstream_us": "%COMMON_DURATION(US_TX_BEG:US_RX_END:us)%",
}


def _percentile(samples: list[float], q: float) -> float:
    return statistics.quantiles(samples, n=100, method="inclusive")[int(q) - 1]


def _with_access_log(config: dict[str, Any], log_path: Path, *, rest_filter: bool) -> dict[str, Any]:
    hcm = config["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
    hcm["access_log"] = [
        {
            "name": "envoy.access_loggers.file",
            "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.access_loggers.file.v3.FileAccessLog",
                "path": str(log_path),
                "log_format": {"json_format": ACCESS_LOG_FORMAT},
            },
        }
    ]
    if not rest_filter:
        hcm["http_filters"] = [f for f in hcm["http_filters"] if f["name"] != REST_FILTER]
    return config


async def _envoy(spec: EdgeSpec, workdir: Path, name: str, *, rest_filter: bool) -> tuple[EnvoyProcess, Path]:
    log_path = workdir / f"{name}-access.log"
    config = _with_access_log(build_envoy_config(spec), log_path, rest_filter=rest_filter)
    path = workdir / f"{name}.yaml"
    path.write_text(json.dumps(config), encoding="utf-8")
    return await start_envoy(path, concurrency=1), log_path


def _edge_shares(log_paths: list[Path], skip: dict[str, int]) -> dict[str, list[float]]:
    """Per tagged path: Envoy's total minus upstream time, in µs, warm-up requests left out."""
    shares: dict[str, list[float]] = {}
    seen: dict[str, int] = {}
    for log_path in log_paths:
        for line in log_path.read_text(encoding="utf-8").splitlines():
            entry = json.loads(line)
            tag, total, upstream = entry["path"], entry["total_us"], entry["upstream_us"]
            if not tag or total in (None, "-") or upstream in (None, "-"):
                continue
            seen[tag] = seen.get(tag, 0) + 1
            if seen[tag] > skip.get(tag, 0):
                shares.setdefault(tag, []).append(float(total) - float(upstream))
    return shares


async def _measure(calls: int) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    server = await start_edge_test_server()
    with tempfile.TemporaryDirectory(prefix="edge-bench-") as tmp:
        workdir = Path(tmp)
        spec = EdgeSpec(
            upstreams=(
                Upstream(
                    cluster="edgetest", services=(SERVICE,), host="127.0.0.1", port=server.port, health_service=SERVICE
                ),
            ),
            descriptor_set=ROOT / "build" / "edgetest.pb",
            listen_port=0,
            admin_port=0,
        )
        full, full_log = await _envoy(spec, workdir, "edge", rest_filter=True)
        bare, bare_log = await _envoy(spec, workdir, "bare", rest_filter=False)
        edge = f"127.0.0.1:{full.listeners['edge']}"
        try:
            async with (
                httpx.AsyncClient(base_url=f"http://{edge}", timeout=5.0) as http,
                httpx.AsyncClient(base_url=f"http://127.0.0.1:{bare.listeners['edge']}", timeout=5.0) as http_bare,
                grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as direct_channel,
                grpc.aio.insecure_channel(edge) as edge_channel,
            ):
                direct = edgetest_pb2_grpc.EdgeTestServiceStub(direct_channel)
                via_edge = edgetest_pb2_grpc.EdgeTestServiceStub(edge_channel)
                request = edgetest_pb2.GetJobRequest(job_id="j-1")

                def rest(client: httpx.AsyncClient, path: str, tag: str, expect_null: bool = False):
                    async def call() -> None:
                        response = await client.get(path, headers={TAG: tag})
                        if response.status_code != 200:
                            raise RuntimeError(f"{path} answered {response.status_code} {response.text}")
                        if expect_null and response.json().get("podId", "") is not None:
                            raise RuntimeError(f"{path} printed no null: {response.text}")

                    return call

                async def grpc_direct() -> None:
                    await direct.GetJob(request, timeout=5.0)

                async def grpc_edge() -> None:
                    await via_edge.GetJob(request, timeout=5.0, metadata=((TAG, "gRPC via Envoy"),))

                paths = {
                    "REST via Envoy": rest(http, "/v1/jobs/j-1", "REST via Envoy"),
                    "REST, nulls to write": rest(http, "/api/pods/podless", "REST, nulls to write", True),
                    "REST without Lua filter": rest(http_bare, "/v1/jobs/j-1", "REST without Lua filter"),
                    "gRPC via Envoy": grpc_edge,
                    "gRPC direct": grpc_direct,
                }
                samples: dict[str, list[float]] = {name: [] for name in paths}
                order = list(paths.items())
                for i in range(WARMUP + calls):
                    # rotate which path goes first, so none always follows a cold one
                    for name, call in order[i % len(order) :] + order[: i % len(order)]:
                        started = time.perf_counter()
                        await call()
                        if i >= WARMUP:
                            samples[name].append((time.perf_counter() - started) * 1e6)
        finally:
            await full.stop()  # a stopped Envoy has flushed its access log
            await bare.stop()
            await server.stop()
        shares = _edge_shares([full_log, bare_log], skip=dict.fromkeys(paths, WARMUP))
        return samples, shares


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000, help="measured calls per path (default 2000)")
    args = parser.parse_args()
    samples, shares = asyncio.run(asyncio.wait_for(_measure(args.calls), BUDGET_S))
    base50 = _percentile(samples["gRPC direct"], 50)
    base99 = _percentile(samples["gRPC direct"], 99)
    print(f"{args.calls} calls per path, interleaved, after {WARMUP} warm-up rounds (µs)")
    print(f"{'':<25}{'client side':>40}{'edge own share (Envoy)':>28}")
    print(
        f"{'path':<25}{'p50':>10}{'p99':>10}{'p50 ×direct':>12}{'p99 ×direct':>12}{'p50':>10}{'p99':>10}{'p50 ms':>8}"
    )
    for name, values in samples.items():
        p50, p99 = _percentile(values, 50), _percentile(values, 99)
        own = shares.get(name)
        edge = (
            f"{_percentile(own, 50):>10.0f}{_percentile(own, 99):>10.0f}{_percentile(own, 50) / 1000:>8.3f}"
            if own and len(own) > 1
            else f"{'—':>10}{'—':>10}{'—':>8}"
        )
        print(f"{name:<25}{p50:>10.0f}{p99:>10.0f}{p50 / base50:>12.2f}{p99 / base99:>12.2f}{edge}")
    print(
        "edge own share = Envoy's downstream duration (first byte in → last byte out) minus its upstream time "
        "(first byte sent → last byte back), from its access log; goal: REST p50 ≤ 0.300 ms"
    )


if __name__ == "__main__":
    main()
