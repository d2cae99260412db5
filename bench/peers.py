"""Peers: the pool against the queues users would pick instead (pgqueuer, procrastinate), side by side in one run.

Run: .venv/bin/python bench/peers.py [--jobs 1500] [--rounds 3] [--clients 32] [--rate 200] [--open-jobs 1200]
     (`make bench` installs bench/requirements-peers.txt into .venv first; never in the image)

One embedded Postgres (fsync off, over its Unix socket, as the pool's other benches) holds a database for each
queue. Two worker processes each: pgqueuer's and procrastinate's (bench/_peer_queues.py, their defaults, a
trivial job that notes its number and start time), and the pool's rig from bench/pool_throughput.py (two
dispatcher processes, two warm echo workers, the Envoy edge). Everything runs for the whole run; in each of
`--rounds` rounds every path runs once, the order rotating, and the median round is printed:

  one at a time   `--clients` callers each enqueue one job a call (pgqueuer `enqueue`, procrastinate
                  `defer_async`); the pool's gRPC SubmitJobSync, async SubmitJob (then the drain), REST
                  POST /v1/jobs/sync and RunJobs (`--clients` callers on 4 shared streams)
  batch of 16     the same callers enqueue 16 jobs a call (pgqueuer's list enqueue, procrastinate's
                  batch_defer_async); the pool's REST POST /v1/jobs/batch of 16
  open loop       `--rate` jobs a second regardless of answers, `--open-jobs` of them: the peers' enqueue → start
                  (the worker's clock against the enqueuer's, one machine), the pool's submit → result
                  (SubmitJobSync: a result back, against a start)

A rate runs from the first enqueue until no job is left unfinished (the peers' and the async path's drain are
seen by polling their tables). CPU per job is every process's CPU over the path (this process, Postgres, the
system's own processes) over its jobs; "cores ÷ CPU" is the rate two idle cores would reach.

The floors, each measured alone in the same run, say what no pool built on these parts could beat here:
- a per-request job: a bare gRPC call (Health.Check on the dispatchers), the worker hop (POST /execute straight
  to a warm pool worker with the pool's WorkerClient), and the two statements exactly-once needs (the
  repository's submit and complete, serially, bench/pool_pg_cost.py's steady state in a database of its own);
  the same with the call the contract makes in place of Health.Check: a bare SubmitJobSync (bench/_bare_call.py:
  the pool's service on the chassis, its token and tenant rules, answering the payload at once), and for REST a
  bare POST /v1/jobs/sync through an edge of its own in front of that server;
- the least pool: those parts run together as any pool must run them (bench/_bare_call.py --compose: the same
  call on the chassis, the submit statement, a wait for one of the two warm workers, the worker hop and the
  completion statement while the machine is held, then the answer; no admission, queue in the store, placement,
  runner task, lease or NOTIFY), over gRPC and through an edge; its rate is a floor measured, not summed;
- a job in a batch: the worker hop and its share of a batch's statements (one submit_queued of 16, then 16
  completions): a batch shares its call and its submit among its jobs, but each job still needs its own worker
  hop and its own completion to be run exactly once;
- a machine cycle: a machine runs one job at a time (worker-pool.md: busy), and its next job goes out only once
  the statement that completes this one and marks that one running has committed, so the pool's machines cannot
  beat (machines ÷ (the worker hop + the completion statement)), both timed one at a time; a rate's floor is
  the lower of the CPU floor (cores ÷ CPU) and this;
- latency: the three of a per-request job in a row, with nothing of the pool's around them, one at a time
  (interleaved with the pool's SubmitJobSync, the bare call, the worker hop and the statements: bench/
  pool_dispatch_overhead.py's loop) and in an open loop at `--rate` beside the pool's.
The last table puts each goal beside its floor: "beyond the floor" means the floor itself misses the goal.

Exactly once, every run: each peer job's number noted by exactly one worker exactly once, none missing; the
pool's rows and usage feed as bench/pool_throughput.py checks them.

Goals (issue 25), each printed as a ratio from this run: SubmitJobSync and REST sync ≥ 0.8× pgqueuer one at a
time; RunJobs and REST batch ≥ 0.5× pgqueuer's batch; the pool's p50 one at a time ≤ 1.8× the bare gRPC call,
p99 ≤ 3 ms; at `--rate` submit → result p50 and p99 ≤ pgqueuer's enqueue → start.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "0")

import aiohttp  # noqa: E402
import asyncpg  # noqa: E402
import grpc  # noqa: E402
import pool_pg_cost  # noqa: E402
import pool_throughput as rig_kit  # noqa: E402
from _peer_queues import PEERS, Peer  # noqa: E402
from grpc_health.v1 import health_pb2, health_pb2_grpc  # noqa: E402
from pool_dispatch_overhead import interleaved, percentile  # noqa: E402

from tests.fixtures.postgres import database_dsn, embedded_data_dir  # noqa: E402
from thermostat.chassis.event_loop import choose_loop  # noqa: E402
from thermostat.chassis.event_loop import run as run_on  # noqa: E402
from thermostat.chassis.ports import free_port  # noqa: E402
from thermostat.chassis.registry import POOL_DISPATCHER  # noqa: E402
from thermostat.dev.embedded_postgres import EmbeddedPostgres  # noqa: E402
from thermostat.dev.envoy import start_envoy  # noqa: E402
from thermostat.pool.v1 import pool_pb2, pool_pb2_grpc  # noqa: E402
from thermostat.providers.pool.worker_client import WorkerClient  # noqa: E402
from thermostat.store.db import create_pool  # noqa: E402
from thermostat.store.migrations import discover_migrations, migrate  # noqa: E402

BATCH = 16
FLOOR_IN_A_ROW = "floor: the three in a row"
COMPLETION = "the completion statement"
STREAMS = 4
WARMUP = 200
ROLES = (
    ("_bare_call.py", "bare call"),
    ("--peer-worker pgqueuer", "pgqueuer"),
    ("--peer-worker procrastinate", "procrastinate"),
    *rig_kit.ROLES,
)
SHARED = ("bench process", "postgres")
POOL_ROLES = ("dispatchers", "workers", "envoy")
# whether a job is unfinished, each half on a partial index (a count over the table would cost Postgres a scan a poll)
POOL_PENDING = (
    "SELECT EXISTS (SELECT 1 FROM pool_jobs WHERE state = 'queued')"
    " OR EXISTS (SELECT 1 FROM pool_jobs WHERE state IN ('dispatched', 'running'))"
)
POLL_SECONDS = 0.01


def since(started: float) -> float:
    return time.perf_counter() - started


async def drained(
    connection: asyncpg.Connection, pending_sql: str, workers: list[asyncio.subprocess.Process] | None = None
) -> None:
    """Until `pending_sql` finds no job unfinished; a worker that died ends the run rather than the wait."""
    while await connection.fetchval(pending_sql):
        if any(w.returncode is not None for w in workers or []):
            raise SystemExit("a peer worker exited during the run (its error is above)")
        await asyncio.sleep(POLL_SECONDS)


@dataclass
class Measure:
    """A path's figures over the rounds."""

    rates: list[float] = field(default_factory=list)
    cpu: dict[str, float] = field(default_factory=dict)  # role -> seconds over every round
    jobs: int = 0
    latencies: list[float] = field(default_factory=list)  # ms, the open loop's
    writes: int = 0  # writing transactions the whole server committed over every round (XIDs assigned)

    def cpu_per_job(self, roles: tuple[str, ...]) -> dict[str, float]:
        return {role: self.cpu.get(role, 0.0) / max(1, self.jobs) * 1e6 for role in roles}


