"""The pod-control seed (Last wake outcome): "a wake aborted by shutdown still records its outcome"."""

from __future__ import annotations

import asyncio
import contextlib

from tests.fixtures.polling import eventually
from tests.fixtures.services import pod_controller_env, start_pod_controller
from tests.integration.pod_controller.harness import A100, start
from thermostat.pods.v1 import pods_pb2_grpc


async def test_a_wake_in_flight_at_shutdown_still_records_its_outcome(runpod_sim, db_store) -> None:
    """Stopped past its grace while the new pod provisions: the wake row is completed, and the Create recorded."""
    runpod_sim.configure(provisioning_seconds=-1)  # the new pod never boots: the wake polls it until shut down
    env = pod_controller_env(
        runpod_sim, RUNPOD_GPU_ALLOWLIST=A100, RUNPOD_WAKE_POLL_SECONDS="1", SHUTDOWN_GRACE_SECONDS="0.5"
    )

    async def create_recorded() -> bool | None:
        return await db_store.pool.fetchval("SELECT true FROM pod_actions WHERE action = 'Create'")

    async with start_pod_controller(env, db_store) as running, running.channel() as channel:
        caller = asyncio.create_task(start(pods_pb2_grpc.PodControllerStub(channel)))
        await eventually(create_recorded, timeout=30)  # the wake is now polling the pod it created
        caller.cancel()  # the caller leaves; the wake it started goes on until the shutdown interrupts it
        with contextlib.suppress(asyncio.CancelledError):
            await caller
    rows = await db_store.pool.fetch("SELECT outcome, wake_outcome, reason, completed_at FROM pod_wakes")
    assert [(r["outcome"], r["wake_outcome"]) for r in rows] == [("Failed", "Exception")]
    assert "interrupted by shutdown" in rows[0]["reason"]
    creates = await db_store.pool.fetch("SELECT pod_id, ok FROM pod_actions WHERE action = 'Create'")
    assert [r["ok"] for r in creates] == [True]
