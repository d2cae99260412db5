"""Pool dispatch overhead: a sync job through the pool against calling the same warm worker directly.

Run: .venv/bin/python bench/pool_dispatch_overhead.py [--calls 2000]

Issue 10's second measure. One dispatcher process (`python -m thermostat.pool_dispatcher`, a real subprocess,
over an embedded Postgres with fsync off) with one warm reference worker (echo handler, local backend), set up
by bench/pool_throughput.py's rig. One caller, one call at a time, the two paths interleaved in one loop
(the order alternating) so machine noise hits both alike:

  pool     SubmitJobSync over gRPC: auth, the submit statement (insert + claim the warm machine), the worker
           call, the completion statement (terminal state + usage), the answer
  direct   POST {endpoint}/execute to the same worker with its token, through the pool's WorkerClient
           (the pool's own HTTP/1.1 client, kept alive): what the job itself costs
  gRPC hop grpc.health.v1 Health.Check on the dispatcher: a unary call with no work, what the gRPC
           framework alone costs on each side (context for the pool's share, not part of the goal)

Goal: pool p50 ≤ 3× direct p50, and pool p99 ≤ 10 ms. The load average is printed: the machine is shared,
so read the ratio from this run rather than the absolutes.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent)]

from grpc_health.v1 import health_pb2, health_pb2_grpc  # noqa: E402
from pool_throughput import TYPE, auth, load_line, payload, pool_rig  # noqa: E402

from thermostat.chassis.event_loop import choose_loop  # noqa: E402
from thermostat.chassis.event_loop import run as run_on  # noqa: E402
from thermostat.chassis.registry import POOL_DISPATCHER  # noqa: E402
from thermostat.pool.v1 import pool_pb2  # noqa: E402
from thermostat.providers.pool.worker_client import WorkerClient  # noqa: E402

WARMUP = 200


def percentile(samples: list[float], q: int) -> float:
    return statistics.quantiles(samples, n=100, method="inclusive")[q - 1]


async def interleaved(paths: dict[str, Callable[[int], Awaitable[None]]], calls: int) -> dict[str, list[float]]:
    """Milliseconds of each call of each path, one call at a time, the paths taking turns (the order reversing
    each turn) so machine noise hits them alike; the first WARMUP turns unmeasured. bench/peers.py uses it too."""
    samples: dict[str, list[float]] = {name: [] for name in paths}
    order = list(paths.items())
    for i in range(WARMUP + calls):
        for name, call in order if i % 2 else order[::-1]:
            started = time.perf_counter()
            await call(i)
            if i >= WARMUP:
                samples[name].append((time.perf_counter() - started) * 1000)
    return samples


async def main(calls: int) -> None:
    print(f"{calls} calls per path, interleaved, one at a time; at start: {load_line()}", flush=True)
    samples: dict[str, list[float]] = {
        "pool (gRPC SubmitJobSync)": [],
        "direct (POST /execute)": [],
        "gRPC hop (Health.Check)": [],
    }
    async with pool_rig(processes=1, workers=1, edge=False) as rig, WorkerClient() as client:
        (machine,) = await rig.machines()
        stub = rig.dispatchers[0].stub
        metadata = auth()

        async def through_pool(n: int) -> None:
            request = pool_pb2.SubmitJobSyncRequest(machine_type=TYPE, wait_seconds="60")
            request.payload.data = payload(n)
            body = await stub.SubmitJobSync(request, metadata=metadata, timeout=60)
            if body.data != payload(n):
                raise SystemExit(f"pool job {n}: result {body.data!r}")

        async def direct(n: int) -> None:
            reply = await client.execute(machine["endpoint"], machine["token"], payload(n), deadline_seconds=60)
            if reply.status != 200 or reply.body != payload(n):
                raise SystemExit(f"direct call {n}: {reply}")

        health = health_pb2_grpc.HealthStub(rig.dispatchers[0].channel)
        check = health_pb2.HealthCheckRequest(service=POOL_DISPATCHER.health_service)

        async def grpc_hop(n: int) -> None:
            await health.Check(check, timeout=60)

        samples = await interleaved(dict(zip(samples, (through_pool, direct, grpc_hop), strict=True)), calls)
    pool, direct_ms = samples["pool (gRPC SubmitJobSync)"], samples["direct (POST /execute)"]
    print(f"\n{'path':<28}{'p50 ms':>9}{'p99 ms':>9}")
    for name, values in samples.items():
        print(f"{name:<28}{percentile(values, 50):>9.3f}{percentile(values, 99):>9.3f}")
    ratio = percentile(pool, 50) / percentile(direct_ms, 50)
    p99 = percentile(pool, 99)
    print(f"\npool p50 / direct p50 = {ratio:.2f}x   (goal ≤ 3.00x: {'met' if ratio <= 3 else 'NOT met'})")
    print(f"pool p99 = {p99:.2f} ms = {p99 / 10:.2f}x goal   (goal ≤ 10 ms: {'met' if p99 <= 10 else 'NOT met'})")
    hop = percentile(samples["gRPC hop (Health.Check)"], 50) / percentile(direct_ms, 50)
    floor = "above" if hop > 3 else "within"
    print(f"gRPC hop p50 / direct p50 = {hop:.2f}x   (a call with no work at all: {floor} the 3x budget)")
    print(f"at end: {load_line()}")


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000, help="measured calls per path (default 2000)")
    parser.add_argument(
        "--loop",
        choices=("uvloop", "asyncio"),
        default="uvloop",
        help="this process's event loop, the caller's for both paths (default uvloop, as the services run)",
    )
    args = parser.parse_args()
    choice = choose_loop(args.loop)
    print(f"caller on {choice.name}" + (f" ({choice.fallback})" if choice.fallback else ""), flush=True)
    run_on(main(args.calls), choice)


if __name__ == "__main__":
    cli()
