"""Pool retention: the tables stay bounded at full rate with a short retention, and pruning leaves the rate flat.

Run: .venv/bin/python bench/pool_retention.py [--minutes 10] [--retention-seconds 60] [--phase-seconds 30]
     [--clients 32] [--streams 4] [--sample-seconds 15]

Issue 23 item 3's measure. The rig of bench/pool_throughput.py (one embedded Postgres, two dispatcher processes,
four warm reference workers), its callers sharing `--streams` RunJobs streams as fast as they can for `--minutes`,
with POOL_JOB_RETENTION_HOURS set to `--retention-seconds` and POOL_PRUNE_SECONDS to 1. Metering's real ledger
(thermostat.metering.ledger: the usage and machine feeds over PoolDispatcherInternal, each read acknowledging what
it landed) runs in this process every second, as its leader does, so usage events become prunable as in production.

The run alternates phases of `--phase-seconds`: in one the bench holds the `pool:retention` lease itself (it expires
the leader's and takes it), so no dispatcher prunes; in the next it releases the lease and the dispatchers prune,
first the backlog the held phase left, then as the rows come of age. Jobs/s during pruning against without is the
ratio of the medians of the two kinds of phase, from the same run; alternating keeps other work on the shared
machine from landing on one side only.

Every `--sample-seconds` the tables' total size (heap, indexes, TOAST), live and dead tuples and autovacuum count
are read from pg_stat_user_tables. Goal: bounded, not growing: each table's live rows at most 1.5x the jobs of its
window (the retention, a held phase, the feed's settle and a pass, at the fastest phase's rate; without retention
they would be every job ever run), and its size follows the most rows it held at
once (the retention window's jobs plus the dead ones between vacuums; Postgres reuses the space vacuum frees), not the
rows ever written: its bytes per such row at the end within 1.25x those a third of the way in (the rate on a shared
machine moves, and the window's rows with it); and the pruning ratio >= 0.97.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "0")

import asyncpg  # noqa: E402
import pool_throughput as rig_of  # noqa: E402

from thermostat.chassis.event_loop import choose_loop  # noqa: E402
from thermostat.chassis.event_loop import run as run_on  # noqa: E402
from thermostat.chassis.request_context import insecure_channel  # noqa: E402
from thermostat.metering.ledger import Ledger, PoolMachineFeed, PoolUsageFeed  # noqa: E402
from thermostat.metering.repository import MeteringRepository  # noqa: E402
from thermostat.pool.v1 import pool_pb2_grpc  # noqa: E402
from thermostat.pool_dispatcher.retention import LEASE  # noqa: E402
from thermostat.store.lease import LeaseStore  # noqa: E402

INTERNAL_TOKEN = "bench-internal-token"  # noqa: S105 - a throw-away token for loopback processes
TABLES = ("pool_jobs", "pool_usage", "pool_machine_events")
HOLDER = "bench-hold"


@dataclass
class Sample:
    at: float
    phase: str
    sizes: dict[str, int]
    live: dict[str, int]
    dead: dict[str, int]
    vacuums: dict[str, int]


async def sample(conn: asyncpg.Connection, at: float, phase: str) -> Sample:
    rows = await conn.fetch(
        "SELECT relname, pg_total_relation_size(relid) AS bytes, n_live_tup, n_dead_tup,"
        " autovacuum_count + vacuum_count AS vacuums FROM pg_stat_user_tables WHERE relname = ANY($1::text[])",
        list(TABLES),
    )
    by = {r["relname"]: r for r in rows}
    return Sample(
        at=at,
        phase=phase,
        sizes={t: by[t]["bytes"] for t in TABLES},
        live={t: by[t]["n_live_tup"] for t in TABLES},
        dead={t: by[t]["n_dead_tup"] for t in TABLES},
        vacuums={t: by[t]["vacuums"] for t in TABLES},
    )


async def ledger_loop(ledger: Ledger) -> None:
    """Metering's ingest as its leader runs it: catch every feed up, then wait a poll interval (1 s)."""
    while True:
        with contextlib.suppress(Exception):
            await ledger.run_once()
        await asyncio.sleep(1)


async def hold_retention(leases: LeaseStore, conn: asyncpg.Connection, ttl: float) -> None:
    """Take the retention lease from whichever dispatcher leads (its lease expired by the database clock, its
    fenced deletes delete nothing more), so nobody prunes until it is released."""
    while True:
        await conn.execute("UPDATE leases SET expires_at = now() WHERE name = $1 AND holder <> $2", LEASE, HOLDER)
        if await leases.acquire(LEASE, HOLDER, ttl) is not None:
            return
        await asyncio.sleep(0.05)


async def release_retention(leases: LeaseStore, conn: asyncpg.Connection) -> None:
    await conn.execute(
        "UPDATE leases SET holder = NULL, expires_at = now() WHERE name = $1 AND holder = $2", LEASE, HOLDER
    )


def mb(n: int) -> str:
    return f"{n / 1e6:7.1f}"


