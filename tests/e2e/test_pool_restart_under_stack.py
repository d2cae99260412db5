"""The issue's own measurement, through the dev stack (`make run`'s Stack): a SIGTERM to the pool dispatcher alone,
which the stack starts again, used to fail the job it was running and make the next job boot a new machine. Now the
job finishes and its caller gets the result, the restarted process adopts the warm machine, and the next job runs
on it; only the stack's own stop (Ctrl-C) ends the machine."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import grpc
import psutil
import pytest

from tests.chaos.kill_stack import POOL_TOKEN, SHORT_LEASES, echo_type
from tests.fixtures.postgres import embedded_data_dir
from thermostat.chassis.registry import POOL_DISPATCHER
from thermostat.dev.stack.supervisor import Stack, StackConfig
from thermostat.pool.v1 import pool_pb2, pool_pb2_grpc

pytestmark = pytest.mark.e2e

CALLER = (("authorization", f"Bearer {POOL_TOKEN}"), ("x-strata-tenant", "acme"))


@contextlib.asynccontextmanager
async def pool_stack(tmp: Path) -> AsyncIterator[Stack]:
    """One pool dispatcher under the dev stack, restarted when it exits, with the stack's own default of local
    machines that outlive it (the chaos suite's short leases otherwise)."""
    env = {k: v for k, v in SHORT_LEASES.items() if k != "POOL_LOCAL_MACHINES_OUTLIVE_PROCESS"}
    env |= {
        "POOL_MACHINE_TYPES": json.dumps([echo_type(tmp / "journal", max_workers=1)]),
        "POOL_LEASE_SECONDS": "600",  # nothing here may be explained by a lease lapsing
        "POOL_SHUTDOWN_GRACE_SECONDS": "30",
    }
    with embedded_data_dir() as data_dir:
        stack = Stack(
            StackConfig(
                data_dir=data_dir,
                runpod_base_url="http://127.0.0.1:9",
                runpod_api_key="unused",
                edge_port=0,
                admin_port=0,
                services=(POOL_DISPATCHER,),
                extra_env=env,
                relay_logs=False,
                durable_db=False,
                restart_children=True,
                edge=False,
            )
        )
        await stack.start()
        try:
            yield stack
        finally:
            await stack.stop()


async def sync_job(stub: pool_pb2_grpc.PoolDispatcherStub, seconds: float) -> bytes:
    request = pool_pb2.SubmitJobSyncRequest(machine_type="echo", wait_seconds="60")
    request.payload.data = json.dumps({"seconds": seconds}).encode()
    reply = await stub.SubmitJobSync(request, metadata=CALLER, timeout=60)
    return bytes(reply.data)


def alive(pid: int) -> bool:
    with contextlib.suppress(psutil.NoSuchProcess):
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    return False


async def test_a_sigterm_to_the_pool_dispatcher_alone_finishes_its_job_and_its_restart_keeps_the_machine(
    tmp_path: Path,
) -> None:
    async with pool_stack(tmp_path) as stack:
        [child] = stack.replicas(POOL_DISPATCHER)
        db = await asyncpg.connect(stack.database_url)
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{child.port}") as channel:
                stub = pool_pb2_grpc.PoolDispatcherStub(channel)
                assert await sync_job(stub, 0) == b"slept 0"  # boots the machine
                [before] = await db.fetch("SELECT id, provider_id FROM pool_machines")
                running = asyncio.ensure_future(sync_job(stub, 2))
                while not await db.fetchval("SELECT count(*) FROM pool_jobs WHERE state = 'running'"):
                    await asyncio.sleep(0.02)
                first_pid = child.process.pid
                child.process.send_signal(signal.SIGTERM)  # the dispatcher alone: the stack starts it again
                assert await running == b"slept 2"  # the job in flight finished; its caller got the result
            while child.process.pid == first_pid or child.process.returncode is not None:
                await asyncio.sleep(0.1)  # the stack's restart (after its first backoff)
            await stack.wait_serving(child, POOL_DISPATCHER, timeout=120)
            async with grpc.aio.insecure_channel(f"127.0.0.1:{child.port}") as channel:
                assert await sync_job(pool_pb2_grpc.PoolDispatcherStub(channel), 0) == b"slept 0"
            after = await db.fetch("SELECT id, provider_id, owner FROM pool_machines")
            assert [(r["id"], r["provider_id"]) for r in after] == [(before["id"], before["provider_id"])]  # no boot
            failed = await db.fetchval("SELECT count(*) FROM pool_jobs WHERE state <> 'completed'")
            assert failed == 0
        finally:
            await db.close()
        pid = int(before["provider_id"].removeprefix("local-"))
        assert alive(pid)
        await stack.stop()  # Ctrl-C: the stack goes away, and the machine with it
        assert not alive(pid)