@dataclass
class PeerRig:
    peer: Peer
    dsn: str
    handle: Any
    watch: asyncpg.Connection
    workers: list[asyncio.subprocess.Process]
    outs: list[Path]


@contextlib.asynccontextmanager
async def peer_rig(peer: Peer, admin: asyncpg.Connection, server_dsn: str, tmp: Path) -> AsyncIterator[PeerRig]:
    await admin.execute(f"CREATE DATABASE peers_{peer.name}")
    dsn = database_dsn(server_dsn, f"peers_{peer.name}")
    await peer.install(dsn)
    workers, outs = [], []
    for i in range(2):
        out = tmp / f"{peer.name}-{i}.json"
        env = {**os.environ, "PEER_DSN": dsn, "PEER_OUT": str(out), "PYTHONUNBUFFERED": "1"}
        process = await asyncio.create_subprocess_exec(  # imported, not run as __main__: procrastinate's advice
            sys.executable,
            "-c",
            f"import sys; sys.path.insert(0, {str(ROOT / 'bench')!r}); import _peer_queues; _peer_queues.cli()",
            "--peer-worker",
            peer.name,
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stdin=asyncio.subprocess.DEVNULL,
        )
        assert process.stdout is not None
        if (await asyncio.wait_for(process.stdout.readline(), 60)).strip() != b"ready":
            raise SystemExit(f"a {peer.name} worker did not start")
        workers.append(process)
        outs.append(out)
    handle = await peer.connect(dsn)
    watch = await asyncpg.connect(dsn)
    try:
        yield PeerRig(peer=peer, dsn=dsn, handle=handle, watch=watch, workers=workers, outs=outs)
    finally:
        await watch.close()
        await peer.close(handle)
        for process in workers:
            if process.returncode is None:
                process.terminate()
        for process in workers:
            try:
                await asyncio.wait_for(process.wait(), 30)
            except TimeoutError:
                process.kill()
                await process.wait()


def peer_notes(rig: PeerRig) -> list[tuple[int, float, float]]:
    """Every (job number, enqueued at, started at) the rig's workers noted (after they stopped)."""
    return [tuple(row) for out in rig.outs for row in json.loads(out.read_text(encoding="utf-8"))]  # type: ignore[misc]


def exactly_once(name: str, noted: list[int], expected: int) -> str:
    counts: dict[int, int] = {}
    for n in noted:
        counts[n] = counts.get(n, 0) + 1
    twice = sum(1 for c in counts.values() if c > 1)
    missing = sum(1 for n in range(expected) if n not in counts)
    foreign = sum(1 for n in counts if not 0 <= n < expected)
    ok = twice == missing == foreign == 0 and len(noted) == expected
    verdict = "yes" if ok else "NO"
    return (
        f"{name}: exactly once: {verdict} — {len(noted)} runs of {expected} jobs, {twice} run twice, {missing} missing"
    )


