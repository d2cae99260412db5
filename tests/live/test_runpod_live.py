"""The RunPod backend against the real API (billed): STRATA_POOL_RUNPOD_LIVE=1 with POOL_RUNPOD_API_KEY
(or RUNPOD_API_KEY) and THERMOSTAT_POOL_LIVE_IMAGE, a public image of deploy/worker/Dockerfile. Set
STRATA_POOL_RUNPOD_GPU to a RunPod GPU id to cover the gpu block as well (the THERMOSTAT_POOL_* names are aliases).
"""

from __future__ import annotations

import os

import pytest

from tests.live.conftest import live_spec, opted_in, required, setting, until_healthy
from thermostat.policy.common.pod_model import Lookup
from thermostat.policy.pool.job_outcome import ReplyKind
from thermostat.policy.pool.machine_type import BackendKind, MachineType
from thermostat.providers.pool.runpod import RunPodBackend
from thermostat.providers.pool.worker_client import WorkerClient
from thermostat.providers.runpod.client import RunPodV2Client

pytestmark = opted_in("STRATA_POOL_RUNPOD_LIVE")


def live_types() -> list[MachineType]:
    image = os.environ.get("THERMOSTAT_POOL_LIVE_IMAGE", "")
    types = [MachineType(name="live-cpu", image=image, backend=BackendKind.RUNPOD, cpus=2, job_timeout_seconds=60)]
    gpu = setting("STRATA_POOL_RUNPOD_GPU")
    if gpu:
        types.append(MachineType(name="live-gpu", image=image, backend=BackendKind.RUNPOD, gpu_type=gpu,
                                 job_timeout_seconds=60))  # fmt: skip
    return types


@pytest.mark.timeout(1200)
@pytest.mark.parametrize("machine_type", live_types(), ids=lambda kind: kind.name)
async def test_pod_boots_runs_a_job_through_the_proxy_and_is_terminated(machine_type: MachineType) -> None:
    """A real pod: created, healthy through the proxy, runs a job, terminated twice, nothing left."""
    key = required("POOL_RUNPOD_API_KEY", "RUNPOD_API_KEY")
    required("THERMOSTAT_POOL_LIVE_IMAGE")
    async with WorkerClient(probe_timeout_seconds=10) as worker, RunPodV2Client(key) as observer:
        backend = RunPodBackend(worker, api_key=key, name_prefix="thermostat-live")
        spec = live_spec(machine_type)
        handle = await backend.start(spec)
        try:
            await until_healthy(backend, handle, timeout=900)
            reply = await worker.execute(handle.endpoint, spec.worker_token, b"live payload", deadline_seconds=60)
            assert (reply.kind, reply.status, reply.body) == (ReplyKind.ANSWERED, 200, b"live payload")
        finally:
            await backend.stop(handle.provider_id)
            await backend.stop(handle.provider_id)
            await backend.aclose()
        observed = await observer.observe_pod(handle.provider_id)
        assert observed.lookup is Lookup.NOT_FOUND or observed.status.value == "TERMINATED"