async def main(args: argparse.Namespace) -> None:
    os.environ.update(
        {
            "POOL_JOB_RETENTION_HOURS": repr(args.retention_seconds / 3600),
            "POOL_PRUNE_SECONDS": "1",
            "THERMOSTAT_INTERNAL_TOKEN": INTERNAL_TOKEN,
        }
    )
    print(f"pool_retention: {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {rig_of.load_line()}")
    print(
        f"  {args.minutes:g} min at full rate, retention {args.retention_seconds:g} s,"
        f" phases of {args.phase_seconds:g} s alternating held (no pruning) / pruning,"
        f" {args.clients} callers on {args.streams} RunJobs streams"
    )
    async with rig_of.pool_rig(processes=2, workers=4, edge=False) as rig:
        pool = await asyncpg.create_pool(rig.dsn, min_size=2, max_size=4)
        channel = insecure_channel(f"127.0.0.1:{rig.dispatchers[0].port}", internal_token=INTERNAL_TOKEN)
        stub = pool_pb2_grpc.PoolDispatcherInternalStub(channel)
        ledger = Ledger(MeteringRepository(pool), [PoolUsageFeed(stub), PoolMachineFeed(stub)], page_size=1000)
        leases = LeaseStore(pool)
        done = 0
        stop = asyncio.Event()
        async with rig_of.stream_caller(rig, args.streams) as call, pool.acquire() as conn:

            async def lane(first: int) -> None:
                nonlocal done
                n = first
                while not stop.is_set():
                    await call(n)
                    done += 1
                    n += args.clients

            ingest = asyncio.create_task(ledger_loop(ledger))
            lanes = [asyncio.create_task(lane(i)) for i in range(args.clients)]
            started = time.monotonic()
            end = started + args.minutes * 60
            samples: list[Sample] = []
            rates: dict[str, list[float]] = {"held": [], "pruning": []}
            phase_index = 0
            next_sample = started
            print(f"\n  {'t (s)':>6} {'phase':>8} {'jobs/s':>7} " + " ".join(f"{t + ' MB':>24}" for t in TABLES))
            while time.monotonic() < end:
                phase = "held" if phase_index % 2 == 0 else "pruning"
                if phase == "held":
                    await hold_retention(leases, conn, args.phase_seconds + 60)
                else:
                    await release_retention(leases, conn)
                phase_started, phase_done = time.monotonic(), done
                phase_end = min(end, phase_started + args.phase_seconds)
                while time.monotonic() < phase_end:
                    await asyncio.sleep(min(0.5, max(0.0, phase_end - time.monotonic())))
                    if time.monotonic() >= next_sample:
                        samples.append(await sample(conn, time.monotonic() - started, phase))
                        next_sample += args.sample_seconds
                rate = (done - phase_done) / (time.monotonic() - phase_started)
                rates[phase].append(rate)
                last = await sample(conn, time.monotonic() - started, phase)
                samples.append(last)
                dead = " ".join(f"{mb(last.sizes[t])} ({last.live[t]:>7} l {last.dead[t]:>7} d)" for t in TABLES)
                print(f"  {last.at:6.0f} {phase:>8} {rate:7.0f} {dead}", flush=True)
                phase_index += 1
            stop.set()
            await asyncio.gather(*lanes, return_exceptions=True)
            ingest.cancel()
            await release_retention(leases, conn)
        await channel.close()
        await asyncio.wait_for(pool.close(), 10)

    warm = [s for s in samples if s.at >= 2 * args.phase_seconds] or samples
    third = max(1, len(warm) // 3)
    early, late = warm[third], warm[-1]
    print(
        f"\n  tables (total size incl. indexes and TOAST) at {early.at:.0f} s and at the end; the most rows they held"
        " at once (live + dead) so far; bytes per such row:"
    )
    # the most rows a table may hold live: the retention, a held phase's backlog, the usage feed's settle window and a
    # prune pass or two, at the fastest phase's rate; without retention its live rows would be every job ever run
    window = (args.retention_seconds + args.phase_seconds + 15) * max(max(r) for r in rates.values() if r)
    bounded = True
    for t in TABLES:
        most_live = max(s.live[t] for s in samples)
        bounded &= most_live <= 1.5 * window
        held_early = max(s.live[t] + s.dead[t] for s in samples if s.at <= early.at) or 1
        held_late = max(s.live[t] + s.dead[t] for s in samples) or 1
        per_early, per_late = early.sizes[t] / held_early, late.sizes[t] / held_late
        # bounded: the size follows the most rows held at once (the retention window's jobs and the dead ones between
        # vacuums: Postgres reuses freed space), not every row ever written
        bounded &= per_late <= 1.25 * per_early or late.sizes[t] < 1e6
        vacuums = samples[-1].vacuums[t] - samples[0].vacuums[t]
        print(
            f"    {t:<20} {mb(early.sizes[t])} -> {mb(late.sizes[t])} MB; at most {held_early} -> {held_late} rows;"
            f" {per_early:.0f} -> {per_late:.0f} B a row ({per_late / per_early if per_early else 1:.2f}x);"
            f" live rows at most {most_live} ({most_live / window:.2f}x the window's jobs); {vacuums} vacuums"
        )
    print(f"    ({done} jobs ran: without retention pool_jobs and pool_usage would hold a row for each, for ever)")
    held, pruning = statistics.median(rates["held"]), statistics.median(rates["pruning"] or [0.0])
    ratio = pruning / held if held else 0.0
    print(
        f"\n  jobs/s: pruning {pruning:.0f} against held {held:.0f} = {ratio:.3f}x (medians of"
        f" {len(rates['pruning'])} and {len(rates['held'])} phases; {done} jobs)"
    )
    print(f"  verdict: tables {'bounded' if bounded else 'GROWING'}; rate {'flat' if ratio >= 0.97 else 'NOT flat'}")
    print(f"  {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {rig_of.load_line()}")


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--minutes", type=float, default=10.0, help="the run's length at full rate (default 10)")
    parser.add_argument("--retention-seconds", type=float, default=60.0, help="POOL_JOB_RETENTION_HOURS, in seconds")
    parser.add_argument("--phase-seconds", type=float, default=30.0, help="each held or pruning phase")
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--streams", type=int, default=4)
    parser.add_argument("--sample-seconds", type=float, default=15.0)
    return parser.parse_args()


if __name__ == "__main__":
    arguments = parse()
    run_on(main(arguments), choose_loop("uvloop"))