async def open_loop(send: Callable[[int, float], Awaitable[None]], first: int, jobs: int, rate: float) -> None:
    """`jobs` sends at `rate` a second on schedule, whatever the answers; returns when all have returned."""
    started = time.perf_counter()
    tasks = []
    for i in range(jobs):
        delay = started + i / rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(send(first + i, time.time())))
    await asyncio.gather(*tasks)


Path_ = Callable[[int, int], Awaitable[float]]  # (first job number, jobs) -> jobs per second


class Run:
    """Every path of the run, its figures and the job numbers each system has used."""

    def __init__(self, lanes: int, rate: float, open_jobs: int, xid: Callable[[], Awaitable[int]]) -> None:
        self.lanes, self.rate, self.open_jobs = lanes, rate, open_jobs
        self.machines = 0  # the pool's warm machines
        self.xid = xid  # the server's transaction counter: every writing transaction takes the next
        self.figures: dict[str, Measure] = {}
        self.numbered: dict[str, int] = {}  # system -> next job number
        self.open_ranges: dict[str, list[range]] = {}
        self.order: list[str] = []  # the paths, in the order they are printed

    async def measure(self, system: str, path: str, runner: Path_, jobs: int, *, record: bool = True) -> float:
        first = self.numbered.get(system, 0)
        self.numbered[system] = first + jobs
        xid_before = await self.xid()
        before = rig_kit.cpu_seconds(ROLES)
        rate = await runner(first, jobs)
        after = rig_kit.cpu_seconds(ROLES)
        xid_after = await self.xid()
        if record:
            figure = self.figures.setdefault(path, Measure())
            figure.rates.append(rate)
            figure.jobs += jobs
            figure.writes += xid_after - xid_before - 1  # the second reading takes an id of its own
            for role, seconds in after.items():
                figure.cpu[role] = figure.cpu.get(role, 0.0) + max(0.0, seconds - before.get(role, 0.0))
        return rate


def peer_paths(run: Run, rig: PeerRig) -> dict[str, Path_]:
    peer = rig.peer

    async def one(first: int, jobs: int) -> float:
        started = time.perf_counter()
        await rig_kit.run_lanes(lambda n: peer.enqueue(rig.handle, n, time.time()), first, jobs, run.lanes)
        await drained(rig.watch, peer.pending_sql, rig.workers)
        return jobs / since(started)

    async def batch(first: int, jobs: int) -> float:
        started = time.perf_counter()
        await rig_kit.run_batched_lanes(
            lambda numbers: peer.enqueue_batch(rig.handle, numbers, time.time()), first, jobs, run.lanes, BATCH
        )
        await drained(rig.watch, peer.pending_sql, rig.workers)
        return jobs / since(started)

    async def steady(first: int, jobs: int) -> float:
        run.open_ranges.setdefault(peer.name, []).append(range(first, first + jobs))
        started = time.perf_counter()
        await open_loop(lambda n, t: peer.enqueue(rig.handle, n, t), first, jobs, run.rate)
        await drained(rig.watch, peer.pending_sql, rig.workers)
        return jobs / since(started)

    return {
        f"{peer.name} one at a time": one,
        f"{peer.name} batch of {BATCH}": batch,
        f"{peer.name} open loop": steady,
    }


GRPC, ASYNC, REST, STREAM = "pool gRPC SubmitJobSync", "pool async SubmitJob, drain", "pool REST sync", "pool RunJobs"
REST_BATCH, OPEN = f"pool REST batch of {BATCH}", "pool open loop"
HEALTH, HOP, STATEMENTS = "floor: bare gRPC Health.Check", "floor: worker hop", "floor: 2 statements"
BATCH_STATEMENTS, FLOOR_OPEN = f"floor: statements of a batch of {BATCH}", "floor open loop"
BARE_SYNC, BARE_REST = "floor: bare SubmitJobSync", "floor: bare REST sync"
LEAST, LEAST_REST = "floor: least pool SubmitJobSync", "floor: least pool REST sync"


def pool_paths(
    run: Run, rig: rig_kit.PoolRig, session: aiohttp.ClientSession, stream: rig_kit.Call
) -> dict[str, Path_]:
    watch: list[asyncpg.Connection] = []

    def lanes(call: rig_kit.Call) -> Path_:
        return lambda first, jobs: rig_kit.run_lanes(call, first, jobs, run.lanes)

    stubs = [d.stub for d in rig.dispatchers]

    async def submit(n: int) -> None:
        request = pool_pb2.SubmitJobRequest(machine_type=rig_kit.TYPE)
        request.payload.data = rig_kit.payload(n)
        await stubs[n % len(stubs)].SubmitJob(request, metadata=rig_kit.auth(), timeout=60)

    async def asynchronous(first: int, jobs: int) -> float:
        if not watch:
            watch.append(await asyncpg.connect(rig.dsn))
        started = time.perf_counter()
        await rig_kit.run_lanes(submit, first, jobs, run.lanes)
        await drained(watch[0], POOL_PENDING)
        return jobs / since(started)

    sync = rig_kit.grpc_caller(rig)
    latencies = run.figures.setdefault(OPEN, Measure()).latencies

    async def timed(n: int, _enqueued: float) -> None:
        started = time.perf_counter()
        await sync(n)
        latencies.append(since(started) * 1000)

    async def steady(first: int, jobs: int) -> float:
        started = time.perf_counter()
        await open_loop(timed, first, jobs, run.rate)
        return jobs / since(started)

    batch = rig_kit.rest_batch_caller(rig, session)
    return {
        GRPC: lanes(sync),
        ASYNC: asynchronous,
        REST: lanes(rig_kit.rest_caller(rig, session)),
        STREAM: lanes(stream),
        REST_BATCH: lambda first, jobs: rig_kit.run_batched_lanes(batch, first, jobs, run.lanes, BATCH),
        OPEN: steady,
    }


