"""The pool's Docker backend end to end on a real daemon: `make run`'s stack (POOL_DEMO_DOCKER=daemon) serving
docker types on containers of the reference worker image, through the edge.

A job runs in a real container whose cgroup holds the type's cpus and memory_mb; the container is destroyed once
its type's cool-down passes; one killed behind the pool's back is retired by the health checks (and the next job
boots another); Ctrl-C leaves no container of the run's pool (`docker ps -a`). Skips without a daemon unless
STRATA_POOL_REQUIRE_DOCKER=1 (tests/fixtures/docker.py), as CI runs it.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from tests.e2e.test_make_run import POOL, DevStack
from tests.fixtures.postgres import embedded_data_dir
from thermostat.providers.pool.docker import LABEL_MACHINE_TYPE, LABEL_POOL

pytestmark = pytest.mark.e2e

MEMORY_MB = 256
CPUS = 0.5
# cgroup v2 first, then v1 (this project's CI machines): the limit the daemon set, as the container reads it
MEMORY_LIMIT = "cat /sys/fs/cgroup/memory.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.limit_in_bytes"
CPU_LIMIT = "cat /sys/fs/cgroup/cpu.max 2>/dev/null || cd /sys/fs/cgroup/cpu && cat cpu.cfs_quota_us cpu.cfs_period_us"


def catalogue(image: str) -> str:
    cooling = {"name": "demo-docker", "cool_down_seconds": 3}
    kept = {"name": "demo-docker-kept", "cool_down_seconds": 600, "health_check_failures": 1}
    return json.dumps([
        {"image": image, "backend": "docker", "cpus": CPUS, "memory_mb": MEMORY_MB, "max_workers": 1, **entry}
        for entry in (cooling, kept)
    ])  # fmt: skip


def containers(daemon: Any, pool: str, machine_type: str | None = None) -> list[Any]:
    labels = [f"{LABEL_POOL}={pool}", *([f"{LABEL_MACHINE_TYPE}={machine_type}"] if machine_type else [])]
    return list(daemon.client.containers.list(all=True, ignore_removed=True, filters={"label": labels}))


def until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not within {timeout:.0f}s"
        time.sleep(0.5)


def cgroup(container: Any, command: str) -> list[str]:
    exit_code, output = container.exec_run(["sh", "-c", command])
    assert exit_code == 0, output
    return output.decode().split()


def run(edge: str, machine_type: str, payload: bytes) -> None:
    job = httpx.post(f"{edge}/v1/jobs/sync?machine_type={machine_type}", content=payload, headers=POOL, timeout=120)
    assert (job.status_code, job.content) == (200, payload), job.text


@pytest.mark.timeout(600)
def test_docker_types_run_on_real_containers_through_the_edge_and_ctrl_c_leaves_none(
    docker_daemon: Any, docker_worker_image: str
) -> None:
    pool = f"e2e-docker-{uuid.uuid4().hex[:8]}"
    env = {"POOL_DEMO_BACKENDS": "docker", "POOL_DEMO_DOCKER": "daemon", "POOL_NAME": pool,
           "POOL_SCALER_SECONDS": "1", "POOL_MACHINE_TYPES": catalogue(docker_worker_image)}  # fmt: skip
    with embedded_data_dir() as data_dir:
        stack = DevStack(data_dir, env)
        try:
            edge = stack.wait_up()
            assert any("the real daemon" in line for line in stack.output), "".join(stack.output[-40:])

            run(edge, "demo-docker", b"on a real container")
            (container,) = containers(docker_daemon, pool, "demo-docker")
            assert container.image.tags == [docker_worker_image]
            assert cgroup(container, MEMORY_LIMIT) == [str(MEMORY_MB * 1024 * 1024)]
            quota, period = cgroup(container, CPU_LIMIT)
            assert int(quota) / int(period) == CPUS
            until(lambda: not containers(docker_daemon, pool, "demo-docker"), 60, "destroyed after its cool-down")

            run(edge, "demo-docker-kept", b"before the kill")
            (killed,) = containers(docker_daemon, pool, "demo-docker-kept")
            killed.kill()  # behind the pool's back; its cool-down (600 s) cannot be what removes it
            until(lambda: killed.id not in {c.id for c in containers(docker_daemon, pool)}, 60, "retired by health")
            run(edge, "demo-docker-kept", b"after the kill")
            (replacement,) = containers(docker_daemon, pool, "demo-docker-kept")
            assert replacement.id != killed.id and replacement.status == "running"

            output = stack.interrupt()
        finally:
            stack.kill()
    # the pool dispatcher stops its machines as it drains; the stack then removes any its pool left (none here)
    assert containers(docker_daemon, pool) == [], output[-2000:]
    assert f"removed 0 container(s) of pool {pool}" in output
