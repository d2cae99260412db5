"""The Fly Machines backend against the real API (billed): STRATA_POOL_FLY_LIVE=1 with FLY_API_TOKEN,
STRATA_POOL_FLY_APP, STRATA_POOL_FLY_REGION and THERMOSTAT_POOL_LIVE_IMAGE (an image of deploy/worker/Dockerfile Fly
can pull). Off the private network this proves create, started and destroy; set STRATA_POOL_FLY_ON_NETWORK=1
where `.internal` names resolve (a Fly machine, a WireGuard peer) to probe and run a job on the worker too.
"""

from __future__ import annotations

import os

import httpx
import pytest

from tests.fixtures.polling import eventually
from tests.live.conftest import live_spec, opted_in, required, setting, until_healthy
from thermostat.policy.pool.job_outcome import ReplyKind
from thermostat.policy.pool.machine_type import BackendKind, MachineType
from thermostat.providers.pool.fly import DEFAULT_FLY_BASE_URL, FlyBackend
from thermostat.providers.pool.worker_client import WorkerClient

pytestmark = opted_in("STRATA_POOL_FLY_LIVE")


@pytest.mark.timeout(900)
async def test_machine_is_created_started_and_destroyed() -> None:
    """A real machine: created with the pool's config, reported started, destroyed twice, gone."""
    token = required("FLY_API_TOKEN")
    app = required("STRATA_POOL_FLY_APP")
    region = required("STRATA_POOL_FLY_REGION")
    image = required("THERMOSTAT_POOL_LIVE_IMAGE")
    base_url = os.environ.get("POOL_FLY_BASE_URL", "").strip() or DEFAULT_FLY_BASE_URL
    machines = f"{base_url.rstrip('/')}/apps/{app}/machines"
    headers = {"Authorization": f"Bearer {token}"}
    on_network = setting("STRATA_POOL_FLY_ON_NETWORK") == "1"
    kind = MachineType(name="live-cpu", image=image, backend=BackendKind.FLY, cpus=1, memory_mb=256)
    async with WorkerClient(probe_timeout_seconds=10) as worker, httpx.AsyncClient(headers=headers) as fly:
        backend = FlyBackend(worker, api_token=token, app=app, region=region, base_url=base_url,
                             name_prefix="thermostat-live")  # fmt: skip
        spec = live_spec(kind)
        handle = await backend.start(spec)
        try:
            assert handle.region == region

            async def started() -> bool | None:
                answer = await fly.get(f"{machines}/{handle.provider_id}")
                return True if answer.status_code == 200 and answer.json().get("state") == "started" else None

            await eventually(started, timeout=300, every=2.0)
            if on_network:
                await until_healthy(backend, handle, timeout=300)
                reply = await worker.execute(handle.endpoint, spec.worker_token, b"live", deadline_seconds=60)
                assert (reply.kind, reply.status, reply.body) == (ReplyKind.ANSWERED, 200, b"live")
        finally:
            await backend.stop(handle.provider_id)
            await backend.stop(handle.provider_id)
            await backend.aclose()
        answer = await fly.get(f"{machines}/{handle.provider_id}")
        assert answer.status_code == 404 or answer.json().get("state") in ("destroying", "destroyed")