@dataclass
class BareCall:
    """bench/_bare_call.py's server: gRPC straight to it, and REST through an edge of its own."""

    stub: pool_pb2_grpc.PoolDispatcherStub
    edge_url: str


@contextlib.asynccontextmanager
async def bare_call_server(workdir: Path, name: str, *extra: str) -> AsyncIterator[BareCall]:
    """bench/_bare_call.py in a process of its own (the pool's SubmitJobSync on the chassis, answered at once;
    with `--compose`, the least pool), behind an Envoy built as the rig's is."""
    port = free_port()
    process = await asyncio.create_subprocess_exec(
        sys.executable, str(ROOT / "bench" / "_bare_call.py"), str(port), *extra, stdin=asyncio.subprocess.DEVNULL
    )
    envoy = None
    try:
        await rig_kit.serving(port, process)
        config = workdir / f"{name}-envoy.yaml"
        config.write_text(json.dumps(rig_kit.edge_config([port])), encoding="utf-8")
        envoy = await start_envoy(config, concurrency=1)
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            edge_url = f"http://127.0.0.1:{next(iter(envoy.listeners.values()))}"
            yield BareCall(pool_pb2_grpc.PoolDispatcherStub(channel), edge_url)
    finally:
        if envoy is not None:
            await envoy.stop()
        if process.returncode is None:
            process.terminate()
        await process.wait()


