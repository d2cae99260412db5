"""Fair share at the fleet cap: how long a second tenant's one job waits behind another tenant's deep backlog.

Run: .venv/bin/python bench/pool_fairness.py [--backlog 500] [--job-seconds 0.2]

Issue 23 item 2. One pool dispatcher (in this process, real gRPC on loopback, an embedded Postgres with fsync off)
runs reference workers (`python -m thermostat.worker`, the sleep handler) through the local backend, at
POOL_MAX_WORKERS_TOTAL=2. Tenant acme queues `--backlog` jobs of `--job-seconds` each and holds both machines;
once both are busy, tenant globex submits one job and the bench times it from submit to start (the job row's
`started_at − submitted_at`, the database's clock). The bound it is held to is one of acme's job times plus one
boot: the boot measured on the globex machine itself (its `started` machine event to its job's start). Without the
rule globex would wait for the whole backlog (`backlog × job-seconds / 2`), printed beside it.

Goal: globex's wait ≤ one acme job + one boot (ratio ≤ 1.0). The load average is printed (the machine is shared).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from pool_throughput import load_line  # noqa: E402

from tests.fixtures.polling import eventually  # noqa: E402
from tests.fixtures.postgres import embedded_data_dir  # noqa: E402
from tests.integration.pool_dispatcher.conftest import pool_env, sleepy_type, start_pool  # noqa: E402
from thermostat.dev.embedded_postgres import EmbeddedPostgres  # noqa: E402
from thermostat.store.db import Store, apply_migrations  # noqa: E402

STOP_SECONDS = """
SELECT extract(epoch FROM s.at - (SELECT max(u.ended_at) FROM pool_usage u WHERE u.worker_id = s.machine_id))
FROM pool_machine_events s WHERE s.tenant_id = 'acme' AND s.event = 'stopped' ORDER BY s.position LIMIT 1
"""
"""From the retired acme machine's last job's end to its row's delete: the completion, the stop at the provider."""


async def main(dsn: str, backlog: int, job_seconds: float) -> None:
    print(f"backlog {backlog} × {job_seconds} s at a fleet cap of 2; at start: {load_line()}", flush=True)
    logging.getLogger("thermostat").setLevel(logging.ERROR)
    await apply_migrations(dsn)
    store = await Store.open(dsn, max_size=12, application_name="pool-fairness-bench")
    env = pool_env([sleepy_type(cool_down_seconds=600)], POOL_MAX_WORKERS_TOTAL="2")
    try:
        async with start_pool(store, env) as pool:
            gate = asyncio.Semaphore(32)

            async def one() -> None:
                async with gate:
                    await pool.submit(str(job_seconds).encode(), machine_type="sleepy", tenant="acme")

            await asyncio.gather(*(one() for _ in range(backlog)))

            async def both_busy() -> bool | None:
                busy = await store.pool.fetchval("SELECT count(*) FROM pool_machines WHERE state = 'busy'")
                return True if busy == 2 else None

            await eventually(both_busy, timeout=120, every=0.05)
            waiting = await pool.submit(b"0", machine_type="sleepy", tenant="globex")
            done = await pool.finished(waiting.id, "globex", timeout=600)
            row = await store.pool.fetchrow(
                "SELECT extract(epoch FROM started_at - submitted_at) AS waited, started_at FROM pool_jobs"
                " WHERE id = $1",
                uuid.UUID(waiting.id),
            )
            booted = await store.pool.fetchval(
                "SELECT extract(epoch FROM $2::timestamptz - at) FROM pool_machine_events"
                " WHERE machine_id = $1 AND event = 'started'",
                uuid.UUID(done.worker_id),
                row["started_at"],
            )
            stop = await store.pool.fetchval(STOP_SECONDS)
            left = await store.pool.fetchval(
                "SELECT count(*) FROM pool_jobs WHERE tenant_id = 'acme' AND state = 'queued'"
            )
            bound, waited, stopped = job_seconds + float(booted), float(row["waited"]), float(stop)
            print(
                f"globex waited {waited:.2f} s; bound: one acme job {job_seconds} s + its boot {float(booted):.2f} s ="
                f" {bound:.2f} s, so {waited / bound:.2f}× the bound; the retired machine's provider stop took"
                f" {stopped:.2f} s (the cap counts it until then): {waited / (bound + stopped):.2f}× bound + stop;"
                f" without fair share ≈ {backlog * job_seconds / 2:.0f} s ({left} acme jobs still queued when it"
                f" started); at end: {load_line()}",
                flush=True,
            )
    finally:
        await store.close()


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backlog", type=int, default=500, help="acme's queued jobs (default 500)")
    parser.add_argument("--job-seconds", type=float, default=0.2, help="each acme job's sleep (default 0.2)")
    args = parser.parse_args()
    with embedded_data_dir() as data_dir, EmbeddedPostgres(data_dir, durable=False) as server:
        asyncio.run(main(server.local_dsn, args.backlog, args.job_seconds))


if __name__ == "__main__":
    cli()
