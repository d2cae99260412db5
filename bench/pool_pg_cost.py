"""Postgres CPU per pool job: the dispatcher's two hot statements (submit, complete) alone, on two schemas in one run.

Run: .venv/bin/python bench/pool_pg_cost.py [--before 15] [--jobs 3000] [--rounds 4]

One embedded Postgres (fsync off, as bench/pool_throughput.py's) holding two databases: one migrated through
migration `--before` (the schema as it stood then), one fully migrated (as shipped). In each, four warm machines
of one process and a queue in front of them (32 jobs submitted first), then a steady state driven serially over
the repository's own statements: a machine's job completes (its usage event, the next queued job handed over,
sent at once) and a new job is submitted (it queues behind the others), as bench/pool_throughput.py's 32 callers
on four workers do. Every other submit names another process's channel, so every other completion NOTIFYs one
listener, as with two dispatchers.

Rounds alternate between the two databases (the first one swapping each round); each measures the whole server's
CPU (every Postgres process: the backends, the listener, the WAL writer, autovacuum) per job. Serial calls on an
otherwise idle server measure the statements without the contention of the full bench, whose Postgres column
moves as much with the load on this shared machine as with a change: a schema change is judged here, then seen
(or not) in the full bench.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]

import asyncpg  # noqa: E402
import psutil  # noqa: E402

from tests.fixtures.postgres import database_dsn, embedded_data_dir  # noqa: E402
from thermostat.dev.embedded_postgres import EmbeddedPostgres  # noqa: E402
from thermostat.pool_dispatcher.repository import (  # noqa: E402
    CompletionWrite,
    Owner,
    PoolRepository,
    QueuedSubmit,
    SubmitWrite,
)
from thermostat.store.db import create_pool  # noqa: E402
from thermostat.store.migrations import discover_migrations, migrate  # noqa: E402

ME = Owner("bench-a", 1)
MACHINES = 4
QUEUED = 32
WARMUP = 500


def server_cpu(pid: int) -> float:
    """CPU seconds (user + system) of the postmaster and every process under it."""
    total = 0.0
    root = psutil.Process(pid)
    for process in [root, *root.children(recursive=True)]:
        try:
            times = process.cpu_times()
        except psutil.Error:  # a backend that ended meanwhile
            continue
        total += times.user + times.system
    return total


class SteadyState:
    """Four busy machines of this process and a queue in front of them, on one database."""

    def __init__(self, pool: asyncpg.Pool, listener: asyncpg.Connection) -> None:
        self.repo = PoolRepository(pool)
        self.pool = pool
        self.listener = listener
        self.machines = [str(uuid.uuid4()) for _ in range(MACHINES)]
        self.running: dict[str, str] = {}  # machine -> its job
        self.submitted = 0
        self.free: asyncio.Queue[str] = asyncio.Queue()
        for machine in self.machines:
            self.free.put_nowait(machine)

    async def start(self) -> None:
        await self.listener.add_listener("bench-b", lambda *_: None)
        for machine in self.machines:
            await self.pool.execute(
                "INSERT INTO pool_machines (id, tenant_id, machine_type, image, backend, token, state, owner,"
                " owner_term, cool_down_seconds, endpoint) VALUES ($1, 'bench', 'echo', 'img', 'local', 'tok',"
                " 'warm', $2, $3, 60, 'http://127.0.0.1:1')",
                uuid.UUID(machine),
                ME.instance,
                ME.term,
            )
        for _ in range(QUEUED):
            await self.submit()

    async def submit(self) -> None:
        self.submitted += 1
        n = self.submitted
        done = await self.repo.jobs.submit(
            SubmitWrite(
                job_id=str(uuid.uuid4()),
                tenant_id="bench",
                machine_type="echo",
                image="img",
                priority=0,
                session_id=None,
                timeout_seconds=60.0,
                payload=f'{{"job": {n}}}'.encode(),
                owner=ME,
                trace={},
                send_now=True,
                done_channel="bench-b" if n % 2 else "bench-a",
            )
        )
        if done.assignment is not None:
            self.running[done.assignment.machine_id] = done.assignment.job_id

    async def job(self) -> None:
        """One machine's job completes (handing it the next) and one job is submitted."""
        await self.complete_one()
        await self.submit()

    async def batch(self, jobs: int) -> None:
        """A batch's statements: `jobs` queued by one statement (submit_queued, as a batch submit writes them),
        then as many completions, each handing its machine the next queued job."""
        payloads = []
        for _ in range(jobs):
            self.submitted += 1
            payloads.append(f'{{"job": {self.submitted}}}'.encode())
        queued = [
            QueuedSubmit(
                job_id=str(uuid.uuid4()), priority=0, session_id=None, timeout_seconds=60.0, payload=payload,
                trace={}, done_channel="bench-b",
            )
            for payload in payloads
        ]  # fmt: skip
        await self.repo.jobs.submit_queued("bench", "echo", queued)
        for _ in range(jobs):
            await self.complete_one()

    async def complete_one(self) -> None:
        # a free machine, so callers that overlap (an open loop) never complete one machine's job twice
        machine = await self.free.get()
        try:
            completion = await self.repo.jobs.complete(
                CompletionWrite(
                    job_id=self.running.pop(machine),
                    machine_id=machine,
                    state="completed",
                    result=b'{"job": 0}',
                    error=None,
                    duration_seconds=0.001,
                    owner=ME,
                    retire=False,
                    take_next=True,
                    send_next=True,
                    tenant_id="bench",
                    machine_type="echo",
                    notified_result_bytes=4096,
                    channel="bench-a",
                )
            )
            if completion.next_job is not None:
                self.running[machine] = completion.next_job.job_id
        finally:
            self.free.put_nowait(machine)