async def floor_paths(
    run: Run,
    rig: rig_kit.PoolRig,
    client: WorkerClient,
    statements: Any,
    bare: BareCall,
    session: aiohttp.ClientSession,
) -> dict[str, Path_]:
    machines = await rig.machines()
    bare_sync, bare_rest = rig_kit.grpc_caller_to([bare.stub]), rig_kit.rest_caller_at(bare.edge_url, session)

    async def hop(n: int) -> None:
        machine = machines[n % len(machines)]
        reply = await client.execute(machine["endpoint"], machine["token"], rig_kit.payload(n), deadline_seconds=60)
        if reply.status != 200 or reply.body != rig_kit.payload(n):
            raise SystemExit(f"worker hop {n}: {reply}")

    async def serial(_first: int, jobs: int) -> float:
        started = time.perf_counter()
        for _ in range(jobs):
            await statements.job()
        return jobs / since(started)

    async def batched(_first: int, jobs: int) -> float:
        started = time.perf_counter()
        for _ in range(jobs // BATCH):
            await statements.batch(BATCH)
        return jobs // BATCH * BATCH / since(started)

    health = rig_kit.health_caller(rig)
    latencies = run.figures.setdefault(FLOOR_OPEN, Measure()).latencies

    async def floor_job(n: int, _enqueued: float) -> None:
        # the three a sync job cannot do without, one after the other, with nothing of the pool's around them
        started = time.perf_counter()
        await health(n)
        await hop(n)
        await statements.job()
        latencies.append(since(started) * 1000)

    async def steady(first: int, jobs: int) -> float:
        started = time.perf_counter()
        await open_loop(floor_job, first, jobs, run.rate)
        return jobs / since(started)

    return {
        HEALTH: lambda first, jobs: rig_kit.run_lanes(health, first, jobs, run.lanes),
        BARE_SYNC: lambda first, jobs: rig_kit.run_lanes(bare_sync, first, jobs, run.lanes),
        BARE_REST: lambda first, jobs: rig_kit.run_lanes(bare_rest, first, jobs, run.lanes),
        HOP: lambda first, jobs: rig_kit.run_lanes(hop, first, jobs, 2),  # a worker runs one job at a time
        STATEMENTS: serial,
        BATCH_STATEMENTS: batched,
        FLOOR_OPEN: steady,
    }


def least_pool_paths(run: Run, least: BareCall, session: aiohttp.ClientSession) -> dict[str, Path_]:
    grpc_call, rest_call = rig_kit.grpc_caller_to([least.stub]), rig_kit.rest_caller_at(least.edge_url, session)
    return {
        LEAST: lambda first, jobs: rig_kit.run_lanes(grpc_call, first, jobs, run.lanes),
        LEAST_REST: lambda first, jobs: rig_kit.run_lanes(rest_call, first, jobs, run.lanes),
    }


async def migrated_database(admin: asyncpg.Connection, server_dsn: str, name: str) -> str:
    await admin.execute(f'CREATE DATABASE "{name}"')
    dsn = database_dsn(server_dsn, name)
    connection = await asyncpg.connect(dsn)
    try:
        await migrate(connection, discover_migrations())
    finally:
        await connection.close()
    return dsn


@contextlib.asynccontextmanager
async def statements_state(admin: asyncpg.Connection, server_dsn: str) -> AsyncIterator[Any]:
    """bench/pool_pg_cost.py's steady state (the repository's submit and complete) in a database of its own."""
    dsn = await migrated_database(admin, server_dsn, "peers_statements")
    pool = await create_pool(dsn, min_size=1, max_size=2)
    listener = await asyncpg.connect(dsn)
    try:
        state = pool_pg_cost.SteadyState(pool, listener)
        await state.start()
        yield state
    finally:
        await listener.close()
        await pool.close()


SYSTEM_ROLES = {"pgqueuer": ("pgqueuer",), "procrastinate": ("procrastinate",), "pool": POOL_ROLES}


def system_of(path: str) -> str:
    return path.split()[0] if path.split()[0] in ("pgqueuer", "procrastinate") else "pool"


def cpu_roles(path: str) -> tuple[str, ...]:
    if path == HEALTH:
        return (*SHARED[:1], "dispatchers")
    if path == BARE_SYNC:
        return (*SHARED[:1], "bare call")
    if path == BARE_REST:
        return (*SHARED[:1], "bare call", "envoy")
    if path == LEAST:
        return (*SHARED, "bare call", "workers")
    if path == LEAST_REST:
        return (*SHARED, "bare call", "workers", "envoy")
    if path == HOP:
        return (*SHARED[:1], "workers")
    if path in (STATEMENTS, BATCH_STATEMENTS):
        return SHARED
    if path == FLOOR_OPEN:
        return (*SHARED, "dispatchers", "workers")
    return (*SHARED, *SYSTEM_ROLES[system_of(path)])


def progress(text: str) -> None:
    print(f"  [{time.strftime('%H:%M:%S')}, {rig_kit.load_line()}] {text}", flush=True)


async def next_xid(admin: asyncpg.Connection) -> int:
    """The id the server's next writing transaction gets (this reading takes one itself). Counted over a path, it
    is how many transactions wrote anything, in every database (the other systems idle meanwhile): a figure
    the machine's load does not move, unlike the rates and CPU beside it."""
    return int(await admin.fetchval("SELECT pg_current_xact_id()::text::bigint"))


async def main(jobs: int, rounds: int, lanes: int, rate: float, open_jobs: int, calls: int) -> None:
    print(
        f"peers: {jobs} jobs a path a round, {rounds} rounds, {lanes} callers, batches of {BATCH}, open loop "
        f"{open_jobs} jobs at {rate:.0f}/s, {calls} one-at-a-time calls; at start: {rig_kit.load_line()}",
        flush=True,
    )
    main_task = asyncio.current_task()
    assert main_task is not None
    # a SIGTERM (timeout, make's ^C) cancels the run, so every worker, dispatcher and server below is stopped
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, main_task.cancel)
    one_at_a_time: dict[str, list[float]] = {}
    with (
        embedded_data_dir() as data_dir,
        EmbeddedPostgres(data_dir, durable=False) as server,
        tempfile.TemporaryDirectory(prefix="peers-") as tmp,
    ):
        admin = await asyncpg.connect(server.local_dsn)
        run = Run(lanes, rate, open_jobs, xid=functools.partial(next_xid, admin))
        await admin.execute("CREATE DATABASE peers_pool")
        async with contextlib.AsyncExitStack() as stack:
            peers = [
                await stack.enter_async_context(peer_rig(p, admin, server.local_dsn, Path(tmp))) for p in PEERS.values()
            ]
            progress("peers' workers up (2 each)")
            rig = await stack.enter_async_context(
                rig_kit.pool_rig(processes=2, workers=2, edge=True, dsn=database_dsn(server.local_dsn, "peers_pool"))
            )
            progress("pool up (2 dispatchers, 2 warm workers, Envoy)")
            run.machines = len(await rig.machines())
            session = await stack.enter_async_context(aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)))
            stream = await stack.enter_async_context(rig_kit.stream_caller(rig, STREAMS))
            client = await stack.enter_async_context(WorkerClient())
            statements = await stack.enter_async_context(statements_state(admin, server.local_dsn))
            paths: dict[str, Path_] = {}
            for peer in peers:
                paths.update(peer_paths(run, peer))
            paths.update(pool_paths(run, rig, session, stream))
            bare = await stack.enter_async_context(bare_call_server(Path(tmp), "bare-call"))
            least_config = Path(tmp) / "least-pool.json"
            least_config.write_text(
                json.dumps(
                    {
                        "dsn": await migrated_database(admin, server.local_dsn, "peers_least_pool"),
                        "machines": [{"endpoint": m["endpoint"], "token": m["token"]} for m in await rig.machines()],
                    }
                ),
                encoding="utf-8",
            )
            least = await stack.enter_async_context(
                bare_call_server(Path(tmp), "least-pool", "--compose", str(least_config))
            )
            paths.update(await floor_paths(run, rig, client, statements, bare, session))
            paths.update(least_pool_paths(run, least, session))
            for name, runner in paths.items():
                if "open loop" not in name:
                    await run.measure(
                        system_of(name) if not name.startswith("floor") else name, name, runner, WARMUP, record=False
                    )
            progress("warmed every path")
            order = run.order = list(paths)
            for r in range(rounds):
                for name in order[r % len(order) :] + order[: r % len(order)]:
                    system = system_of(name) if not name.startswith("floor") else name
                    count = open_jobs if "open loop" in name else jobs
                    got = await run.measure(system, name, paths[name], count)
                    cpu = sum(run.figures[name].cpu_per_job(cpu_roles(name)).values())
                    progress(f"round {r + 1}/{rounds} {name}: {got:,.0f} jobs/s, {cpu:,.0f} µs CPU/job so far")
                stub = rig.dispatchers[0].stub
                health = health_pb2_grpc.HealthStub(rig.dispatchers[0].channel)
                check = health_pb2.HealthCheckRequest(service=POOL_DISPATCHER.health_service)
                (machine, *_) = await rig.machines()
                base = run.numbered.get("pool", 0)
                run.numbered["pool"] = base + 200 + calls

                async def pool_one(n: int, stub: Any = stub, base: int = base) -> None:
                    request = pool_pb2.SubmitJobSyncRequest(machine_type=rig_kit.TYPE, wait_seconds="60")
                    request.payload.data = rig_kit.payload(base + n)
                    body = await stub.SubmitJobSync(request, metadata=rig_kit.auth(), timeout=60)
                    if body.data != rig_kit.payload(base + n):
                        raise SystemExit(f"pool job {base + n}: {body.data!r}")

                async def bare(n: int, health: Any = health, check: Any = check) -> None:
                    await health.Check(check, timeout=60)

                async def direct(n: int, machine: Any = machine) -> None:
                    await client.execute(machine["endpoint"], machine["token"], rig_kit.payload(n), deadline_seconds=60)

                completions: list[float] = []

                async def both(n: int, completions: list[float] = completions) -> None:
                    # the completion timed alone too: with the worker hop it is a machine's whole cycle
                    started = time.perf_counter()
                    await statements.complete_one()
                    completions.append(since(started) * 1000)
                    await statements.submit()

                async def in_a_row(n: int) -> None:
                    await bare(n)
                    await direct(n)
                    await both(n)

                samples = await interleaved(
                    {
                        "pool SubmitJobSync": pool_one,
                        "bare gRPC call": bare,
                        "worker hop": direct,
                        "2 statements": both,
                        FLOOR_IN_A_ROW: in_a_row,
                    },
                    calls,
                )
                samples[COMPLETION] = completions[-calls:]
                for name, values in samples.items():
                    one_at_a_time.setdefault(name, []).extend(values)
                progress(
                    f"round {r + 1}/{rounds} one at a time: pool p50 "
                    f"{percentile(samples['pool SubmitJobSync'], 50):.2f} ms, "
                    f"bare gRPC {percentile(samples['bare gRPC call'], 50):.2f} ms"
                )
            await asyncio.sleep(0.5)
            pool_expected = 2 * 4 + run.numbered["pool"]
            pool_verdict = await rig_kit.check_exactly_once(rig.dsn, pool_expected)
        verdicts = [f"pool: {pool_verdict}"]
        peer_latency: dict[str, list[float]] = {}
        for peer in peers:
            notes = peer_notes(peer)
            verdicts.append(exactly_once(peer.peer.name, [n for n, _, _ in notes], run.numbered[peer.peer.name]))
            wanted = {n for span in run.open_ranges.get(peer.peer.name, []) for n in span}
            peer_latency[peer.peer.name] = [(started - enq) * 1000 for n, enq, started in notes if n in wanted]
        await admin.close()
    report(run, one_at_a_time, peer_latency, verdicts)


