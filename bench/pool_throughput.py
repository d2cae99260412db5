"""Pool throughput: trivial jobs end to end (submit → result), two dispatcher processes, four warm workers.

Run: .venv/bin/python bench/pool_throughput.py [--jobs 3000] [--clients 32] [--streams 4] [--batch 16]
     [--rounds 3]

Issue 10's first measure. One embedded Postgres (fsync off), two `python -m thermostat.pool_dispatcher`
processes on it (real subprocesses, instance ids bench-a and bench-b), one machine type `echo` running the
reference worker (`python -m thermostat.worker`, echo handler) through the local backend with
`max_workers: 4`, warmed before measuring, and the real Envoy edge (tools.envoy_config, started
with thermostat.dev.envoy) whose pool cluster holds both processes. Paths, each with `--clients` concurrent
callers, in `--rounds` rounds whose order rotates (the median round is printed, every round beside it):

  gRPC    SubmitJobSync straight to the dispatchers, callers spread over both processes
  stream  RunJobs straight to the dispatchers: the same callers share `--streams` long-lived streams spread
          over both processes (each caller writes its job on its stream and awaits the answer by its tag)
  REST    POST /v1/jobs/sync?machine_type=echo through Envoy (aiohttp client, kept-alive connections)
  REST batch
          POST /v1/jobs/batch through Envoy, the same callers on the same kept-alive connections, each request
          carrying `--batch` jobs (a comma-separated list of sizes measures each as a path of its own), each
          job its own payload in base64, each entry of the answer checked to be 200 and echo its job's payload
  calib.  bench/pool_calibration.py's bare loop (four statements + one worker call, one process) at the
          same concurrency, against a worker of its own: what this machine does without the service
  +NOTIFY the same loop whose completion also NOTIFYs two listening connections, as the pool's complete
          statement does for waiters in other processes: what that notification costs
  floor   grpc.health.v1 Health.Check spread over both dispatchers: a unary call with no work, what the gRPC
          framework alone costs the callers and the dispatchers per call (no job: not in the exactly-once count)

Every job carries its own payload and the result must echo it. After the runs, the job rows and the usage
feed must show every job completed exactly once: as many usage events as jobs, one per job id, no job in
another state (a double run would show as a second completion of a job or a foreign result).

Goal ≥ 1,000 jobs/s on this 2-core machine. Everything (Postgres, both dispatchers, four workers, Envoy and
the callers) shares the two cores with whatever else runs: the load average is printed, judge the ratio to
the calibration loop in the same run rather than the absolutes.

Beside the rates, the CPU time each path costs per job, by process (this bench's own process: the callers,
and for the calibration loop the loop itself; the dispatchers; Postgres; the workers; Envoy), read from the
kernel's accounting of every process under this one. Other work on the machine slows a path's rate but
hardly its CPU per job, so "cores ÷ CPU per job" is the rate this machine would reach with nothing else
running: the figure to compare designs by on a shared machine.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import functools
import json
import os
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
# the rig spawns processes while gRPC runs; its fork handlers would only log that they skip themselves
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "0")

import aiohttp  # noqa: E402
import asyncpg  # noqa: E402
import grpc  # noqa: E402
import pool_calibration as calibration  # noqa: E402
import psutil  # noqa: E402
from grpc_health.v1 import health_pb2, health_pb2_grpc  # noqa: E402

from tests.fixtures.postgres import database_dsn, embedded_data_dir  # noqa: E402
from thermostat.chassis.event_loop import choose_loop  # noqa: E402
from thermostat.chassis.event_loop import run as run_on  # noqa: E402
from thermostat.chassis.ports import free_port  # noqa: E402
from thermostat.chassis.registry import POOL_DISPATCHER  # noqa: E402
from thermostat.dev.embedded_postgres import EmbeddedPostgres  # noqa: E402
from thermostat.dev.envoy import EnvoyProcess, start_envoy  # noqa: E402
from thermostat.policy.pool.job_batch import MAX_BATCH_JOBS  # noqa: E402
from thermostat.pool.v1 import pool_pb2, pool_pb2_grpc  # noqa: E402
from thermostat.providers.pool.local import LocalBackend  # noqa: E402
from thermostat.providers.pool.worker_client import WorkerClient  # noqa: E402
from thermostat.store.db import apply_migrations  # noqa: E402

# bench/pool_throughput_ab.py also runs this module on a baseline from before the edge's config generator moved to
# tools/ (issue 22): on that baseline's PYTHONPATH its libs/thermostat/edge is found, and builds A's edge
try:
    from thermostat.edge.envoy_config import EdgeSpec, build_envoy_config, upstreams
except ModuleNotFoundError:
    from tools.envoy_config import EdgeSpec, build_envoy_config, upstreams

API_TOKEN = "bench-pool-token"  # noqa: S105 - a throw-away token for loopback processes
TENANT = "bench"
TYPE = "echo"
WARMUP = 200
DEFAULT_BATCH = 16  # the REST batch path's jobs per request


def load_line() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.2f} (1 min) {five:.2f} (5 min) on {os.cpu_count()} cores"


def catalogue(max_workers: int) -> list[dict[str, Any]]:
    return [
        {
            "name": TYPE,
            "image": f"{sys.executable} -m thermostat.worker",
            "backend": "local",
            "max_workers": max_workers,
            "cool_down_seconds": 3600,
            "boot_timeout_seconds": 60,
        }
    ]


def auth(tenant: str | None = TENANT) -> tuple[tuple[str, str], ...]:
    metadata = [("authorization", f"Bearer {API_TOKEN}")]
    if tenant is not None:
        metadata.append(("x-strata-tenant", tenant))
    return tuple(metadata)


@dataclass
class Dispatcher:
    name: str
    port: int
    process: asyncio.subprocess.Process
    channel: grpc.aio.Channel
    stub: pool_pb2_grpc.PoolDispatcherStub


@dataclass
class PoolRig:
    """Postgres, dispatcher processes with warm workers, and (optionally) the Envoy edge in front of them."""

    dsn: str
    dispatchers: list[Dispatcher] = field(default_factory=list)
    envoy: EnvoyProcess | None = None

    @property
    def edge_url(self) -> str:
        assert self.envoy is not None
        return f"http://127.0.0.1:{next(iter(self.envoy.listeners.values()))}"

    async def machines(self) -> list[asyncpg.Record]:
        connection = await asyncpg.connect(self.dsn)
        try:
            return await connection.fetch("SELECT id, state, endpoint, token, owner FROM pool_machines ORDER BY id")
        finally:
            await connection.close()


async def serving(port: int, process: asyncio.subprocess.Process, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        while True:
            if process.returncode is not None:
                raise SystemExit(f"a dispatcher exited with status {process.returncode}")
            with contextlib.suppress(grpc.aio.AioRpcError):
                request = health_pb2.HealthCheckRequest(service=POOL_DISPATCHER.health_service)
                if (await stub.Check(request, timeout=1)).status == health_pb2.HealthCheckResponse.SERVING:
                    return
            if time.monotonic() > deadline:
                raise SystemExit(f"the dispatcher on port {port} was not SERVING within {timeout:.0f} s")
            await asyncio.sleep(0.1)


async def _spawn_dispatcher(dsn: str, name: str, max_workers: int) -> Dispatcher:
    port = free_port()
    env = {
        **os.environ,
        "DATABASE_URL": dsn,
        "POOL_DISPATCHER_PORT": str(port),
        "POOL_DISPATCHER_METRICS_PORT": "0",  # two dispatchers on one host: each its own /metrics port
        "POOL_INSTANCE_ID": name,
        "STRATA_POOL_TOKEN": API_TOKEN,
        "POOL_MACHINE_TYPES": json.dumps(catalogue(max_workers)),
        "POOL_ENABLED_BACKENDS": "local",  # the reference worker as a child process (issue 23: local is opt-in)
        "POOL_DEFAULT_BACKEND": "local",  # the only one enabled: the default must be among them
        "POOL_HEALTH_POLL_SECONDS": "0.1",
        "LOG_LEVEL": "WARNING",
        "PYTHONUNBUFFERED": "1",
    }
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", POOL_DISPATCHER.package, env=env, cwd=ROOT, stdin=asyncio.subprocess.DEVNULL
    )
    await serving(port, process)
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    return Dispatcher(
        name=name, port=port, process=process, channel=channel, stub=pool_pb2_grpc.PoolDispatcherStub(channel)
    )


async def _warm(rig: PoolRig, workers: int, timeout: float = 90.0) -> None:
    """Queue a burst so placement boots `workers` machines, then wait until all of them are warm and idle."""
    first = rig.dispatchers[0].stub
    for i in range(workers * 4):
        request = pool_pb2.SubmitJobRequest(machine_type=TYPE)
        request.payload.data = f"warm-{i}".encode()
        await first.SubmitJob(request, metadata=auth())
    deadline = time.monotonic() + timeout
    while True:
        machines = await rig.machines()
        if len(machines) >= workers and all(m["state"] == "warm" for m in machines):
            return
        if time.monotonic() > deadline:
            raise SystemExit(f"{workers} warm workers wanted, have {[m['state'] for m in machines]}")
        await asyncio.sleep(0.2)


def edge_config(ports: list[int]) -> dict[str, Any]:
    """The edge as the dev stack builds it, its pool cluster holding a dispatcher process on each port."""
    spec = EdgeSpec(
        upstreams=upstreams((POOL_DISPATCHER,), ports={POOL_DISPATCHER.name: ports[0]}, host="127.0.0.1"),
        descriptor_set=ROOT / "build" / "thermostat.pb",
        listen_port=0,
        admin_port=0,
    )
    config = build_envoy_config(spec)
    for cluster in config["static_resources"]["clusters"]:
        if cluster["name"] == spec.upstreams[0].cluster:
            endpoints = cluster["load_assignment"]["endpoints"][0]["lb_endpoints"]
            template = json.dumps(endpoints[0])
            for port in ports[1:]:
                endpoints.append(json.loads(template.replace(str(ports[0]), str(port))))
    return config


EdgeConfig = Callable[[list[int]], dict[str, Any]]


async def _start_envoy(rig: PoolRig, workdir: Path, config_of: EdgeConfig = edge_config) -> EnvoyProcess:
    path = workdir / "envoy.yaml"
    path.write_text(json.dumps(config_of([d.port for d in rig.dispatchers])), encoding="utf-8")
    return await start_envoy(path, concurrency=1)


@contextlib.asynccontextmanager
async def pool_rig(
    *,
    processes: int,
    workers: int,
    edge: bool,
    edge_config_of: EdgeConfig = edge_config,
    over_tcp: bool = False,
    dsn: str | None = None,
) -> AsyncIterator[PoolRig]:
    """Postgres, `processes` dispatcher subprocesses sharing `workers` warm echo workers, and the edge (its
    config from `edge_config_of`, given the dispatchers' ports).

    Everything reaches Postgres over its Unix socket, as `make run`'s services do (`over_tcp`: TCP loopback).
    `dsn`: an empty database on a server the caller runs (bench/peers.py shares one with other queues)."""
    with contextlib.ExitStack() as servers, tempfile.TemporaryDirectory(prefix="pool-bench-") as tmp:
        if dsn is None:
            server = servers.enter_context(EmbeddedPostgres(servers.enter_context(embedded_data_dir()), durable=False))
            dsn = server.dsn if over_tcp else server.local_dsn
        await apply_migrations(dsn)
        rig = PoolRig(dsn=dsn)
        try:
            for i in range(processes):
                rig.dispatchers.append(await _spawn_dispatcher(dsn, f"bench-{'abcdefgh'[i]}", workers))
            await _warm(rig, workers)
            if edge:
                rig.envoy = await _start_envoy(rig, Path(tmp), edge_config_of)
            yield rig
        finally:
            if rig.envoy is not None:
                await rig.envoy.stop()
            for d in rig.dispatchers:
                await d.channel.close()
                if d.process.returncode is None:
                    d.process.terminate()
            for d in rig.dispatchers:
                try:
                    await asyncio.wait_for(d.process.wait(), 20)
                except TimeoutError:
                    d.process.kill()
                    await d.process.wait()


ROLES = (
    ("postgres", "postgres"),
    ("thermostat.worker", "workers"),
    ("pool_dispatcher", "dispatchers"),
    ("envoy", "envoy"),
)


def cpu_seconds(roles: tuple[tuple[str, str], ...] = ROLES) -> dict[str, float]:
    """CPU seconds (user + system) used so far by this process and every process under it, by role (the first
    of `roles` whose marker is in a process's command line)."""
    me = psutil.Process()
    totals: dict[str, float] = {}
    for process in [me, *me.children(recursive=True)]:
        with contextlib.suppress(psutil.Error):
            times = process.cpu_times()
            role = "bench process"
            if process.pid != me.pid:
                command = " ".join(process.cmdline())
                role = next((name for marker, name in roles if marker in command), "other")
            totals[role] = totals.get(role, 0.0) + times.user + times.system
    return totals


Call = Callable[[int], Awaitable[None]]
Runner = Callable[[int, int], Awaitable[float]]  # (first job number, jobs) -> jobs per second


BatchCall = Callable[[range], Awaitable[None]]


async def run_lanes(call: Call, first: int, jobs: int, lanes: int) -> float:
    """Jobs per second of `jobs` calls numbered from `first`, `lanes` at a time."""
    numbers = iter(range(first, first + jobs))

    async def lane() -> None:
        for n in numbers:
            await call(n)

    started = time.perf_counter()
    await asyncio.gather(*(lane() for _ in range(lanes)))
    return jobs / (time.perf_counter() - started)


async def run_batched_lanes(call: BatchCall, first: int, jobs: int, lanes: int, size: int) -> float:
    """Jobs per second of `jobs` jobs numbered from `first`, in batches of `size` (the last one may be smaller),
    `lanes` batches at a time."""
    end = first + jobs
    batches = iter(range(n, min(n + size, end)) for n in range(first, end, size))

    async def lane() -> None:
        for numbers in batches:
            await call(numbers)

    started = time.perf_counter()
    await asyncio.gather(*(lane() for _ in range(lanes)))
    return jobs / (time.perf_counter() - started)


def payload(n: int) -> bytes:
    return f'{{"job": {n}}}'.encode()


def health_caller(rig: PoolRig) -> Call:
    stubs = [health_pb2_grpc.HealthStub(d.channel) for d in rig.dispatchers]
    request = health_pb2.HealthCheckRequest(service=POOL_DISPATCHER.health_service)

    async def call(n: int) -> None:
        await stubs[n % len(stubs)].Check(request, timeout=120)

    return call


def grpc_caller(rig: PoolRig) -> Call:
    return grpc_caller_to([d.stub for d in rig.dispatchers])


def grpc_caller_to(stubs: list[pool_pb2_grpc.PoolDispatcherStub]) -> Call:
    """SubmitJobSync to `stubs` in turn, each result checked against its payload."""
    metadata = auth()

    async def call(n: int) -> None:
        request = pool_pb2.SubmitJobSyncRequest(machine_type=TYPE, wait_seconds="60")
        request.payload.data = payload(n)
        body = await stubs[n % len(stubs)].SubmitJobSync(request, metadata=metadata, timeout=120)
        if body.data != payload(n):
            raise SystemExit(f"gRPC job {n}: result {body.data!r} is not its payload")

    return call


class SharedStream:
    """One RunJobs stream that many callers share: each writes its job tagged with its number and awaits the
    answer carrying that tag (answers come back in the order jobs finish)."""

    def __init__(self, stub: pool_pb2_grpc.PoolDispatcherStub) -> None:
        self.call = stub.RunJobs(metadata=auth())
        self.waiting: dict[int, asyncio.Future[pool_pb2.RunJobsResponse]] = {}
        self.writing = asyncio.Lock()  # one write at a time on a call
        self.reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        async for response in self.call:
            self.waiting.pop(response.tag).set_result(response)

    async def run(self, tag: int, request: pool_pb2.RunJobsRequest) -> pool_pb2.RunJobsResponse:
        answer = asyncio.get_running_loop().create_future()
        self.waiting[tag] = answer
        async with self.writing:
            await self.call.write(request)
        return await answer

    async def close(self) -> None:
        await self.call.done_writing()
        await self.reader


@contextlib.asynccontextmanager
async def stream_caller(rig: PoolRig, streams: int) -> AsyncIterator[Call]:
    """Callers sharing `streams` RunJobs streams, spread over the dispatcher processes in turn."""
    shared = [SharedStream(rig.dispatchers[i % len(rig.dispatchers)].stub) for i in range(streams)]

    async def call(n: int) -> None:
        request = pool_pb2.RunJobsRequest(
            tag=n, job=pool_pb2.SubmitJobSyncRequest(machine_type=TYPE, wait_seconds="60")
        )
        request.job.payload.data = payload(n)
        answer = await shared[n % len(shared)].run(n, request)
        if answer.WhichOneof("outcome") != "result" or answer.result != payload(n):
            raise SystemExit(f"RunJobs job {n}: {answer}")

    try:
        yield call
    finally:
        for stream in shared:
            await stream.close()


def rest_caller(rig: PoolRig, session: aiohttp.ClientSession) -> Call:
    return rest_caller_at(rig.edge_url, session)


def rest_caller_at(edge_url: str, session: aiohttp.ClientSession) -> Call:
    """POST /v1/jobs/sync through the edge at `edge_url`, each answer checked against its payload."""
    url = f"{edge_url}/v1/jobs/sync?machine_type={TYPE}&wait_seconds=60"
    headers = {"Authorization": f"Bearer {API_TOKEN}", "X-Strata-Tenant": TENANT}

    async def call(n: int) -> None:
        async with session.post(url, data=payload(n), headers=headers) as response:
            body = await response.read()
            if response.status != 200 or body != payload(n):
                raise SystemExit(f"REST job {n}: HTTP {response.status} {body[:200]!r}")

    return call


def rest_batch_caller(rig: PoolRig, session: aiohttp.ClientSession) -> BatchCall:
    """POST /v1/jobs/batch: the jobs numbered `numbers` in one request, each answer checked against its job."""
    url = f"{rig.edge_url}/v1/jobs/batch"
    headers = {
        "Authorization": f"Bearer {API_TOKEN}",
        "X-Strata-Tenant": TENANT,
        "Content-Type": "application/json",
    }

    async def call(numbers: range) -> None:
        jobs = [
            {"machine_type": TYPE, "payload": base64.b64encode(payload(n)).decode(), "wait_seconds": 60}
            for n in numbers
        ]
        async with session.post(url, data=json.dumps({"jobs": jobs}), headers=headers) as response:
            body = await response.read()
            if response.status != 200:
                raise SystemExit(f"REST batch {numbers}: HTTP {response.status} {body[:200]!r}")
        entries = json.loads(body)
        if len(entries) != len(numbers):
            raise SystemExit(f"REST batch {numbers}: {len(entries)} answers for {len(numbers)} jobs")
        for n, entry in zip(numbers, entries, strict=True):
            if entry.get("status") != 200 or base64.b64decode(entry.get("result", "")) != payload(n):
                raise SystemExit(f"REST batch job {n}: {str(entry)[:200]}")

    return call


async def check_exactly_once(dsn: str, expected: int) -> str:
    """Every job completed once: one usage event per job, nothing left in another state."""
    connection = await asyncpg.connect(dsn)
    try:
        row = await connection.fetchrow(
            """
            SELECT (SELECT count(*) FROM pool_jobs) AS jobs,
                   (SELECT count(*) FROM pool_jobs WHERE state = 'completed') AS completed,
                   (SELECT count(*) FROM pool_usage) AS usage,
                   (SELECT count(DISTINCT job_id) FROM pool_usage) AS usage_jobs,
                   (SELECT count(*) FROM pool_jobs j WHERE state = 'completed'
                      AND NOT EXISTS (SELECT 1 FROM pool_usage u WHERE u.job_id = j.id)) AS unmetered
            """
        )
    finally:
        await connection.close()
    ok = row["jobs"] == row["completed"] == row["usage"] == row["usage_jobs"] == expected and row["unmetered"] == 0
    verdict = "exactly once: yes" if ok else "exactly once: NO"
    return (
        f"{verdict} — {row['jobs']} job rows (expected {expected}), {row['completed']} completed, "
        f"{row['usage']} usage events for {row['usage_jobs']} distinct jobs, {row['unmetered']} completed without usage"
    )


@contextlib.asynccontextmanager
async def calibration_loop(dsn: str, lanes: int) -> AsyncIterator[tuple[Runner, Runner]]:
    """bench/pool_calibration.py's loop (its schema, worker and run_loop) in a scratch database, as runners
    of `jobs` jobs at `lanes` (the first job number is unused: the loop inserts its own jobs): as it is, and
    with its completion sending a NOTIFY to two listening connections, as the pool's complete statement does."""
    admin = await asyncpg.connect(dsn)
    await admin.execute(f"DROP DATABASE IF EXISTS {calibration.SCRATCH} WITH (FORCE)")
    await admin.execute(f"CREATE DATABASE {calibration.SCRATCH}")
    client = WorkerClient()
    backend = LocalBackend(client)
    try:
        handle = await calibration.boot_worker(backend)

        async def hop(data: bytes) -> bytes:
            reply = await client.execute(handle.endpoint, calibration.TOKEN, data, deadline_seconds=30)
            return reply.body

        scratch = database_dsn(dsn, calibration.SCRATCH)
        pool = await asyncpg.create_pool(scratch, min_size=lanes, max_size=lanes)
        try:
            async with pool.acquire() as connection:
                await connection.execute(calibration.SCHEMA)

            async def run(_first: int, jobs: int) -> float:
                return await calibration.run_loop(pool, hop, jobs, lanes)

            async def run_notifying(_first: int, jobs: int) -> float:
                return await calibration.run_loop(pool, hop, jobs, lanes, complete=calibration.COMPLETE_NOTIFY)

            listeners = [await asyncpg.connect(scratch) for _ in range(2)]  # as two dispatcher processes listen
            try:
                for listener in listeners:
                    await listener.add_listener("calibration_done", lambda *_: None)
                yield run, run_notifying
            finally:
                for listener in listeners:
                    await listener.close()
        finally:
            await pool.close()
    finally:
        await backend.aclose()
        await client.aclose()
        await admin.execute(f"DROP DATABASE IF EXISTS {calibration.SCRATCH} WITH (FORCE)")
        await admin.close()


CALIBRATION = "calibration loop (4 SQL + 1 HTTP)"
NOTIFYING = "calibration loop + NOTIFY, 2 listening"
FLOOR = "gRPC Health.Check (no job), 2 processes"


STREAM = "gRPC RunJobs stream, 2 processes"
REST = "REST /v1/jobs/sync via Envoy"


def rest_batch_path(size: int) -> str:
    return f"REST /v1/jobs/batch of {size} via Envoy"


async def main(jobs: int, lanes: int, rounds: int, calibrate: bool, streams: int, batches: list[int]) -> None:
    print(
        f"{jobs} jobs per path in {rounds} interleaved rounds, {lanes} concurrent callers "
        f"({streams} RunJobs streams shared by them on the stream path; on the REST batch paths each caller "
        f"posts {' / '.join(map(str, batches))} jobs a request); at start: {load_line()}",
        flush=True,
    )
    rates: dict[str, list[float]] = {}
    cpu: dict[str, dict[str, float]] = {}  # path -> role -> CPU seconds over its measured rounds
    measured: dict[str, int] = {}
    async with (
        pool_rig(processes=2, workers=4, edge=True) as rig,
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session,
        contextlib.AsyncExitStack() as stack,
    ):

        def lanes_of(call: Call) -> Runner:
            return lambda first, count: run_lanes(call, first, count, lanes)

        paths: dict[str, Runner] = {
            "gRPC SubmitJobSync, 2 processes": lanes_of(grpc_caller(rig)),
            STREAM: lanes_of(await stack.enter_async_context(stream_caller(rig, streams))),
            REST: lanes_of(rest_caller(rig, session)),
        }
        batch_call = rest_batch_caller(rig, session)
        for size in batches:
            paths[rest_batch_path(size)] = functools.partial(run_batched_lanes, batch_call, lanes=lanes, size=size)
        paths[FLOOR] = lanes_of(health_caller(rig))
        if calibrate:
            paths[CALIBRATION], paths[NOTIFYING] = await stack.enter_async_context(calibration_loop(rig.dsn, lanes))
        numbered = 0
        for runner in paths.values():
            await runner(numbered, WARMUP)
            numbered += WARMUP
        order = list(paths.items())
        per_round = max(1, jobs // rounds)
        for r in range(rounds):  # rotate which path goes first, so load drifts hit every path alike
            for name, runner in order[r % len(order) :] + order[: r % len(order)]:
                before = cpu_seconds()
                rates.setdefault(name, []).append(await runner(numbered, per_round))
                after = cpu_seconds()
                spent = cpu.setdefault(name, {})
                for role, seconds in after.items():
                    spent[role] = spent.get(role, 0.0) + max(0.0, seconds - before.get(role, 0.0))
                measured[name] = measured.get(name, 0) + per_round
                numbered += per_round
        await asyncio.sleep(0.5)  # the warm-up burst's last completions
        pool_jobs = 4 * 4 + sum(
            WARMUP + per_round * rounds for name in paths if name not in (CALIBRATION, NOTIFYING, FLOOR)
        )
        verdict = await check_exactly_once(rig.dsn, pool_jobs)
    results = {name: statistics.median(values) for name, values in rates.items()}
    print(f"\n{'path (median of rounds)':<40}{'jobs/s':>9}{'× goal':>9}{'× calibration':>15}   rounds")
    calib = results.get(CALIBRATION)
    for name, rate in results.items():
        versus = f"{rate / calib:>14.2f}x" if calib else f"{'—':>15}"
        spread = " ".join(f"{v:.0f}" for v in rates[name])
        print(f"{name:<40}{rate:>9.0f}{rate / 1000:>8.2f}x{versus}   {spread}")
    print(f"goal: ≥ 1,000 jobs/s (× goal ≥ 1.00); {verdict}")
    cores = os.cpu_count() or 1
    roles = [
        role
        for role in ("bench process", "dispatchers", "postgres", "workers", "envoy", "other")
        if any(role in spent for spent in cpu.values())
    ]
    print(
        f"\n{'CPU per job, µs (all rounds)':<40}{'total':>7}"
        + "".join(f"{r:>15}" for r in roles)
        + f"{f'{cores} cores ÷ total':>18}"
    )
    for name, spent in cpu.items():
        per_job = {role: seconds / measured[name] * 1e6 for role, seconds in spent.items()}
        total = sum(per_job.values())
        row = "".join(f"{per_job.get(r, 0.0):>15.0f}" for r in roles)
        print(f"{name:<40}{total:>7.0f}{row}{cores / total * 1e6:>12.0f} jobs/s")
    print(f"at end: {load_line()}")


def batch_sizes(text: str) -> list[int]:
    """`--batch`: one size or a comma-separated list, each 1 to MAX_BATCH_JOBS."""
    try:
        sizes = [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: sizes must be integers, e.g. 16 or 4,8,16") from None
    if not all(1 <= size <= MAX_BATCH_JOBS for size in sizes):
        raise argparse.ArgumentTypeError(f"{text!r}: each size must be 1 to {MAX_BATCH_JOBS}")
    return list(dict.fromkeys(sizes))


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=3000, help="measured jobs per path (default 3000)")
    parser.add_argument("--clients", type=int, default=32, help="concurrent callers per path (default 32)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds per path (default 3)")
    parser.add_argument(
        "--streams", type=int, default=4, help="RunJobs streams the callers share, over both processes (default 4)"
    )
    parser.add_argument(
        "--batch",
        type=batch_sizes,
        default=[DEFAULT_BATCH],
        help=f"jobs per request on the REST batch path; a comma-separated list measures each size as a path "
        f"(default {DEFAULT_BATCH}; at most {MAX_BATCH_JOBS})",
    )
    parser.add_argument("--no-calibration", action="store_true", help="skip the calibration loop")
    parser.add_argument(
        "--loop",
        choices=("uvloop", "asyncio"),
        default="uvloop",
        help="this process's event loop, the callers' and the calibration loop's (default uvloop, as the services run)",
    )
    args = parser.parse_args()
    choice = choose_loop(args.loop)
    print(f"callers on {choice.name}" + (f" ({choice.fallback})" if choice.fallback else ""), flush=True)
    run_on(main(args.jobs, args.clients, args.rounds, not args.no_calibration, args.streams, args.batch), choice)


if __name__ == "__main__":
    cli()
