"""Metering's two measures (issue 12): ledger ingest rate, and what the budget check adds to a wake.

Run: .venv/bin/python bench/metering.py [--events 20000] [--samples 200]

In one run, over an embedded Postgres (fsync off) and real gRPC on loopback:

- Ingest: `--events` billable actions in the pod controller's table, read through its feed
  (PodControllerInternal.ListBillableActions, pages of LEDGER_PAGE_SIZE) and landed by metering's ledger, each
  page and its position in one transaction; and as many usage events in the pool's table, read through the
  pool's feed (PoolDispatcherInternal.ListUsageEvents) the same way. Printed: events/s from each feed into the
  ledger. Goal ≥ 5,000 each.
- Budget check: StartPod (gRPC) on a RUNNING pod of the RunPod simulator (AlreadyRunning),
  `--samples` times against a controller without METERING_ADDR and as many against one with it, metering
  holding a budget (200 billed intervals of spend, folded once into metering's per-pod summary; each check
  folds only what landed since). Printed: each p50 and the difference, and for scale, alone: metering's
  CheckPodBudget, the catalogue read of the projection (made only before a start or create, so not by these
  wakes of a running pod) and a one-small-query RPC. Goal ≤ 2 ms p50 added. Both controllers and the
  simulator run in this process (alternating samples, so drift hits both alike), metering in a process of its
  own.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import statistics
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests" / "gen"), str(ROOT)]

from tests.fixtures.postgres import embedded_data_dir  # noqa: E402
from tests.fixtures.services import (  # noqa: E402
    INTERNAL_TOKEN,
    OPERATOR,
    VOLUME,
    RunningService,
    metering_env,
    pod_controller_env,
    start_pod_controller,
)
from tests.integration.pool_dispatcher.conftest import pool_env, start_pool  # noqa: E402
from thermostat.chassis.internal_auth import INTERNAL_TOKEN_ENV  # noqa: E402
from thermostat.chassis.ports import free_port  # noqa: E402
from thermostat.chassis.request_context import insecure_channel  # noqa: E402
from thermostat.dev.embedded_postgres import EmbeddedPostgres  # noqa: E402
from thermostat.dev.simulators.runpod.server import RunPodSimulator  # noqa: E402
from thermostat.metering.ledger import Ledger, PodActionFeed, PoolUsageFeed  # noqa: E402
from thermostat.metering.repository import MeteringRepository  # noqa: E402
from thermostat.metering.v1 import metering_pb2, metering_pb2_grpc  # noqa: E402
from thermostat.pods.v1 import pods_pb2, pods_pb2_grpc  # noqa: E402
from thermostat.pool.v1 import pool_pb2_grpc  # noqa: E402
from thermostat.store.db import Store  # noqa: E402

INGEST_GOAL = 5000.0
CHECK_GOAL_MS = 2.0
PAGE_SIZE = 1000


async def write_actions(store: Store, count: int, pod_name: str) -> None:
    await store.pool.execute(
        """
        INSERT INTO pod_actions (id, pod_name, action, pod_id, gpu_id, price_per_hour, http_status, ok, trigger, at)
        SELECT gen_random_uuid(), $2, CASE WHEN g % 2 = 1 THEN 'Create' ELSE 'Stop' END, 'pod-' || ((g + 1) / 2),
               'NVIDIA A100 80GB PCIe', 1.5, 200, true, CASE WHEN g % 2 = 1 THEN 'wake' ELSE 'idle' END,
               now() - interval '1 day' + make_interval(secs => g)
        FROM generate_series(1, $1) AS g""",
        count,
        pod_name,
    )


async def ingest(store: Store, controller_address: str, events: int) -> float:
    # the wake's pod bills 200 intervals; the rest of the feed is another pod's, so each check folds 400 actions
    await write_actions(store, 400, "qwen")
    await write_actions(store, events - 400, "bench-feed")
    async with insecure_channel(controller_address, internal_token=INTERNAL_TOKEN) as channel:
        feed = PodActionFeed(pods_pb2_grpc.PodControllerInternalStub(channel), timeout=60)
        ledger = Ledger(MeteringRepository(store.pool), [feed], page_size=PAGE_SIZE)
        started = time.perf_counter()
        read = await ledger.catch_up(feed)
        elapsed = time.perf_counter() - started
    landed = await store.pool.fetchval("SELECT count(*) FROM ledger_pod_actions")
    assert read == landed == events, (read, landed, events)
    return events / elapsed


async def pool_ingest(store: Store, events: int) -> float:
    """`events` usage events in the pool's table, read through its internal feed into the ledger."""
    await store.pool.execute(
        """
        INSERT INTO pool_usage (job_id, tenant_id, machine_type, worker_id, terminal_state, duration_seconds,
                                started_at, ended_at)
        SELECT gen_random_uuid(), 'tenant-' || (g % 10), 'local', gen_random_uuid(), 'completed', 1.0,
               now() - interval '1 day' + make_interval(secs => g),
               now() - interval '1 day' + make_interval(secs => g + 1)
        FROM generate_series(1, $1) AS g""",
        events,
    )
    async with (
        start_pool(store, pool_env(**{INTERNAL_TOKEN_ENV: INTERNAL_TOKEN, "LOG_LEVEL": "WARNING"})) as pool,
        insecure_channel(pool.address, internal_token=INTERNAL_TOKEN) as channel,
    ):
        feed = PoolUsageFeed(pool_pb2_grpc.PoolDispatcherInternalStub(channel), timeout=60)
        ledger = Ledger(MeteringRepository(store.pool), [feed], page_size=PAGE_SIZE)
        started = time.perf_counter()
        read = await ledger.catch_up(feed)
        elapsed = time.perf_counter() - started
    landed = await store.pool.fetchval("SELECT count(*) FROM ledger_pool_usage")
    assert read == landed == events, (read, landed, events)
    return events / elapsed


