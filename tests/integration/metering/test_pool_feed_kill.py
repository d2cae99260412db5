"""kill -9 of a real pool dispatcher process mid-job: the ledger records the outage, and once the pool is
back (same instance id, same address) reads on from its position: every usage event the pool recorded lands
once (checked against the pool's own rows and by summing durations), the killed job none."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator

import grpc
import psutil
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.fixtures.polling import eventually
from tests.fixtures.services import INTERNAL_TOKEN
from tests.integration.metering.test_pool_feed import ledger_jobs, pool_jobs, pool_ledger, stored_position
from tests.integration.pool_dispatcher.conftest import ADMIN_TOKEN, API_TOKEN, TEST_BACKENDS, caller, sleepy_type
from thermostat.chassis.internal_auth import INTERNAL_TOKEN_ENV
from thermostat.chassis.ports import free_port
from thermostat.pool.v1 import pool_pb2, pool_pb2_grpc
from thermostat.store.db import Store


@contextlib.contextmanager
def pool_process(database_url: str, port: int) -> Iterator[subprocess.Popen[bytes]]:
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "POOL_DISPATCHER_PORT": str(port),
        "STRATA_POOL_TOKEN": API_TOKEN,
        "STRATA_POOL_ADMIN_TOKEN": ADMIN_TOKEN,
        "POOL_MACHINE_TYPES": json.dumps([sleepy_type()]),
        "POOL_ENABLED_BACKENDS": TEST_BACKENDS,
        # a restart under the same id takes the killed one's rows back at once
        "POOL_INSTANCE_ID": "alpha",
        "POOL_HEALTH_POLL_SECONDS": "0.05",
        INTERNAL_TOKEN_ENV: INTERNAL_TOKEN,
        "LOG_LEVEL": "WARNING",
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "thermostat.pool_dispatcher"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(10)


async def run_jobs(stub: pool_pb2_grpc.PoolDispatcherStub, count: int) -> None:
    for _ in range(count):
        request = pool_pb2.SubmitJobSyncRequest(machine_type="sleepy", wait_seconds="60")
        request.payload.data = b"0"
        await stub.SubmitJobSync(request, metadata=caller("acme"), wait_for_ready=True, timeout=60)


async def serving_again(channel: grpc.aio.Channel) -> None:
    """Until the restarted process answers on `channel`. The channel's transport to the killed process may not have
    seen the kill yet (nothing was sent on it since): the first call then fails UNAVAILABLE ("Stream removed",
    EPIPE) with wait_for_ready, so an idempotent health check takes that failure, never a submit."""
    health = health_pb2_grpc.HealthStub(channel)

    async def answered() -> bool | None:
        try:
            await health.Check(health_pb2.HealthCheckRequest(), wait_for_ready=True, timeout=5)
        except grpc.aio.AioRpcError as error:
            if error.code() is not grpc.StatusCode.UNAVAILABLE:
                raise
            return None
        return True

    await eventually(answered, timeout=60, every=0.1)


async def test_kill_9_of_the_pool_mid_job_loses_nothing_and_doubles_nothing(db_store: Store, database_url: str) -> None:
    port = free_port()
    address = f"127.0.0.1:{port}"
    workers: list[int] = []
    try:
        async with (
            grpc.aio.insecure_channel(address) as channel,
            pool_ledger(address, db_store) as (ledger, feed, repo),
        ):
            stub = pool_pb2_grpc.PoolDispatcherStub(channel)
            with pool_process(database_url, port) as first:
                await run_jobs(stub, 3)
                request = pool_pb2.SubmitJobRequest(machine_type="sleepy")
                request.payload.data = b"30"
                long_job = await stub.SubmitJob(request, metadata=caller("acme"))

                async def running() -> bool | None:
                    job = await stub.GetJob(pool_pb2.GetJobRequest(id=long_job.id), metadata=caller("acme"))
                    return True if job.state == "running" else None

                await eventually(running, timeout=30, every=0.02)
                assert await ledger.catch_up(feed) == 3
                workers += [
                    int(p.removeprefix("local-"))
                    for p in await db_store.pool.fetchval("SELECT array_agg(provider_id) FROM pool_machines")
                ]
                first.send_signal(signal.SIGKILL)
                await asyncio.to_thread(first.wait, 10)

            feed.timeout = 1
            await ledger.run_once()
            (status,) = await repo.feeds()
            # a dead peer reads as a refused connection or a call that ran out of time, as the channel's state has it
            assert status.error in ("unreadable (DEADLINE_EXCEEDED)", "unreadable (UNAVAILABLE)")
            assert status.position == 3

            with pool_process(database_url, port):
                feed.timeout = 30
                await serving_again(channel)
                await run_jobs(stub, 2)
                await ledger.run_once()
    finally:
        for pid in workers:  # the killed dispatcher's worker, if its successor has not stopped it yet
            with contextlib.suppress(psutil.NoSuchProcess):
                psutil.Process(pid).kill()
    assert await ledger_jobs(db_store.pool) == await pool_jobs(db_store.pool)
    assert await stored_position(db_store.pool) == 5
    assert long_job.id not in await ledger_jobs(db_store.pool)
    billed = await db_store.pool.fetchval("SELECT sum(duration_seconds) FROM ledger_pool_usage")
    assert billed == await db_store.pool.fetchval("SELECT sum(duration_seconds) FROM pool_usage")
