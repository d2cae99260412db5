"""Calibration for the pool dispatcher: how fast can a bare job loop go on this machine?

Run: .venv/bin/python bench/pool_calibration.py [--jobs 1000] [--concurrency 1,8,32]

The loop of issue 10's Measures, in one process: per job, four SQL statements over asyncpg against an
embedded Postgres (insert the job, claim it with FOR UPDATE SKIP LOCKED, complete it, insert its usage
event) and one HTTP call to a local reference worker (`python -m thermostat.worker`, echo handler, started
through the pool's LocalBackend). The HTTP call is made with the pool's WorkerClient (its lean HTTP/1.1
client, providers/pool/http1.py) and, for comparison, with aiohttp's client (what WorkerClient used before:
one ClientSession, kept alive, no Content-Type) and httpx's AsyncClient. Columns, jobs (or requests) per
second, and for the bare calls this process's CPU per call in µs (the worker runs in its own process):

  loop           the whole loop, the worker hop through WorkerClient
  loop httpx     the whole loop, the worker hop through httpx.AsyncClient (one client, kept alive)
  sql only       the four statements, no HTTP call: the store's share of the loop
  http lean      the worker call alone, WorkerClient
  http aiohttp   the worker call alone, aiohttp
  http httpx     the worker call alone, httpx

Later designs (a claim that inserts and hands over in one statement, the terminal state and the usage
event in one, batching) print their own figures beside these. The tables live in a scratch database that
is dropped at the end; the durability settings are a test cluster's (fsync off), so judge ratios, not
absolutes. Every number includes this machine's noise (two shared cores run Postgres, the worker and this
process). Bounded: well under a minute at the defaults.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]

import aiohttp  # noqa: E402
import asyncpg  # noqa: E402
import httpx  # noqa: E402

from tests.fixtures.postgres import database_dsn, embedded_data_dir  # noqa: E402
from thermostat.dev.embedded_postgres import EmbeddedPostgres  # noqa: E402
from thermostat.policy.pool.job_outcome import ReplyKind  # noqa: E402
from thermostat.policy.pool.machine_type import MachineType  # noqa: E402
from thermostat.providers.pool.backend import MachineHandle, MachineSpec  # noqa: E402
from thermostat.providers.pool.local import LocalBackend  # noqa: E402
from thermostat.providers.pool.worker_client import WorkerClient  # noqa: E402

SCRATCH = "pool_calibration"
TOKEN = "calibration-token"  # noqa: S105 - a throw-away token for a loopback worker
PAYLOAD = b'{"cell": "x = 1"}'

SCHEMA = """
CREATE TABLE jobs (
    id bigserial PRIMARY KEY,
    tenant_id text NOT NULL,
    state text NOT NULL,
    priority bigint NOT NULL DEFAULT 0,
    payload bytea NOT NULL,
    result bytea,
    worker_id text,
    submitted_at timestamptz NOT NULL DEFAULT now(),
    completed_at timestamptz
);
CREATE INDEX jobs_queue ON jobs (priority DESC, id) WHERE state = 'queued';
CREATE TABLE usage_events (
    id bigserial PRIMARY KEY,
    job_id bigint NOT NULL,
    tenant_id text NOT NULL,
    duration_seconds double precision NOT NULL,
    terminal_state text NOT NULL
);
"""
INSERT = "INSERT INTO jobs (tenant_id, state, payload) VALUES ($1, 'queued', $2) RETURNING id"
CLAIM = """
UPDATE jobs SET state = 'running', worker_id = $1
WHERE id = (SELECT id FROM jobs WHERE state = 'queued' ORDER BY priority DESC, id FOR UPDATE SKIP LOCKED LIMIT 1)
RETURNING id, payload
"""
COMPLETE = "UPDATE jobs SET state = 'completed', result = $2, completed_at = now() WHERE id = $1"
COMPLETE_NOTIFY = COMPLETE + " RETURNING pg_notify('calibration_done', id::text)"
"""The completion as the pool's complete statement ends it: a NOTIFY to every listening process."""
USAGE = "INSERT INTO usage_events (job_id, tenant_id, duration_seconds, terminal_state) VALUES ($1, $2, $3, $4)"

Call = Callable[[bytes], Awaitable[bytes]]


async def run_loop(
    pool: asyncpg.Pool, call: Call | None, jobs: int, concurrency: int, *, complete: str = COMPLETE
) -> float:
    """Jobs per second of the four-statement loop, with `call` as the worker hop (None: no hop)."""
    remaining = jobs

    async def lane() -> None:
        nonlocal remaining
        async with pool.acquire() as connection:
            while remaining > 0:
                remaining -= 1
                await connection.fetchval(INSERT, "acme", PAYLOAD)
                claimed = None
                while claimed is None:  # every lane inserts one and claims one; another lane may hold ours
                    claimed = await connection.fetchrow(CLAIM, "machine-1")
                started = time.monotonic()
                result = await call(claimed["payload"]) if call is not None else b""
                await connection.execute(complete, claimed["id"], result)
                await connection.execute(USAGE, claimed["id"], "acme", time.monotonic() - started, "completed")

    started = time.perf_counter()
    await asyncio.gather(*(lane() for _ in range(concurrency)))
    return jobs / (time.perf_counter() - started)