async def wake_p50(stubs: dict[str, pods_pb2_grpc.PodControllerStub], samples: int) -> dict[str, float]:
    times: dict[str, list[float]] = {name: [] for name in stubs}
    for i in range(samples + 10):
        for name, stub in stubs.items():
            started = time.perf_counter()
            reply = await stub.StartPod(pods_pb2.StartPodRequest(name="qwen"), metadata=OPERATOR, timeout=30)
            elapsed = time.perf_counter() - started
            assert reply.outcome == "AlreadyRunning", reply
            if i >= 10:  # warm-up
                times[name].append(elapsed * 1000)
    return {name: statistics.median(values) for name, values in times.items()}


@contextlib.asynccontextmanager
async def metering_process(dsn: str, controller: str, port: int) -> AsyncIterator[RunningService]:
    env = {
        **os.environ,
        **metering_env(controller, LEDGER_POLL_SECONDS="300"),
        "DATABASE_URL": dsn,
        "METERING_PORT": str(port),
        "METERING_METRICS_PORT": "0",
        "LOG_LEVEL": "WARNING",
    }
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "thermostat.metering", env=env, stdout=asyncio.subprocess.DEVNULL
    )
    running = RunningService(host=None, address=f"127.0.0.1:{port}")  # type: ignore[arg-type]
    try:
        async with running.channel() as channel:
            await asyncio.wait_for(channel.channel_ready(), 30)
        yield running
    finally:
        process.terminate()
        await asyncio.wait_for(process.wait(), 15)