async def database(admin: asyncpg.Connection, dsn: str, name: str, through: int | None) -> str:
    await admin.execute(f'CREATE DATABASE "{name}"')
    url = database_dsn(dsn, name)
    connection = await asyncpg.connect(url)
    try:
        await migrate(connection, [m for m in discover_migrations() if through is None or m.version <= through])
    finally:
        await connection.close()
    return url


async def main(before: int, jobs: int, rounds: int) -> None:
    latest = discover_migrations()[-1].version
    names = {f"through {before:04d}": before, f"as shipped ({latest:04d})": None}
    with embedded_data_dir() as data_dir, EmbeddedPostgres(data_dir, durable=False) as server:
        admin = await asyncpg.connect(server.local_dsn)
        states: dict[str, SteadyState] = {}
        closers = []
        try:
            for i, (label, through) in enumerate(names.items()):
                url = await database(admin, server.local_dsn, f"cost{i}", through)
                pool = await create_pool(url, min_size=1, max_size=2)
                listener = await asyncpg.connect(url)
                closers += [pool.close, listener.close]
                states[label] = SteadyState(pool, listener)
                await states[label].start()
                for _ in range(WARMUP):
                    await states[label].job()
            cpu: dict[str, list[float]] = {label: [] for label in states}
            order = list(states)
            for r in range(rounds):
                for label in order[r % 2 :] + order[: r % 2]:
                    before_cpu = server_cpu(server.pid or 0)
                    for _ in range(jobs):
                        await states[label].job()
                    cpu[label].append((server_cpu(server.pid or 0) - before_cpu) / jobs * 1e6)
        finally:
            for close in closers:
                await close()
            await admin.close()
    load = psutil.getloadavg()[0]
    print(f"Postgres CPU per job, µs ({jobs} jobs a round, {rounds} rounds alternating; load average {load:.1f})")
    base = statistics.median(cpu[order[0]])
    for label, values in cpu.items():
        median = statistics.median(values)
        spread = " ".join(f"{v:.0f}" for v in values)
        print(f"  {label:<24}{median:>6.0f}  ({median / base:.2f}x)   rounds: {spread}")


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=int, default=15, help="the earlier schema: migrations through this one")
    parser.add_argument("--jobs", type=int, default=3000, help="jobs per round (default 3000)")
    parser.add_argument("--rounds", type=int, default=4, help="rounds per schema, alternating (default 4)")
    args = parser.parse_args()
    asyncio.run(main(args.before, args.jobs, args.rounds))


if __name__ == "__main__":
    cli()
