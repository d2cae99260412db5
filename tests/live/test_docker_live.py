"""The Docker backend against a real daemon: the reference worker image built on it, a job run, limits enforced by
the daemon, refusals, and nothing left behind.

Runs wherever a daemon answers at the backend's socket (POOL_DOCKER_SOCKET, else a unix:// DOCKER_HOST, else
/var/run/docker.sock) and skips otherwise; STRATA_POOL_REQUIRE_DOCKER=1 (or POOL_REQUIRE_DOCKER=1) makes an
unreachable daemon a failure, so a runner whose socket moved fails loudly rather than reporting coverage it never
ran; CI sets it. A daemon that cannot build the worker image fails once, naming `make images`. Not billed.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from tests.fixtures.docker import SOCKET, WORKER_IMAGE
from tests.fixtures.polling import eventually
from tests.fixtures.postgres import open_store
from tests.live.conftest import live_spec, until_healthy
from thermostat.policy.pool.docker_api import SUPPORTED, Negotiated, negotiate
from thermostat.policy.pool.job_outcome import ReplyKind
from thermostat.policy.pool.machine_type import BackendKind, MachineType
from thermostat.providers.pool.backend import BackendError
from thermostat.providers.pool.docker import LABEL_POOL, DockerBackend
from thermostat.providers.pool.worker_client import WorkerClient

POOL = "thermostat-live"
IMAGE_TAG = WORKER_IMAGE


@pytest.fixture
def daemon(docker_daemon: Any) -> Any:
    """A testcontainers client on the backend's socket (tests/fixtures/docker.py: skips without a daemon, unless
    STRATA_POOL_REQUIRE_DOCKER=1 makes that a failure)."""
    return docker_daemon


@pytest.fixture
def worker_image(docker_worker_image: str) -> str:
    """deploy/worker/Dockerfile built once per session (tests/fixtures/docker.py; fails once, naming `make images`,
    when the daemon cannot build it)."""
    return docker_worker_image


@pytest.fixture
async def backend(worker_image: str, daemon: Any) -> AsyncIterator[DockerBackend]:
    async with WorkerClient(probe_timeout_seconds=2) as worker:
        docker = DockerBackend(worker, socket_path=SOCKET, pool=POOL)
        try:
            yield docker
        finally:
            for container in daemon.client.containers.list(
                all=True, ignore_removed=True, filters={"label": f"{LABEL_POOL}={POOL}"}
            ):
                container.remove(force=True)
            await docker.aclose()


def daemon_range(socket_path: str) -> dict[str, object]:
    with httpx.Client(transport=httpx.HTTPTransport(uds=socket_path), base_url="http://docker") as http:
        fields = http.get("/version").json()
    return {"daemon_api": fields.get("ApiVersion"), "daemon_min": fields.get("MinAPIVersion")}


def live_type(image: str = IMAGE_TAG, **fields: Any) -> MachineType:
    return MachineType(**{"name": "live-cpu", "image": image, "backend": BackendKind.DOCKER, **fields})


def ours(daemon: Any) -> list[Any]:
    return list(daemon.client.containers.list(all=True, ignore_removed=True, filters={"label": f"{LABEL_POOL}={POOL}"}))


async def test_the_pool_speaks_the_highest_api_version_it_shares_with_the_real_daemon(backend: DockerBackend) -> None:
    """GET /version's range and the pool's meet; the version spoken is the lower of the two highest (issue 35)."""
    version = await backend.negotiate()
    answered = negotiate(**daemon_range(SOCKET))
    assert answered == Negotiated(version=version)
    assert SUPPORTED.lowest <= version <= SUPPORTED.highest


@pytest.mark.timeout(600)
async def test_container_boots_runs_a_job_and_is_removed(backend: DockerBackend, daemon: Any) -> None:
    """start → health at its address on its tenant's network → a job → stop; the container and the network are gone,
    a second stop a no-op."""
    spec = live_spec(live_type())
    handle = await backend.start(spec)
    await until_healthy(backend, handle, timeout=60)
    async with WorkerClient() as worker:
        reply = await worker.execute(handle.endpoint, spec.worker_token, b"live payload", deadline_seconds=30)
    assert (reply.kind, reply.status, reply.body) == (ReplyKind.ANSWERED, 200, b"live payload")
    await backend.stop(handle.provider_id)
    await backend.stop(handle.provider_id)
    assert ours(daemon) == []
    assert daemon.client.networks.list(filters={"label": f"{LABEL_POOL}={POOL}"}) == []


@pytest.mark.timeout(600)
async def test_limits_are_enforced_by_the_daemon(backend: DockerBackend, daemon: Any) -> None:
    """cpus and memory_mb reach the daemon and its cgroup: 0.5 CPU, 256 MiB."""
    handle = await backend.start(live_spec(live_type(cpus=0.5, memory_mb=256)))
    container = daemon.client.containers.get(handle.provider_id)
    assert container.attrs["HostConfig"]["NanoCpus"] == 500_000_000
    assert container.attrs["HostConfig"]["Memory"] == 256 * 1024 * 1024
    exit_code, output = container.exec_run(
        ["sh", "-c", "cat /sys/fs/cgroup/memory.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.limit_in_bytes"]
    )
    assert (exit_code, output.decode().strip()) == (0, str(256 * 1024 * 1024))
    await backend.stop(handle.provider_id)


@pytest.mark.timeout(600)
async def test_machine_that_dies_reads_unhealthy(backend: DockerBackend, daemon: Any) -> None:
    """A container killed under the pool reads unhealthy."""
    handle = await backend.start(live_spec(live_type()))
    await until_healthy(backend, handle, timeout=60)
    daemon.client.containers.get(handle.provider_id).kill()
    assert not await backend.health(handle)
    await backend.stop(handle.provider_id)


async def test_missing_image_is_the_daemons_message_and_nothing_is_left(backend: DockerBackend, daemon: Any) -> None:
    """The pool does not pull: a missing image fails with "No such image", no container created."""
    with pytest.raises(BackendError, match="No such image"):
        await backend.start(live_spec(live_type(image="thermostat-no-such-image:never")))
    assert ours(daemon) == []


@pytest.mark.timeout(600)
async def test_a_warm_container_killed_hands_the_next_job_to_a_new_one(
    worker_image: str, daemon: Any, database_url: str
) -> None:
    """Issue 29 on a real daemon, as it was found: a dispatcher with a docker type (1 CPU, 256 MiB), its warm
    container killed behind its back, and a job submitted at once completes on a new container; the dead one is
    removed and nothing of the pool is left after shutdown."""
    from tests.integration.pool_dispatcher.conftest import pool_env, start_pool

    docker_type = {"name": "docker-cpu", "image": worker_image, "backend": "docker", "cpus": 1, "memory_mb": 256,
                   "boot_timeout_seconds": 120}  # fmt: skip
    env = pool_env([docker_type], POOL_DOCKER_SOCKET=SOCKET, POOL_NAME=POOL)
    store = await open_store(database_url, max_size=12, application_name="pool-docker-live")
    try:
        async with start_pool(store, env) as pool:
            first, _ = await pool.run(b"warm", machine_type="docker-cpu", wait_seconds="120")
            assert first == b"warm"
            [(dead, container)] = await store.pool.fetch("SELECT id::text, provider_id FROM pool_machines")
            daemon.client.containers.get(container).kill()
            body, metadata = await pool.run(b"after the kill", machine_type="docker-cpu", wait_seconds="120")
            assert (body, metadata["x-pool-job-state"]) == (b"after the kill", "completed")
            job = await pool.job(metadata["x-pool-job-id"])
            assert job.worker_id != dead and job.handed_to_machines == 2
            kept = await store.pool.fetchval("SELECT provider_id FROM pool_machines WHERE id = $1::uuid", job.worker_id)

            async def dead_removed() -> bool | None:
                return True if [c.id for c in ours(daemon)] == [kept] else None

            await eventually(dead_removed, timeout=30, every=0.2)
        assert ours(daemon) == []
    finally:
        for leftover in ours(daemon):
            leftover.remove(force=True)
        await store.close()