async def check_parts(sim: RunPodSimulator, metering: RunningService, samples: int) -> dict[str, float]:
    """Alone, for scale: metering's CheckPodBudget, the projection's catalogue read and a one-small-query RPC."""
    from thermostat.providers.runpod.client import RunPodV2Client

    scale = "GetLedgerStatus (one small query, for scale)"
    times: dict[str, list[float]] = {"CheckPodBudget": [], "catalogue": [], scale: []}
    async with metering.channel() as channel, RunPodV2Client("bench-key", base_url=sim.base_url) as client:
        stub = metering_pb2_grpc.MeteringInternalStub(channel)
        for _ in range(samples):
            started = time.perf_counter()
            await stub.CheckPodBudget(metering_pb2.CheckPodBudgetRequest(name="qwen", projected_usd=1.0))
            times["CheckPodBudget"].append((time.perf_counter() - started) * 1000)
            started = time.perf_counter()
            await client.get_catalog()
            times["catalogue"].append((time.perf_counter() - started) * 1000)
            started = time.perf_counter()
            await metering_pb2_grpc.MeteringStub(channel).GetLedgerStatus(metering_pb2.GetLedgerStatusRequest())
            times[scale].append((time.perf_counter() - started) * 1000)
    return {name: statistics.median(values) for name, values in times.items()}


async def run(events: int, samples: int) -> int:
    logging.basicConfig(level=logging.WARNING)
    with (
        embedded_data_dir() as data_dir,
        EmbeddedPostgres(data_dir, durable=False) as postgres,
        RunPodSimulator(api_key="bench-key") as sim,
    ):
        store = await Store.open(postgres.local_dsn)
        try:
            sim.add_pod(pod_id="benchpod00001a", status="RUNNING", volume_id=VOLUME)
            env = {**pod_controller_env(sim), "RUNPOD_API_KEY": "bench-key", "LOG_LEVEL": "WARNING"}
            metering_port = free_port()
            async with (
                start_pod_controller(env, store) as plain,
                start_pod_controller({**env, "METERING_ADDR": f"127.0.0.1:{metering_port}"}, store) as guarded,
            ):
                rate = await ingest(store, plain.address, events)
                pool_rate = await pool_ingest(store, events)
                # started after the ingest (its own ledger finds the feed read already and lands nothing), as a
                # process of its own like the controller's real peer, so its work does not share this event loop
                async with metering_process(postgres.local_dsn, plain.address, metering_port) as metering:
                    async with metering.channel() as channel:
                        await metering_pb2_grpc.MeteringStub(channel).SetPodBudget(
                            metering_pb2.SetPodBudgetRequest(name="qwen", daily_usd=1e9, monthly_usd=1e9),
                            metadata=OPERATOR,
                        )
                    parts = await check_parts(sim, metering, samples)
                    async with plain.channel() as a, guarded.channel() as b:
                        p50 = await wake_p50(
                            {"without": pods_pb2_grpc.PodControllerStub(a), "with": pods_pb2_grpc.PodControllerStub(b)},
                            samples,
                        )
        finally:
            await store.close()
    added = p50["with"] - p50["without"]
    for name, value in (("pod actions", rate), ("pool usage", pool_rate)):
        print(
            f"ledger ingest ({name}): {events} events in pages of {PAGE_SIZE}: {value:,.0f} events/s "
            f"(goal >= {INGEST_GOAL:,.0f}) {'PASS' if value >= INGEST_GOAL else 'FAIL'}"
        )
    print(
        f"wake p50 (AlreadyRunning, {samples} samples each): without metering {p50['without']:.2f} ms, with "
        f"metering {p50['with']:.2f} ms; budget check adds {added:.2f} ms (goal <= {CHECK_GOAL_MS:.0f} ms) "
        f"{'PASS' if added <= CHECK_GOAL_MS else 'FAIL'}"
    )
    print("  its parts alone (p50): " + ", ".join(f"{name} {ms:.2f} ms" for name, ms in parts.items()))
    return 0 if min(rate, pool_rate) >= INGEST_GOAL and added <= CHECK_GOAL_MS else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=20000)
    parser.add_argument("--samples", type=int, default=200)
    args = parser.parse_args()
    return asyncio.run(run(args.events, args.samples))


if __name__ == "__main__":
    sys.exit(main())
