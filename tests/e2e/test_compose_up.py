"""deploy/compose.yaml for real: the compose the machine has (Debian's docker-compose 1.29, or `docker compose`)
brings up the built images (`make images`) — Postgres, the migration step, the four services, the edge — and
README's cockpit quick start (its REST pod and metering calls) runs as written against that edge; `down` leaves
no container, network or volume of the project.

The pod controller reaches a RunPod simulator on this host (an override adds RUNPOD_V2_BASE_URL and the host's
gateway), as `make run`'s does. Skips without a daemon unless STRATA_POOL_REQUIRE_DOCKER=1 (tests/fixtures/docker.py).
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fixtures.docker import docker_required
from thermostat.chassis.ports import free_port
from thermostat.dev import images
from thermostat.dev.simulators.runpod.server import RunPodSimulator

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "deploy" / "compose.yaml"
SECTION = "### A web cockpit (REST)"
SIM_KEY = "sim-key-for-compose"
OVERRIDE = """\
services:
  pod-controller:
    environment:
      RUNPOD_V2_BASE_URL: "http://host.docker.internal:{port}/v2"
    extra_hosts: ["host.docker.internal:host-gateway"]
"""


def compose_command() -> list[str]:
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    if subprocess.run(["docker", "compose", "version"], capture_output=True, check=False).returncode == 0:
        return ["docker", "compose"]
    message = "neither docker-compose nor `docker compose` is installed (apt-get install docker-compose)"
    if docker_required():
        pytest.fail(f"{message}, and STRATA_POOL_REQUIRE_DOCKER=1 says the Docker tests must run")
    pytest.skip(message)


def cockpit_pod_calls() -> str:
    """README's cockpit block up to its pool part (compose's pool has no demo catalogue), every command checked."""
    readme = (ROOT / "README.md").read_text()
    (block,) = re.findall(r"```bash\n(.*?)```", readme[readme.index(SECTION) :], flags=re.S)[:1]
    pods = block[: block.index("# Pool")]
    assert "curl -s -w" in pods, "the cockpit's call() is no longer curl -s -w: keep this check in step"
    return pods.replace("curl -s -w", "curl -sf -w")


def postgres_image(daemon: Any) -> str:
    for name in (os.environ.get(images.POSTGRES.variable), images.POSTGRES.official, images.POSTGRES.standin):
        if name and daemon.client.images.list(name=name):
            return name
    pytest.fail(f"no Postgres image for compose ({images.POSTGRES.official} or its stand-in): run `make images`")


def leftovers(daemon: Any, project: str) -> list[str]:
    label = {"label": f"com.docker.compose.project={project}"}
    return [
        *(c.name for c in daemon.client.containers.list(all=True, ignore_removed=True, filters=label)),
        *(n.name for n in daemon.client.networks.list(filters=label)),
        *(v.name for v in daemon.client.volumes.list(filters=label)),
    ]


@pytest.mark.timeout(600)
def test_compose_runs_the_built_images_and_the_cockpit_quick_start_passes_against_its_edge(
    docker_daemon: Any, docker_worker_image: str, tmp_path: Path
) -> None:
    # docker_worker_image: a daemon without the base images fails once there (naming `make images`), not here too
    compose = compose_command()
    for image in (images.SERVICES_IMAGE, images.EDGE_IMAGE):
        if not docker_daemon.client.images.list(name=image):
            pytest.fail(f"{image} is not built: run `make images`")
    project = f"thermostat-e2e-{uuid.uuid4().hex[:8]}"
    edge_port = free_port()
    operator = secrets.token_hex(12)
    with RunPodSimulator(api_key=SIM_KEY, host="0.0.0.0") as sim:  # the containers reach it
        (tmp_path / "override.yaml").write_text(OVERRIDE.format(port=sim.port))
        env = {**os.environ, "POSTGRES_PASSWORD": secrets.token_hex(12),
               "THERMOSTAT_INTERNAL_TOKEN": secrets.token_hex(16), "RUNPOD_API_KEY": SIM_KEY,
               "RIG_OPERATOR_TOKEN": operator, "EDGE_PORT": str(edge_port),
               images.POSTGRES.variable: postgres_image(docker_daemon)}  # fmt: skip
        files = [*compose, "-p", project, "-f", str(COMPOSE), "-f", str(tmp_path / "override.yaml")]
        try:
            up = subprocess.run([*files, "up", "-d", "--no-build"], env=env, capture_output=True, text=True,
                                timeout=300, check=False)  # fmt: skip
            assert up.returncode == 0, up.stdout[-3000:] + up.stderr[-3000:]
            edge = f"http://127.0.0.1:{edge_port}"
            deadline = time.monotonic() + 180
            while True:
                with_status = _health(edge)
                if with_status == 200:
                    break
                assert time.monotonic() < deadline, _logs(files, env)
                time.sleep(1)
            ran = subprocess.run(["bash", "-euo", "pipefail", "-c", cockpit_pod_calls()], capture_output=True,
                                 text=True, timeout=300, check=False,
                                 env={**os.environ, "THERMOSTAT_ADDR": edge.removeprefix("http://"),
                                      "RIG_OPERATOR_TOKEN": operator, "STRATA_POOL_TOKEN": "unused",
                                      "STRATA_TENANT": "demo"})  # fmt: skip
            assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:] + _logs(files, env)
            assert '"configured":true' in ran.stdout and '"outcome":"Created"' in ran.stdout, ran.stdout
            assert '"dailyUsd":5' in ran.stdout, ran.stdout
        finally:
            down = subprocess.run([*files, "down", "-v", "--remove-orphans", "-t", "10"], env=env,
                                  capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
    assert down.returncode == 0, down.stderr[-3000:]
    assert leftovers(docker_daemon, project) == []


def _health(edge: str) -> int:
    try:
        return httpx.get(f"{edge}/health", timeout=5).status_code
    except httpx.HTTPError:
        return 0


def _logs(files: list[str], env: dict[str, str]) -> str:
    logs = subprocess.run([*files, "logs", "--tail=20"], env=env, capture_output=True, text=True, check=False)
    return logs.stdout[-6000:]
