"""What the Envoy edge costs per call: REST through Envoy vs native gRPC direct vs native gRPC through Envoy.

Run: .venv/bin/python bench/edge_latency.py [--calls 2000]

Starts the test-only EdgeTestService and a real Envoy on free loopback ports, then makes one trivial unary
call (GetJob) `--calls` times per path, the three paths interleaved in one loop so machine noise hits them
alike. Prints p50/p99 per path and the ratios to direct gRPC. Client-side Python (httpx, grpc.aio) is
part of every number; the ratios, not the absolute values, are the result. `/health (floor)` is an HTTP
request Envoy answers itself: what httpx plus one Envoy hop cost before any transcoding or upstream.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests" / "gen"), str(ROOT)]

import grpc  # noqa: E402
import httpx  # noqa: E402

from tests.e2e.edge_server import SERVICE, start_edge_test_server  # noqa: E402
from thermostat.dev.envoy import start_envoy  # noqa: E402
from thermostat.edge.envoy_config import EdgeSpec, Upstream, write_envoy_config  # noqa: E402
from thermostat.edgetest.v1 import edgetest_pb2, edgetest_pb2_grpc  # noqa: E402

WARMUP = 200
BUDGET_S = 180.0


def _percentile(samples: list[float], q: float) -> float:
    return statistics.quantiles(samples, n=100, method="inclusive")[int(q) - 1]


async def _measure(calls: int) -> dict[str, list[float]]:
    server = await start_edge_test_server()
    with tempfile.TemporaryDirectory(prefix="edge-bench-") as workdir:
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
        envoy = await start_envoy(write_envoy_config(spec, Path(workdir) / "envoy.yaml"))
        edge = f"127.0.0.1:{envoy.listeners['edge']}"
        try:
            async with (
                httpx.AsyncClient(base_url=f"http://{edge}", timeout=5.0) as http,
                grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as direct_channel,
                grpc.aio.insecure_channel(edge) as edge_channel,
            ):
                direct = edgetest_pb2_grpc.EdgeTestServiceStub(direct_channel)
                via_edge = edgetest_pb2_grpc.EdgeTestServiceStub(edge_channel)
                request = edgetest_pb2.GetJobRequest(job_id="j-1")

                async def rest() -> None:
                    response = await http.get("/v1/jobs/j-1")
                    if response.status_code != 200:
                        raise RuntimeError(f"REST call failed: {response.status_code} {response.text}")

                async def http_floor() -> None:
                    response = await http.get("/health")
                    if response.status_code != 200:
                        raise RuntimeError(f"/health answered {response.status_code}")

                async def grpc_direct() -> None:
                    await direct.GetJob(request, timeout=5.0)

                async def grpc_edge() -> None:
                    await via_edge.GetJob(request, timeout=5.0)

                paths = {
                    "REST via Envoy": rest,
                    "gRPC direct": grpc_direct,
                    "gRPC via Envoy": grpc_edge,
                    "/health (floor)": http_floor,
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
                return samples
        finally:
            await envoy.stop()
            await server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000, help="measured calls per path (default 2000)")
    args = parser.parse_args()
    samples = asyncio.run(asyncio.wait_for(_measure(args.calls), BUDGET_S))
    base50 = _percentile(samples["gRPC direct"], 50)
    base99 = _percentile(samples["gRPC direct"], 99)
    print(f"{args.calls} calls per path, interleaved, after {WARMUP} warm-up rounds (µs)")
    print(f"{'path':<18}{'p50':>10}{'p99':>10}{'p50 ×direct':>14}{'p99 ×direct':>14}")
    for name, values in samples.items():
        p50, p99 = _percentile(values, 50), _percentile(values, 99)
        print(f"{name:<18}{p50:>10.0f}{p99:>10.0f}{p50 / base50:>14.2f}{p99 / base99:>14.2f}")


if __name__ == "__main__":
    main()