def ratio_line(label: str, value: float, goal: float, *, at_most: bool = False) -> str:
    met = value <= goal if at_most else value >= goal
    sign = "≤" if at_most else "≥"
    return f"  {label:<58}{value:>7.2f}x   goal {sign} {goal:.2f}x: {'met' if met else 'NOT met'}"


def report(run: Run, one: dict[str, list[float]], peer_latency: dict[str, list[float]], verdicts: list[str]) -> None:
    cores = os.cpu_count() or 1
    rate = {name: statistics.median(run.figures[name].rates) for name in run.order}
    cpu = {name: m.cpu_per_job(cpu_roles(name)) for name, m in run.figures.items() if m.jobs}
    print(
        f"\n{'path (median round)':<36}{'jobs/s':>8}{'CPU µs/job':>11}{'cores÷CPU':>10}{'writes/job':>11}"
        "   CPU by process, µs/job; rounds"
    )
    for name in rate:
        total = sum(cpu[name].values())
        parts = " ".join(f"{role} {us:.0f}" for role, us in cpu[name].items())
        rounds = " ".join(f"{v:.0f}" for v in run.figures[name].rates)
        writes = run.figures[name].writes / max(1, run.figures[name].jobs)
        print(
            f"{name:<36}{rate[name]:>8,.0f}{total:>11,.0f}{cores / total * 1e6:>10,.0f}{writes:>11.2f}"
            f"   {parts}; {rounds}"
        )
    floor_cpu = sum(sum(cpu[name].values()) for name in (HEALTH, HOP, STATEMENTS))
    print(
        f"{'floor of a per-request job (sum)':<36}{'':>8}{floor_cpu:>11,.0f}{cores / floor_cpu * 1e6:>10,.0f}"
        "   a bare gRPC call + the worker hop + the 2 statements"
    )
    # the same with the call the contract makes (token, tenant, payload in, result out) in place of Health.Check
    sync_floor_cpu = sum(sum(cpu[name].values()) for name in (BARE_SYNC, HOP, STATEMENTS))
    print(
        f"{'floor of a SubmitJobSync job (sum)':<36}{'':>8}{sync_floor_cpu:>11,.0f}"
        f"{cores / sync_floor_cpu * 1e6:>10,.0f}   a bare SubmitJobSync + the worker hop + the 2 statements"
    )
    rest_floor_cpu = sum(sum(cpu[name].values()) for name in (BARE_REST, HOP, STATEMENTS))
    print(
        f"{'floor of a REST sync job (sum)':<36}{'':>8}{rest_floor_cpu:>11,.0f}"
        f"{cores / rest_floor_cpu * 1e6:>10,.0f}   a bare REST sync through an edge + the worker hop + the 2 statements"
    )
    # a batch carries many jobs in one call and one statement queues them all, but exactly once still costs
    # each job its worker hop and its own completion: that per-job floor bounds what batching calls can reach
    batch_floor_cpu = sum(sum(cpu[name].values()) for name in (HOP, BATCH_STATEMENTS))
    print(
        f"{'floor of a job in a batch (sum)':<36}{'':>8}{batch_floor_cpu:>11,.0f}"
        f"{cores / batch_floor_cpu * 1e6:>10,.0f}   the worker hop + its share of a batch's statements"
    )
    # a machine runs one job at a time (worker-pool.md: busy), and its next job goes out only after the statement
    # that completes this one and marks that one running commits: `machines` of them cannot beat that cycle
    cycle_ms = statistics.mean(one["worker hop"]) + statistics.mean(one[COMPLETION])
    cycle_floor = run.machines / cycle_ms * 1000
    print(
        f"{'floor of a machine cycle':<36}{'':>8}{cycle_ms * 1000:>11,.0f}{cycle_floor:>10,.0f}"
        f"   µs of the worker hop + the completion statement, one at a time; jobs/s of {run.machines} machines"
    )
    one_pgq, batch_pgq = rate["pgqueuer one at a time"], rate[f"pgqueuer batch of {BATCH}"]
    one_pcr, batch_pcr = rate["procrastinate one at a time"], rate[f"procrastinate batch of {BATCH}"]
    print("\nratios (jobs/s, this run)")
    print(ratio_line("gRPC SubmitJobSync ÷ pgqueuer one at a time", rate[GRPC] / one_pgq, 0.8))
    print(ratio_line("REST sync ÷ pgqueuer one at a time", rate[REST] / one_pgq, 0.8))
    print(ratio_line("RunJobs ÷ pgqueuer batch", rate[STREAM] / batch_pgq, 0.5))
    print(ratio_line(f"REST batch of {BATCH} ÷ pgqueuer batch", rate[REST_BATCH] / batch_pgq, 0.5))
    batch_floor = min(cores / batch_floor_cpu * 1e6, cycle_floor) / batch_pgq
    print(f"  {'batch floor (the lower of CPU and cycle) ÷ pgqueuer batch':<58}{batch_floor:>7.2f}x")
    print(f"  {'async SubmitJob, drain ÷ pgqueuer one at a time':<58}{rate[ASYNC] / one_pgq:>7.2f}x")
    one_floor = min(cores / floor_cpu * 1e6, cycle_floor)
    sync_floor = min(cores / sync_floor_cpu * 1e6, cycle_floor)
    rest_floor = min(cores / rest_floor_cpu * 1e6, cycle_floor)
    print(f"  {'floor (the lower of CPU and cycle) ÷ pgqueuer one at a time':<58}{one_floor / one_pgq:>7.2f}x")
    print(f"  {'  with a bare SubmitJobSync for the call':<58}{sync_floor / one_pgq:>7.2f}x")
    print(f"  {'  with a bare REST sync through an edge for the call':<58}{rest_floor / one_pgq:>7.2f}x")
    # the least pool runs the parts together, as any pool must: its rate is a floor measured, not summed
    least, least_rest = rate[LEAST] / one_pgq, rate[LEAST_REST] / one_pgq
    print(f"  {'least pool SubmitJobSync ÷ pgqueuer one at a time':<58}{least:>7.2f}x")
    print(f"  {'least pool REST sync ÷ pgqueuer one at a time':<58}{least_rest:>7.2f}x")
    for name in (GRPC, ASYNC, REST, STREAM):
        print(f"  {name + ' ÷ procrastinate one at a time':<58}{rate[name] / one_pcr:>7.2f}x")
    print(f"  {f'REST batch of {BATCH} ÷ procrastinate batch':<58}{rate[REST_BATCH] / batch_pcr:>7.2f}x")
    pgq_cpu = sum(cpu["pgqueuer one at a time"].values())
    print(f"  {'SubmitJobSync CPU/job ÷ pgqueuer one at a time CPU/job':<58}{sum(cpu[GRPC].values()) / pgq_cpu:>7.2f}x")
    print(f"  {'0.8× pgqueuer one at a time means CPU/job at most (µs)':<58}{pgq_cpu / 0.8:>7,.0f}")

    print(f"\nopen loop at {run.rate:.0f} jobs/s ({run.open_jobs} a round), ms")
    rows = {f"{name} enqueue→start": (values, f"{name} open loop") for name, values in peer_latency.items()}
    rows["pool submit→result"] = (run.figures[OPEN].latencies, OPEN)
    rows[FLOOR_IN_A_ROW] = (run.figures[FLOOR_OPEN].latencies, FLOOR_OPEN)
    lat = {name: values for name, (values, _) in rows.items()}
    for name, (values, path) in rows.items():
        per_job = sum(cpu[path].values())
        print(
            f"  {name:<34}p50 {percentile(values, 50):>6.2f}   p99 {percentile(values, 99):>6.2f}"
            f"   CPU {per_job:,.0f} µs/job"
        )
    pool_lat, pgq_lat = lat["pool submit→result"], lat["pgqueuer enqueue→start"]
    print(
        ratio_line(
            "pool submit→result p50 ÷ pgqueuer enqueue→start p50",
            percentile(pool_lat, 50) / percentile(pgq_lat, 50),
            1.0,
            at_most=True,
        )
    )
    print(
        ratio_line(
            "pool submit→result p99 ÷ pgqueuer enqueue→start p99",
            percentile(pool_lat, 99) / percentile(pgq_lat, 99),
            1.0,
            at_most=True,
        )
    )
    floor_lat = lat[FLOOR_IN_A_ROW]
    for q in (50, 99):
        ratio = percentile(floor_lat, q) / percentile(pgq_lat, q)
        print(f"  {f'floor p{q} ÷ pgqueuer enqueue→start p{q}':<58}{ratio:>7.2f}x")

    print("\none at a time, interleaved, ms")
    for name, values in one.items():
        print(f"  {name:<34}p50 {percentile(values, 50):>6.3f}   p99 {percentile(values, 99):>6.3f}")
    pool_p50, hop_p50 = percentile(one["pool SubmitJobSync"], 50), percentile(one["bare gRPC call"], 50)
    floor_p50, floor_p99 = percentile(one[FLOOR_IN_A_ROW], 50), percentile(one[FLOOR_IN_A_ROW], 99)
    print(ratio_line("pool p50 ÷ bare gRPC call p50", pool_p50 / hop_p50, 1.8, at_most=True))
    print(f"  {'floor p50 ÷ bare gRPC call p50':<58}{floor_p50 / hop_p50:>7.2f}x")
    p99 = percentile(one["pool SubmitJobSync"], 99)
    print(f"  {'pool p99 (ms)':<58}{p99:>7.2f}    goal ≤ 3.00 ms: {'met' if p99 <= 3 else 'NOT met'}")

    # each goal beside the floor of the same run: a floor on the wrong side of its goal means no pool built on
    # these parts meets it here, whatever it does between them
    goals = [
        ("SubmitJobSync ≥ 0.8× pgqueuer one at a time", rate[GRPC] / one_pgq, one_floor / one_pgq, 0.8, False),
        ("  against the bare SubmitJobSync's floor", rate[GRPC] / one_pgq, sync_floor / one_pgq, 0.8, False),
        ("  against the least pool's rate", rate[GRPC] / one_pgq, least, 0.8, False),
        ("REST sync ≥ 0.8× pgqueuer one at a time", rate[REST] / one_pgq, one_floor / one_pgq, 0.8, False),
        ("  against the bare REST sync's floor", rate[REST] / one_pgq, rest_floor / one_pgq, 0.8, False),
        ("  against the least pool's rate", rate[REST] / one_pgq, least_rest, 0.8, False),
        ("RunJobs ≥ 0.5× pgqueuer batch", rate[STREAM] / batch_pgq, batch_floor, 0.5, False),
        (f"REST batch of {BATCH} ≥ 0.5× pgqueuer batch", rate[REST_BATCH] / batch_pgq, batch_floor, 0.5, False),
        ("one at a time p50 ≤ 1.8× the bare gRPC call", pool_p50 / hop_p50, floor_p50 / hop_p50, 1.8, True),
        ("one at a time p99 ≤ 3 ms", p99, floor_p99, 3.0, True),
    ]
    for q in (50, 99):
        goals.append(
            (
                f"{run.rate:.0f} jobs/s p{q} ≤ pgqueuer enqueue→start",
                percentile(pool_lat, q) / percentile(pgq_lat, q),
                percentile(floor_lat, q) / percentile(pgq_lat, q),
                1.0,
                True,
            )
        )
    print(f"\n{'goal':<48}{'pool':>8}{'floor':>8}   verdict")
    for label, value, floor, goal, at_most in goals:
        met = value <= goal if at_most else value >= goal
        reachable = floor <= goal if at_most else floor >= goal
        verdict = "met" if met else ("not met; the floor allows it" if reachable else "not met; beyond the floor")
        print(f"{label:<48}{value:>8.2f}{floor:>8.2f}   {verdict}")
    print()
    for verdict in verdicts:
        print(verdict)
    print(f"at end: {rig_kit.load_line()}")


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1500, help="jobs a path a round (default 1500)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds, the path order rotating (default 3)")
    parser.add_argument("--clients", type=int, default=32, help="concurrent callers (default 32)")
    parser.add_argument("--rate", type=float, default=200.0, help="the open loop's jobs a second (default 200)")
    parser.add_argument("--open-jobs", type=int, default=1200, help="the open loop's jobs a round (default 1200)")
    parser.add_argument("--calls", type=int, default=1000, help="one-at-a-time calls a path a round (default 1000)")
    args = parser.parse_args()
    choice = choose_loop("uvloop")
    run_on(main(args.jobs, args.rounds, args.clients, args.rate, args.open_jobs, args.calls), choice)


if __name__ == "__main__":
    cli()
