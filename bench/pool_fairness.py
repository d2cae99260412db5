"""Fair share at the fleet cap: how long light tenants wait behind heavy backlogs, with rotation and without.

Run: .venv/bin/python bench/pool_fairness.py [--only N]

Issue 35 item 1 (and issue 23 item 2 before it). One pool dispatcher (in this process, real gRPC on loopback, an
embedded Postgres with fsync off, a fresh database per run) runs reference workers (`python -m thermostat.worker`,
the sleep handler) through the local backend. Each case, twice in one run of this script:

  rotation  the type's `min_tenure_seconds` unset: its measured boot (thermostat.policy.pool.rotation)
  today     `min_tenure_seconds` 86400: no holder's tenure ends within the run, so no rotation: the rule before it

The heavy tenants queue their backlogs and hold every slot (each has a busy machine), then the light tenants submit
one job each, in turn. For each light tenant: its wait (its job row's `started_at − submitted_at`, the database's
clock) and its bound, its place in line × (tenure + the longest job + one boot), where tenure is the measured boot
(as the rule has it unset) and one boot is the mean, over the run's machines, of a machine's `started` event to its
first job's start. Printed per case and rule: the light tenants' worst wait, the worst wait-to-bound ratio among
them with that tenant's bound, and the boots per job (machines started over jobs run). Every job is checked to have
run exactly once (one usage event each).

Goal: with rotation, every light tenant's wait ≤ its bound (ratio ≤ 1.0), at the price of a few more boots per job.
The load average is printed (the machine is shared). Bounded: about a minute and a half at the defaults.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

import asyncpg  # noqa: E402
from pool_throughput import load_line  # noqa: E402

from tests.fixtures.polling import eventually  # noqa: E402
from tests.fixtures.postgres import embedded_data_dir  # noqa: E402
from tests.integration.pool_dispatcher.conftest import RunningPool, pool_env, sleepy_type, start_pool  # noqa: E402
from thermostat.dev.embedded_postgres import EmbeddedPostgres  # noqa: E402
from thermostat.store.db import Store, apply_migrations  # noqa: E402

NO_ROTATION_SECONDS = 86_400.0


@dataclass(frozen=True, slots=True, kw_only=True)
class Case:
    name: str
    cap: int
    heavy: tuple[str, ...]  # tenants with a backlog, queued one after the other
    backlog: int  # jobs each
    job_seconds: float
    lights: int  # light tenants, one job each, in turn


CASES = (
    Case(name="cap 1, two tenants (the incident)", cap=1, heavy=("heavy",), backlog=15, job_seconds=1.0, lights=1),
    Case(name="cap 2, three tenants", cap=2, heavy=("acme", "globex"), backlog=12, job_seconds=0.5, lights=1),
    Case(name="cap 1, one heavy, ten light", cap=1, heavy=("heavy",), backlog=12, job_seconds=0.5, lights=10),
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Outcome:
    worst_wait: float
    worst_bound: float  # the bound of the light tenant with the worst ratio
    worst_ratio: float
    boots: int
    jobs: int
    boot: float
    longest: float
    seconds: float


BOOT_TO_FIRST_JOB = """
SELECT avg(extract(epoch FROM first.started - e.at))::float8
FROM pool_machine_events e
JOIN LATERAL (SELECT min(started_at) AS started FROM pool_jobs j WHERE j.worker_id = e.machine_id) first ON true
WHERE e.event = 'started' AND first.started IS NOT NULL
"""


async def busy_tenants(store: Store, tenants: tuple[str, ...]) -> None:
    async def holding() -> bool | None:
        rows = await store.pool.fetch(
            "SELECT DISTINCT tenant_id FROM pool_machines WHERE state = 'busy' AND tenant_id = ANY($1::text[])",
            list(tenants),
        )
        return True if len(rows) == len(tenants) else None

    await eventually(holding, timeout=120, every=0.02)


async def submit(pool: RunningPool, tenant: str, seconds: float, count: int) -> list[str]:
    return [(await pool.submit(str(seconds).encode(), machine_type="sleepy", tenant=tenant)).id for _ in range(count)]


async def one_run(dsn: str, case: Case, tenure: float | None) -> Outcome:
    began = time.monotonic()
    await apply_migrations(dsn)
    store = await Store.open(dsn, max_size=12, application_name="pool-fairness-bench")
    kind = sleepy_type(cool_down_seconds=600, **({} if tenure is None else {"min_tenure_seconds": tenure}))
    env = pool_env([kind], POOL_MAX_WORKERS_TOTAL=str(case.cap))
    try:
        async with start_pool(store, env) as pool:
            jobs: list[str] = []
            for tenant in case.heavy:
                jobs += await submit(pool, tenant, case.job_seconds, case.backlog)
            await busy_tenants(store, case.heavy)  # every slot held by a backlog
            lights = [(await submit(pool, f"light{i}", 0, 1))[0] for i in range(case.lights)]
            jobs += lights

            async def all_done() -> bool | None:
                left = await store.pool.fetchval(
                    "SELECT count(*) FROM pool_jobs WHERE state IN ('queued', 'dispatched', 'running')"
                )
                return True if left == 0 else None

            await eventually(all_done, timeout=600, every=0.1)
            return await measure(store, lights, jobs, time.monotonic() - began)
    finally:
        await store.close()


async def measure(store: Store, lights: list[str], jobs: list[str], seconds: float) -> Outcome:
    ids = [uuid.UUID(j) for j in jobs]
    once = await store.pool.fetchval(
        "SELECT count(*) FROM (SELECT job_id FROM pool_usage WHERE job_id = ANY($1::uuid[]) GROUP BY job_id"
        " HAVING count(*) = 1) o",
        ids,
    )
    completed = await store.pool.fetchval(
        "SELECT count(*) FROM pool_jobs WHERE id = ANY($1::uuid[]) AND state = 'completed'", ids
    )
    assert once == completed == len(jobs), f"{completed} of {len(jobs)} completed, {once} with one usage event"
    boot = float(await store.pool.fetchval(BOOT_TO_FIRST_JOB))
    longest = float(await store.pool.fetchval("SELECT max(duration_seconds) FROM pool_usage"))
    boots = await store.pool.fetchval("SELECT count(*) FROM pool_machine_events WHERE event = 'started'")
    waits = {
        str(r["id"]): float(r["waited"])
        for r in await store.pool.fetch(
            "SELECT id, extract(epoch FROM started_at - submitted_at)::float8 AS waited FROM pool_jobs"
            " WHERE id = ANY($1::uuid[])",
            [uuid.UUID(j) for j in lights],
        )
    }
    tenure = boot  # unset min_tenure_seconds: the type's measured boot
    rows = [(waits[job], place * (tenure + longest + boot)) for place, job in enumerate(lights, start=1)]
    wait, bound = max(rows, key=lambda row: row[0] / row[1])
    return Outcome(
        worst_wait=max(w for w, _ in rows),
        worst_bound=bound,
        worst_ratio=wait / bound,
        boots=boots,
        jobs=len(jobs),
        boot=boot,
        longest=longest,
        seconds=seconds,
    )


async def main(dsn: str, cases: list[tuple[int, Case]]) -> None:
    print(f"at start: {load_line()}", flush=True)
    logging.getLogger("thermostat").setLevel(logging.ERROR)
    admin = await asyncpg.connect(dsn)
    try:
        for number, case in cases:
            print(
                f"\n{case.name}: {', '.join(case.heavy)} queue {case.backlog} × {case.job_seconds} s each, then"
                f" {case.lights} light tenant(s) one job each",
                flush=True,
            )
            for rule, tenure in (("rotation", None), ("today", NO_ROTATION_SECONDS)):
                database = f"fairness_{number}_{rule}"
                await admin.execute(f'CREATE DATABASE "{database}"')
                outcome = await one_run(_with_database(dsn, database), case, tenure)
                print(
                    f"  {rule:<8}  light worst wait {outcome.worst_wait:6.2f} s; worst against its bound"
                    f" {outcome.worst_ratio:5.2f}× (bound {outcome.worst_bound:.2f} s = place × (tenure"
                    f" {outcome.boot:.2f} + job {outcome.longest:.2f} + boot {outcome.boot:.2f}));"
                    f" boots per job {outcome.boots}/{outcome.jobs} = {outcome.boots / outcome.jobs:.2f};"
                    f" run {outcome.seconds:.0f} s",
                    flush=True,
                )
    finally:
        await admin.close()
    print(f"\nat end: {load_line()}", flush=True)


def _with_database(dsn: str, database: str) -> str:
    """The same server's DSN naming another database (the path of a `postgresql://…/name?…` URL)."""
    base, _, query = dsn.partition("?")
    root = base.rsplit("/", 1)[0]
    return f"{root}/{database}" + (f"?{query}" if query else "")


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", type=int, choices=range(1, len(CASES) + 1), help="run one case (1-based)")
    args = parser.parse_args()
    cases = [(n, case) for n, case in enumerate(CASES, start=1) if args.only in (None, n)]
    with embedded_data_dir() as data_dir, EmbeddedPostgres(data_dir, durable=False) as server:
        asyncio.run(main(server.local_dsn, cases))


if __name__ == "__main__":
    cli()
