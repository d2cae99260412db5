"""One wake per pod at a time: joiners in a replica, across replicas, after a disconnect, after a crash."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import AsyncIterator, Mapping
from pathlib import Path

import grpc

from tests.fixtures.polling import eventually
from tests.fixtures.postgres import open_store
from tests.fixtures.services import VOLUME, pod_controller_env
from tests.integration.pod_controller.harness import (
    A100,
    controller,
    created_gpus,
    pods_on,
    start,
    wakes,
)
from thermostat.chassis.ports import free_port
from thermostat.dev.simulators.runpod.server import RunPodSimulator
from thermostat.pods.v1 import pods_pb2_grpc

ROOT = Path(__file__).resolve().parents[3]
# A caller that gives up mid-wake: its deadline must outlast reaching the handler on a loaded machine (a call that
# expires first never starts the wake) and end well inside the boot. 30 polls of 0.2 s outlast the boot.
IMPATIENT_DEADLINE = 1.0
IMPATIENT_BOOT = 3.0


async def test_two_overlapping_starts_on_one_controller_run_one_wake(runpod_sim, db_store) -> None:
    """A double tap while the new pod provisions: one create walk, one wake row, both callers get its pod."""
    runpod_sim.configure(provisioning_seconds=0.3)
    async with controller(runpod_sim, db_store) as c:
        first, second = await asyncio.gather(start(c.public), start(c.public))
        assert first.reply is not None and second.reply is not None
        assert first.reply.outcome == second.reply.outcome == "Created"
        assert first.reply.pod_id == second.reply.pod_id
        assert len(created_gpus(runpod_sim)) == 2  # one walk: the 400 on the RTX PRO 4500, then the A100
        assert len(pods_on(runpod_sim, VOLUME)) == 1
        assert len(await wakes(c.public)) == 1


async def test_two_replicas_woken_at_the_same_moment_make_one_create_and_share_its_result(
    runpod_sim, database_url
) -> None:
    """Two controllers on one database (separate pools): exactly one POST /v2/pods, both get its pod id."""
    runpod_sim.configure(provisioning_seconds=0.3)
    async with (
        await open_store(database_url, max_size=4, application_name="replica-a") as store_a,
        await open_store(database_url, max_size=4, application_name="replica-b") as store_b,
        controller(runpod_sim, store_a, RUNPOD_GPU_ALLOWLIST=A100) as a,
        controller(runpod_sim, store_b, RUNPOD_GPU_ALLOWLIST=A100) as b,
    ):
        first, second = await asyncio.gather(start(a.public), start(b.public))
        assert first.reply is not None and second.reply is not None
        assert created_gpus(runpod_sim) == [A100]
        (pod,) = pods_on(runpod_sim, VOLUME)
        assert first.reply.pod_id == second.reply.pod_id == pod["id"]
        assert first.reply.outcome == second.reply.outcome == "Created"
        assert len(await wakes(a.public)) == 1


async def test_a_caller_that_gives_up_mid_wake_does_not_abort_it_and_a_retry_joins_it(runpod_sim, db_store) -> None:
    """A 1 s deadline during a 3 s boot: the wake completes anyway, the retry gets its pod, one create."""
    runpod_sim.configure(provisioning_seconds=IMPATIENT_BOOT)
    async with controller(runpod_sim, db_store, RUNPOD_GPU_ALLOWLIST=A100, RUNPOD_WAKE_POLL_SECONDS="0.2") as c:
        assert await wakes(c.public) == []  # the channel is connected: the impatient call's deadline is all server
        impatient = await start(c.public, timeout=IMPATIENT_DEADLINE)
        assert impatient.code is grpc.StatusCode.DEADLINE_EXCEEDED
        retry = await start(c.public)
        assert retry.reply is not None
        assert retry.reply.outcome == "Created"
        (pod,) = pods_on(runpod_sim, VOLUME)
        assert retry.reply.pod_id == pod["id"]
        assert created_gpus(runpod_sim) == [A100]
        (wake,) = await wakes(c.public)
        assert (wake.outcome, wake.wake_outcome, wake.pod_id) == ("Succeeded", "Created", pod["id"])


async def test_a_wake_abandoned_by_a_client_still_completes_and_is_recorded(runpod_sim, db_store) -> None:
    """Nobody waits for the result: the detached wake still creates, polls to RUNNING and records completion."""
    runpod_sim.configure(provisioning_seconds=IMPATIENT_BOOT)
    async with controller(runpod_sim, db_store, RUNPOD_GPU_ALLOWLIST=A100, RUNPOD_WAKE_POLL_SECONDS="0.2") as c:
        assert await wakes(c.public) == []  # the channel is connected: the impatient call's deadline is all server
        impatient = await start(c.public, timeout=IMPATIENT_DEADLINE)
        assert impatient.code is grpc.StatusCode.DEADLINE_EXCEEDED

        async def completed() -> object | None:
            done = [w for w in await wakes(c.public) if w.outcome]
            return done or None

        (wake,) = await eventually(completed, timeout=30, every=0.05)
        assert (wake.outcome, wake.wake_outcome) == ("Succeeded", "Created")
        (pod,) = pods_on(runpod_sim, VOLUME)
        assert pod["status"] == "RUNNING"


@contextlib.asynccontextmanager
async def controller_process(env: Mapping[str, str]) -> AsyncIterator[tuple[asyncio.subprocess.Process, str]]:
    """`python -m thermostat.pod_controller` on a free port, until the test kills it (or it is killed here)."""
    port = free_port()
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "thermostat.pod_controller",
        cwd=ROOT,
        env={**os.environ, **env, "POD_CONTROLLER_PORT": str(port), "LOG_LEVEL": "WARNING"},
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        yield process, f"127.0.0.1:{port}"
    finally:
        if process.returncode is None:
            process.kill()
        await process.wait()


async def _serving(address: str) -> None:
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    async with grpc.aio.insecure_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)

        async def check() -> bool | None:
            try:
                reply = await stub.Check(health_pb2.HealthCheckRequest(), timeout=0.5)
            except grpc.aio.AioRpcError:
                return None
            return True if reply.status == health_pb2.HealthCheckResponse.SERVING else None

        await eventually(check, timeout=20, every=0.1)


# a lease that lapses quickly, with RunPod calls short enough to be issued under it
SHORT_LEASE = {"WAKE_LEASE_SECONDS": "3", "RUNPOD_TIMEOUT_SECONDS": "1"}


async def test_a_replica_killed_mid_wake_lets_its_lease_lapse_and_the_next_wake_proceeds(
    runpod_sim: RunPodSimulator, db_store, database_url
) -> None:
    """SIGKILL while its new pod provisions: the other replica waits out the lease, closes the row, serves."""
    runpod_sim.configure(provisioning_seconds=-1)
    env = {
        **pod_controller_env(runpod_sim, RUNPOD_GPU_ALLOWLIST=A100, RUNPOD_WAKE_MAX_POLLS="1000", **SHORT_LEASE),
        "DATABASE_URL": database_url,
    }
    async with controller_process(env) as (doomed, address), grpc.aio.insecure_channel(address) as channel:
        await _serving(address)
        wake = asyncio.create_task(start(pods_pb2_grpc.PodControllerStub(channel)))

        async def created() -> str | None:
            pods = pods_on(runpod_sim, VOLUME)
            return str(pods[0]["id"]) if pods else None

        pod_id = await eventually(created, timeout=10, every=0.02)
        doomed.send_signal(signal.SIGKILL)
        await doomed.wait()
        assert (await wake).code is grpc.StatusCode.UNAVAILABLE

    runpod_sim.set_pod_lifecycle(pod_id, provisioning_seconds=0)
    async with controller(runpod_sim, db_store, RUNPOD_GPU_ALLOWLIST=A100, **SHORT_LEASE) as survivor:
        answer = await start(survivor.public, timeout=15)
        assert answer.reply is not None
        assert (answer.reply.outcome, answer.reply.pod_id) == ("AlreadyRunning", pod_id)
        assert created_gpus(runpod_sim) == [A100]
        abandoned, served = await wakes(survivor.public)
        assert (abandoned.outcome, abandoned.wake_outcome) == ("Failed", "Exception")
        assert "abandoned" in abandoned.reason
        assert (served.outcome, served.wake_outcome) == ("Succeeded", "AlreadyRunning")
