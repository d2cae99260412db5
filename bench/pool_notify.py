"""What a completion's NOTIFY costs, and how many the gRPC sync path sends per job.

Run: .venv/bin/python bench/pool_notify.py [--jobs 3000] [--rounds 3] [--rig-jobs 1500]

Part 1, in one embedded Postgres (fsync off): the pool's own submit and complete statements back to back on one
connection (each job claimed by the one warm machine row and completed), while a child process holds two
listening connections as two dispatcher processes do (each on `pool_jobs_done` and its instance's channel, the
payload parsed as the dispatcher parses it). Three ways a completion can notify: to every process's
`pool_jobs_done` (how every completion notified before), to one instance's channel (a sync wait in another
process), and not at all (the runner's own wait). Columns: CPU µs per job of the completing backend, of the two
listening backends together, and of the listening process (Python); the last column is the first three summed,
as a ratio to "not at all". Rounds interleave the three, so drift hits them alike.

Part 2, bench/pool_throughput.py's rig (two dispatcher processes, four warm workers, 32 callers, gRPC
SubmitJobSync spread over both): notifications per job on each channel, heard by a listener of the bench's own.
Together: the store and listener CPU a job's notifications cost is part 1's per-notification figures times part
2's counts. Bounded: about a minute.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

import asyncpg  # noqa: E402
import pool_throughput as throughput  # noqa: E402
import psutil  # noqa: E402

from tests.fixtures.postgres import embedded_data_dir  # noqa: E402
from thermostat.dev.embedded_postgres import EmbeddedPostgres  # noqa: E402
from thermostat.pool_dispatcher.repository import (  # noqa: E402
    JOBS_DONE,
    CompletionWrite,
    Owner,
    PoolRepository,
    SubmitWrite,
    job_done_channel,
    parse_job_done,
)
from thermostat.store.db import apply_migrations  # noqa: E402

ME = Owner("bench-me", 1)
LISTENERS = ("bench-a", "bench-b")
WAYS = {
    "every process (before)": JOBS_DONE,
    "one instance's channel": job_done_channel(LISTENERS[0]),
    "not at all (own wait)": None,
}


def cpu(pids: list[int]) -> float:
    return sum(sum(psutil.Process(pid).cpu_times()[:2]) for pid in pids)


async def listen_forever(dsn: str) -> None:
    """The child: one connection per listener instance, as each dispatcher process holds one."""
    connections = []
    for instance in LISTENERS:
        connection = await asyncpg.connect(dsn)
        for channel in (JOBS_DONE, job_done_channel(instance)):
            await connection.add_listener(channel, lambda _c, _p, _ch, payload: parse_job_done(payload))
        connections.append(connection)
    print("listening", flush=True)
    await asyncio.sleep(3600)


async def one_way(dsn: str, jobs: int, done_channel: str | None) -> tuple[float, float, float]:
    """CPU µs per job: the completing backend, the listening backends, the listening process."""
    child = await asyncio.create_subprocess_exec(
        sys.executable, __file__, "--listen", dsn, stdout=asyncio.subprocess.PIPE
    )
    assert child.stdout is not None
    await child.stdout.readline()
    pool = await asyncpg.create_pool(dsn, min_size=1, max_size=1)
    repo = PoolRepository(pool)
    try:
        async with pool.acquire() as c:
            backend = await c.fetchval("SELECT pg_backend_pid()")
            listening = [r["pid"] for r in await c.fetch("SELECT pid FROM pg_stat_activity WHERE query LIKE 'LISTEN%'")]
            await c.execute("DELETE FROM pool_machines")
            machine = uuid.uuid4()
            await c.execute(
                "INSERT INTO pool_machines (id, tenant_id, machine_type, image, backend, token, state, owner, "
                "owner_term, cool_down_seconds, endpoint) "
                "VALUES ($1, 't', 'small', 'img', 'local', 'tok', 'warm', $2, $3, 60, 'http://127.0.0.1:1')",
                machine,
                ME.instance,
                ME.term,
            )

        async def job() -> None:
            job_id = str(uuid.uuid4())
            await repo.jobs.submit(
                SubmitWrite(
                    job_id=job_id,
                    tenant_id="t",
                    machine_type="small",
                    image="img",
                    priority=0,
                    session_id=None,
                    timeout_seconds=60,
                    payload=b'{"job": 1}',
                    owner=ME,
                    trace={},
                    send_now=True,
                    done_channel=done_channel,
                )
            )
            await repo.jobs.complete(
                CompletionWrite(
                    job_id=job_id,
                    machine_id=str(machine),
                    state="completed",
                    result=b'{"job": 1}',
                    error=None,
                    duration_seconds=0.001,
                    owner=ME,
                    retire=False,
                    take_next=True,
                    send_next=True,
                    tenant_id="t",
                    machine_type="small",
                    notified_result_bytes=2048,
                    channel=job_done_channel(ME.instance),
                )
            )

        for _ in range(200):
            await job()
        await asyncio.sleep(0.3)  # the listeners caught up
        before = cpu([backend]), cpu(listening), cpu([child.pid])
        for _ in range(jobs):
            await job()
        await asyncio.sleep(0.3)
        after = cpu([backend]), cpu(listening), cpu([child.pid])
        return tuple((a - b) / jobs * 1e6 for a, b in zip(after, before, strict=True))  # type: ignore[return-value]
    finally:
        await pool.close()
        child.kill()
        await child.wait()


async def per_notification(jobs: int, rounds: int) -> None:
    with embedded_data_dir() as data_dir, EmbeddedPostgres(data_dir, durable=False) as server:
        await apply_migrations(server.local_dsn)
        spent: dict[str, list[tuple[float, float, float]]] = {way: [] for way in WAYS}
        for r in range(rounds):
            for way in WAYS if r % 2 == 0 else reversed(WAYS):
                spent[way].append(await one_way(server.local_dsn, jobs, WAYS[way]))
    print(
        f"\n{'a completion notifies':<26}{'backend':>10}{'listening backends':>20}{'listening process':>19}{'sum':>8}"
    )
    floor = sum(statistics.median(s[i] for s in spent["not at all (own wait)"]) for i in range(3))
    for way, samples in spent.items():
        medians = [statistics.median(s[i] for s in samples) for i in range(3)]
        total = sum(medians)
        print(f"{way:<26}" + "".join(f"{m:>{w}.0f}" for m, w in zip(medians, (10, 20, 19), strict=True)), end="")
        print(f"{total:>8.0f}  {total / floor:.2f}x")


async def per_job(jobs: int) -> None:
    async with throughput.pool_rig(processes=2, workers=4, edge=False) as rig:
        counts: dict[str, int] = {}
        connection = await asyncpg.connect(rig.dsn)
        names = {JOBS_DONE: JOBS_DONE, **{job_done_channel(d.name): f"{d.name}'s channel" for d in rig.dispatchers}}
        for channel in names:
            await connection.add_listener(
                channel, lambda _c, _p, ch, _pl: counts.__setitem__(ch, counts.get(ch, 0) + 1)
            )
        call = throughput.grpc_caller(rig)
        await throughput.run_lanes(call, 0, throughput.WARMUP, 32)
        counts.clear()
        await throughput.run_lanes(call, throughput.WARMUP, jobs, 32)
        await asyncio.sleep(0.5)
        await connection.close()
    print(f"\ngRPC SubmitJobSync, 2 processes, 32 callers, {jobs} jobs: notifications per job by channel")
    for channel, name in names.items():
        print(f"  {name:<28}{counts.get(channel, 0) / jobs:.3f}")


def cli() -> None:
    if sys.argv[1:2] == ["--listen"]:
        asyncio.run(listen_forever(sys.argv[2]))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=3000, help="jobs per round of part 1 (default 3000)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of part 1 (default 3)")
    parser.add_argument("--rig-jobs", type=int, default=1500, help="jobs of part 2 (default 1500)")
    args = parser.parse_args()
    print(f"at start: {throughput.load_line()}")
    asyncio.run(per_notification(args.jobs, args.rounds))
    asyncio.run(per_job(args.rig_jobs))
    print(f"at end: {throughput.load_line()}")


if __name__ == "__main__":
    cli()