async def run_http(call: Call, requests: int, concurrency: int) -> tuple[float, float]:
    """Requests per second of the bare call, and this process's CPU per call in µs."""
    remaining = requests

    async def lane() -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            await call(PAYLOAD)

    started, cpu = time.perf_counter(), time.process_time()
    await asyncio.gather(*(lane() for _ in range(concurrency)))
    return requests / (time.perf_counter() - started), (time.process_time() - cpu) * 1e6 / requests


async def boot_worker(backend: LocalBackend) -> MachineHandle:
    kind = MachineType(name="calibration", image=f"{sys.executable} -m thermostat.worker")
    handle = await backend.start(MachineSpec(machine_id="m1", tenant_id="acme", machine_type=kind, worker_token=TOKEN))
    for _ in range(400):
        if await backend.health(handle):
            return handle
        await asyncio.sleep(0.05)
    raise SystemExit("the reference worker did not answer /health within 20 s")


async def main(dsn: str, jobs: int, concurrencies: list[int]) -> None:
    admin = await asyncpg.connect(dsn)
    await admin.execute(f"DROP DATABASE IF EXISTS {SCRATCH} WITH (FORCE)")
    await admin.execute(f"CREATE DATABASE {SCRATCH}")
    scratch_dsn = database_dsn(dsn, SCRATCH)
    client = WorkerClient()
    backend = LocalBackend(client)
    try:
        handle = await boot_worker(backend)
        url = handle.endpoint

        async def via_client(payload: bytes) -> bytes:
            reply = await client.execute(url, TOKEN, payload, deadline_seconds=30)
            if reply.kind is not ReplyKind.ANSWERED or reply.status != 200:
                raise SystemExit(f"the worker call failed: {reply.kind} {reply.status} {reply.error}")
            return reply.body

        headers = {"Authorization": f"Bearer {TOKEN}"}
        connector = aiohttp.TCPConnector(limit=0, limit_per_host=0, keepalive_timeout=30)
        async with (
            httpx.AsyncClient(limits=httpx.Limits(max_connections=None, max_keepalive_connections=None)) as http,
            aiohttp.ClientSession(connector=connector, auto_decompress=False) as session,
        ):

            async def via_httpx(payload: bytes) -> bytes:
                response = await http.post(f"{url}/execute", content=payload, headers=headers, timeout=30)
                if response.status_code != 200:
                    raise SystemExit(f"the worker call failed: HTTP {response.status_code}")
                return response.content

            async def via_aiohttp(payload: bytes) -> bytes:
                async with (
                    asyncio.timeout(30),
                    session.post(
                        f"{url}/execute", data=payload, headers=headers, skip_auto_headers=("Content-Type",)
                    ) as response,
                ):
                    if response.status != 200:
                        raise SystemExit(f"the worker call failed: HTTP {response.status}")
                    return await response.read()

            pool = await asyncpg.create_pool(scratch_dsn, min_size=max(concurrencies), max_size=max(concurrencies))
            try:
                async with pool.acquire() as connection:
                    await connection.execute(SCHEMA)
                await run_loop(pool, via_client, min(jobs, 200), 4)  # warm connections and caches
                for call in (via_aiohttp, via_httpx):
                    await run_http(call, min(jobs, 200), 4)
                print(
                    f"{jobs} jobs per cell; jobs (or requests) per second, CPU µs per call; one run on this machine\n"
                )
                print(
                    f"{'lanes':>6} {'loop':>6} {'loop httpx':>11} {'sql only':>9} {'http lean':>10} {'µs':>5} "
                    f"{'http aiohttp':>13} {'µs':>5} {'http httpx':>11} {'µs':>5} {'lean/aiohttp':>13}"
                )
                for lanes in concurrencies:
                    loop = await run_loop(pool, via_client, jobs, lanes)
                    loop_h = await run_loop(pool, via_httpx, jobs, lanes)
                    sql = await run_loop(pool, None, jobs, lanes)
                    lean, lean_cpu = await run_http(via_client, jobs, lanes)
                    aio, aio_cpu = await run_http(via_aiohttp, jobs, lanes)
                    htx, htx_cpu = await run_http(via_httpx, jobs, lanes)
                    print(
                        f"{lanes:>6} {loop:>6.0f} {loop_h:>11.0f} {sql:>9.0f} {lean:>10.0f} {lean_cpu:>5.0f} "
                        f"{aio:>13.0f} {aio_cpu:>5.0f} {htx:>11.0f} {htx_cpu:>5.0f} {lean / aio:>12.2f}x"
                    )
            finally:
                await pool.close()
    finally:
        await backend.aclose()
        await client.aclose()
        await admin.execute(f"DROP DATABASE IF EXISTS {SCRATCH} WITH (FORCE)")
        await admin.close()


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1000, help="jobs per cell (default 1000)")
    parser.add_argument("--concurrency", default="1,8,32", help="comma-separated lane counts (default 1,8,32)")
    args = parser.parse_args()
    concurrencies = [int(part) for part in args.concurrency.split(",") if part.strip()]
    with embedded_data_dir() as data_dir, EmbeddedPostgres(data_dir, durable=False) as server:
        asyncio.run(main(server.local_dsn, args.jobs, concurrencies))


if __name__ == "__main__":
    cli()
