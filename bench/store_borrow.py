"""The store's connection borrow: asyncpg's pool against the LendingPool in front of it, paired in one run.

Run: .venv/bin/python bench/store_borrow.py [--calls 20000] [--rounds 6] [--lanes 1,8,32]

One embedded Postgres (fsync off); two pools on it with the settings `create_pool` uses: a plain asyncpg
pool (`borrow` on it takes asyncpg's acquire and release, as every borrow did before the LendingPool) and
`create_pool`'s LendingPool. Each call borrows a connection and runs `SELECT 1` on it, the shape of the pool
dispatcher's hot statements without their work in Postgres; `--lanes` callers run at once (8 is about what
one dispatcher has in flight under bench/pool_throughput.py). Rounds alternate which pool goes first, on the
event loop the services run (uvloop when installed). The figure is this process's CPU per call (user +
system, what a dispatcher spends), median of the rounds; Postgres's share is the same statement either way.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]

import asyncpg  # noqa: E402

from tests.fixtures.postgres import embedded_data_dir  # noqa: E402
from thermostat.chassis.event_loop import choose_loop  # noqa: E402
from thermostat.chassis.event_loop import run as run_on  # noqa: E402
from thermostat.dev.embedded_postgres import EmbeddedPostgres  # noqa: E402
from thermostat.store.connections import borrow  # noqa: E402
from thermostat.store.db import _keep_session, create_pool  # noqa: E402

MAX_SIZE = 10


def load_line() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.2f} (1 min) {five:.2f} (5 min) on {os.cpu_count()} cores"


async def run(pool: asyncpg.Pool, calls: int, lanes: int) -> float:
    """CPU seconds of this process per call, `calls` borrows of `lanes` callers at once."""
    per_lane = calls // lanes

    async def lane() -> None:
        for _ in range(per_lane):
            async with borrow(pool) as connection:
                await connection.fetchval("SELECT 1")

    start = time.process_time()
    await asyncio.gather(*(lane() for _ in range(lanes)))
    return (time.process_time() - start) / (per_lane * lanes)


async def main(dsn: str, calls: int, rounds: int, lane_counts: list[int]) -> None:
    settings = {"server_settings": {"application_name": "bench-borrow"}, "command_timeout": 30.0}
    asyncpg_pool = await asyncpg.create_pool(dsn, min_size=1, max_size=MAX_SIZE, reset=_keep_session, **settings)
    lending_pool = await create_pool(dsn, min_size=1, max_size=MAX_SIZE, application_name="bench-borrow")
    pools = {"asyncpg": asyncpg_pool, "lending": lending_pool}
    print(f"{calls} calls a round, {rounds} rounds; at start: {load_line()}")
    try:
        for lanes in lane_counts:
            for pool in pools.values():
                await run(pool, 2000, lanes)  # warm: connections open, statements prepared
            spent: dict[str, list[float]] = {name: [] for name in pools}
            for r in range(rounds):
                for name in pools if r % 2 == 0 else reversed(pools):
                    spent[name].append(await run(pools[name], calls, lanes))
            old, new = (statistics.median(spent[name]) * 1e6 for name in pools)
            rounds_text = "  ".join(f"{a * 1e6:.1f}/{b * 1e6:.1f}" for a, b in zip(*spent.values(), strict=True))
            print(
                f"{lanes:>3} callers: asyncpg pool {old:6.1f} µs/call, lending pool {new:6.1f} µs/call, "
                f"lending / asyncpg = {new / old:.2f}x, {old - new:+.1f} µs saved a call  (rounds a/l: {rounds_text})"
            )
    finally:
        await asyncpg_pool.close()
        await lending_pool.close()
    print(f"at end: {load_line()}")


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20000, help="calls per round (default 20000)")
    parser.add_argument("--rounds", type=int, default=6, help="rounds per pool (default 6)")
    parser.add_argument("--lanes", default="1,8,32", help="concurrent callers, comma-separated (default 1,8,32)")
    args = parser.parse_args()
    lanes = [int(n) for n in args.lanes.split(",")]
    with embedded_data_dir() as data_dir, EmbeddedPostgres(data_dir, durable=False) as server:
        run_on(main(server.local_dsn, args.calls, args.rounds, lanes), choose_loop("uvloop"))


if __name__ == "__main__":
    cli()
