"""Two real dispatcher processes (`python -m thermostat.pool_dispatcher`) over the test's database, each with
its own POOL_INSTANCE_ID and port, running reference workers through the local backend. The workers journal
every payload they receive (STRATA_WORKER_JOURNAL), so "exactly once" is checked from the workers' side as
well as from the usage feed. Every wait is on an observable condition (rows, pids, a port answering), each
bounded in real time."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import hashlib
import json
import os
import signal
import sys
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import grpc
import psutil

from tests.fixtures.polling import eventually
from tests.integration.pool_dispatcher.conftest import ADMIN, caller, local_type, pool_env, sleepy_type
from thermostat.chassis.ports import free_port
from thermostat.pool.v1 import pool_pb2, pool_pb2_grpc
from thermostat.pool_dispatcher.dispatcher import lease_name
from thermostat.pool_dispatcher.settings import PoolDispatcherSettings

TERMINAL = ("completed", "failed", "timed_out", "cancelled")


@dataclass
class DispatcherProcess:
    instance_id: str
    process: asyncio.subprocess.Process
    stub: pool_pb2_grpc.PoolDispatcherStub

    async def run(self, payload: bytes, machine_type: str = "local") -> bytes:
        request = pool_pb2.SubmitJobSyncRequest(machine_type=machine_type, wait_seconds="60")
        request.payload.data = payload
        body: Any = await self.stub.SubmitJobSync(request, metadata=caller())
        return bytes(body.data)

    async def submit(self, payload: bytes, machine_type: str, tenant: str = "acme") -> str:
        request = pool_pb2.SubmitJobRequest(machine_type=machine_type)
        request.payload.data = payload
        job: Any = await self.stub.SubmitJob(request, metadata=caller(tenant))
        return str(job.id)

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)


@contextlib.asynccontextmanager
async def dispatcher_process(
    database_url: str,
    instance_id: str,
    types: list[dict[str, Any]],
    *,
    unset: tuple[str, ...] = (),
    **overrides: str,
) -> AsyncIterator[DispatcherProcess]:
    port = free_port()
    env = {
        k: v for k, v in os.environ.items() if k.lower() not in PoolDispatcherSettings.model_fields and k not in unset
    }
    env.update(
        pool_env(
            types,
            DATABASE_URL=database_url,
            POOL_INSTANCE_ID=instance_id,
            POOL_DISPATCHER_PORT=str(port),
            POOL_SCALER_SECONDS="0.2",
            LOG_LEVEL="WARNING",
            **overrides,
        )
    )
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "thermostat.pool_dispatcher", env=env, stdout=asyncio.subprocess.DEVNULL
    )
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    stub = pool_pb2_grpc.PoolDispatcherStub(channel)

    async def serving() -> bool | None:
        assert process.returncode is None, f"dispatcher {instance_id} exited with {process.returncode}"
        try:
            await stub.GetPoolHealth(pool_pb2.GetPoolHealthRequest(), timeout=1)
        except grpc.aio.AioRpcError:
            return None
        return True

    try:
        await eventually(serving, timeout=60, every=0.1)
        yield DispatcherProcess(instance_id=instance_id, process=process, stub=stub)
    finally:
        await channel.close()
        if process.returncode is None:
            process.terminate()  # a graceful stop: its machines are stopped, its lease released
            try:
                await asyncio.wait_for(process.wait(), 30)
            except TimeoutError:
                process.kill()
                await process.wait()


def journalled(journal: Path) -> collections.Counter[str]:
    """How often each payload (by sha256) reached a worker."""
    text = journal.read_text() if journal.exists() else ""
    return collections.Counter(text.split())


def digest(payload: bytes) -> str:
    return hashlib.sha256(payload).hexdigest()


def worker_pid(provider_id: str) -> int:
    return int(provider_id.removeprefix("local-"))


def not_running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


async def test_two_hundred_jobs_alternating_between_two_processes_run_exactly_once(
    database_url: str, tmp_path: Path
) -> None:
    journal = tmp_path / "journal"
    types = [local_type(max_workers=2, cool_down_seconds=600, env={"STRATA_WORKER_JOURNAL": str(journal)})]
    db = await asyncpg.connect(database_url)
    try:
        async with (
            dispatcher_process(database_url, "alpha", types, POOL_MAX_WORKERS_TOTAL="2") as alpha,
            dispatcher_process(database_url, "beta", types, POOL_MAX_WORKERS_TOTAL="2") as beta,
        ):
            pools = (alpha, beta)
            # every third result is over the size a completion's notification carries: a sync wait in the other
            # process reads that one back, and takes the small ones from the notification
            payloads = [
                f"job-{i}-{uuid.uuid4()}-".encode() + (b"\xff\x00" * 1500 if i % 3 == 0 else b"") for i in range(200)
            ]
            gate = asyncio.Semaphore(16)
            most_machines = 0
            done = asyncio.Event()

            async def watch_fleet() -> None:  # the fleet's size, read while the jobs run
                nonlocal most_machines
                while not done.is_set():
                    most_machines = max(most_machines, await db.fetchval("SELECT count(*) FROM pool_machines"))
                    await asyncio.sleep(0.01)

            async def one(i: int) -> bytes:
                async with gate:
                    return await pools[i % 2].run(payloads[i])

            watcher = asyncio.create_task(watch_fleet())
            async with asyncio.timeout(120):
                bodies = await asyncio.gather(*(one(i) for i in range(200)))
            done.set()
            await watcher

            assert bodies == payloads  # each caller got its own payload echoed back
            assert journalled(journal) == collections.Counter(digest(p) for p in payloads)  # each reached a worker once
            usage = await alpha.stub.ListUsage(pool_pb2.ListUsageRequest(page_size=1000), metadata=ADMIN)
            assert len(usage.events) == 200 and len({e.job_id for e in usage.events}) == 200
            assert {e.terminal_state for e in usage.events} == {"completed"}
            assert await db.fetchval("SELECT count(*) FROM pool_jobs WHERE state = 'completed'") == 200
            assert most_machines <= 2
            assert await db.fetchval("SELECT count(DISTINCT worker_id) FROM pool_jobs") <= 2
    finally:
        await db.close()


async def test_a_killed_process_has_its_jobs_failed_and_its_machines_stopped_by_the_other_after_the_lease(
    database_url: str, tmp_path: Path
) -> None:
    journal = tmp_path / "journal"
    types = [sleepy_type(env={"STRATA_WORKER_JOURNAL": str(journal)})]
    db = await asyncpg.connect(database_url)
    try:
        # beta starts once alpha runs both jobs: with both up, beta's scaler pass may place a job alpha queued,
        # and the jobs to reclaim must be alpha's
        async with dispatcher_process(database_url, "alpha", types, POOL_LEASE_SECONDS="2") as alpha:
            payloads = [json.dumps({"seconds": 120, "n": n}).encode() for n in range(2)]
            tenants = ("acme", "globex")  # one machine each
            jobs = [await alpha.submit(p, "sleepy", t) for p, t in zip(payloads, tenants, strict=True)]

            async def in_flight() -> list[int] | None:
                rows = await db.fetch(
                    "SELECT m.provider_id FROM pool_jobs j JOIN pool_machines m ON m.id = j.worker_id "
                    "WHERE j.state = 'running' AND j.owner = 'alpha'"
                )
                seen = journalled(journal)
                if len(rows) < 2 or any(seen[digest(p)] != 1 for p in payloads):
                    return None
                return [worker_pid(r["provider_id"]) for r in rows]

            pids = await eventually(in_flight, timeout=60, every=0.05)
            async with dispatcher_process(database_url, "beta", types, POOL_LEASE_SECONDS="2") as beta:
                alpha.kill()
                await alpha.process.wait()
                expiry = await db.fetchval("SELECT expires_at FROM leases WHERE name = $1", lease_name("alpha"))

                async def reclaimed() -> bool | None:
                    states = await db.fetch("SELECT state FROM pool_jobs WHERE id = ANY($1::uuid[])", jobs)
                    machines = await db.fetchval("SELECT count(*) FROM pool_machines")
                    return True if machines == 0 and all(r["state"] == "failed" for r in states) else None

                await eventually(reclaimed, timeout=30, every=0.05)
                rows = await db.fetch("SELECT error, completed_at FROM pool_jobs WHERE id = ANY($1::uuid[])", jobs)
                for row in rows:
                    assert "alpha" in row["error"] and "lease" in row["error"]
                    assert row["completed_at"] >= expiry  # not before alpha's lease ran out (database clock)
                assert await db.fetchval("SELECT count(*) FROM pool_usage") == 0
                assert all(not_running(pid) for pid in pids)
                # the survivor still serves: a new job runs on a machine of its own
                job = await beta.submit(b"0", "sleepy")

                async def finished() -> str | None:
                    state = await db.fetchval("SELECT state FROM pool_jobs WHERE id = $1::uuid", job)
                    return state if state in TERMINAL else None

                assert await eventually(finished, timeout=60, every=0.05) == "completed"
    finally:
        await db.close()


async def test_a_killed_process_restarted_under_its_id_takes_its_rows_back_at_once(
    database_url: str, tmp_path: Path
) -> None:
    journal = tmp_path / "journal"
    types = [sleepy_type(env={"STRATA_WORKER_JOURNAL": str(journal)})]
    db = await asyncpg.connect(database_url)
    try:
        async with dispatcher_process(database_url, "alpha", types, POOL_LEASE_SECONDS="600") as alpha:
            payload = json.dumps({"seconds": 120}).encode()
            job = await alpha.submit(payload, "sleepy")

            async def running() -> int | None:
                provider = await db.fetchval(
                    "SELECT m.provider_id FROM pool_jobs j JOIN pool_machines m ON m.id = j.worker_id "
                    "WHERE j.id = $1::uuid AND j.state = 'running'",
                    job,
                )
                return None if provider is None or not journalled(journal)[digest(payload)] else worker_pid(provider)

            pid = await eventually(running, timeout=60, every=0.05)
            term = await db.fetchval("SELECT term FROM leases WHERE name = $1", lease_name("alpha"))
            alpha.kill()
            await alpha.process.wait()
        # the lease has ten minutes left: only the restart under the same id can take the rows back now
        async with (
            asyncio.timeout(60),
            dispatcher_process(database_url, "alpha", types, POOL_LEASE_SECONDS="600") as again,
        ):
            row = await db.fetchrow("SELECT state, error FROM pool_jobs WHERE id = $1::uuid", job)
            assert row["state"] == "failed" and "restarted" in row["error"]
            assert await db.fetchval("SELECT term FROM leases WHERE name = $1", lease_name("alpha")) == term + 1
            assert await db.fetchval("SELECT count(*) FROM pool_usage") == 0
            assert not_running(pid)

            async def old_machine_gone() -> bool | None:
                return True if await db.fetchval("SELECT count(*) FROM pool_machines") == 0 else None

            await eventually(old_machine_gone, timeout=30, every=0.05)
            assert (await again.run(b"after the restart", "sleepy")) == b"slept 0"
    finally:
        await db.close()


async def test_a_process_with_grpc_fork_support_on_starts_local_workers_while_grpc_calls_are_in_flight(
    database_url: str, tmp_path: Path
) -> None:
    """Production does not set GRPC_ENABLE_FORK_SUPPORT=0 (the tests do, conftest.py): the local backend forks
    only through the C fork path to exec its launcher (no preexec_fn, no Python between fork and exec), so
    starting machines while gRPC calls run stays safe with gRPC's fork handlers installed."""
    journal = tmp_path / "journal"
    types = [local_type(max_workers=8, boot_timeout_seconds=20, env={"STRATA_WORKER_JOURNAL": str(journal)})]
    async with dispatcher_process(database_url, "forks", types, unset=("GRPC_ENABLE_FORK_SUPPORT",)) as pool:
        payloads = [f"fork-{i}-{uuid.uuid4()}".encode() for i in range(40)]
        async with asyncio.timeout(90):  # eight machines start while forty sync calls are in flight
            bodies = await asyncio.gather(*(pool.run(p) for p in payloads))
        assert bodies == payloads
        assert journalled(journal) == collections.Counter(digest(p) for p in payloads)
        assert pool.process.returncode is None
        workers = await pool.stub.ListWorkers(pool_pb2.ListWorkersRequest(), metadata=ADMIN)
        assert workers.workers and {w.state for w in workers.workers} <= {"warm", "busy"}
