"""What the Docker machine's confinement costs (issue 36): a cold start and a warm job, beside today's container.

Three ways to run the reference worker (`strata-worker:latest`, the python handler, 1 CPU, 256 MiB) on the daemon
at the Docker backend's socket, interleaved round by round:
- plain: the container as the backend made it before issue 36 (the default bridge, the worker port published on
  127.0.0.1, only the CPU and memory limits);
- confined: plain plus the confinement (CapDrop ALL, no-new-privileges, read-only root, /tmp tmpfs, pids limit,
  the nobody user), still on the default bridge;
- shipped: the Docker backend itself (the confinement and the tenant's internal network; the network already
  made by a machine kept warm for the run, as for any tenant's second machine);
- first: the same for a tenant's first machine (a new tenant each time: its network made at start, removed at
  stop).
Cold start: create → the worker answers `GET /health` with 200 (polled every 10 ms). Warm job: one python cell
(`print(1)`) through `POST /execute` on a warm machine, one at a time. It prints medians and ratios to plain.

    .venv/bin/python bench/docker_hardening.py [--rounds 5] [--jobs 100]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import statistics
import sys
import time
from typing import Any

import httpx

from thermostat.policy.pool.machine_type import BackendKind, MachineType
from thermostat.providers.pool.backend import MachineSpec
from thermostat.providers.pool.docker import DockerBackend, confinement, docker_socket_path
from thermostat.providers.pool.settings import env_setting
from thermostat.providers.pool.worker_client import WorkerClient

IMAGE = "strata-worker:latest"
POOL = "bench-hardening"
TYPE = MachineType(
    name="bench", image=IMAGE, backend=BackendKind.DOCKER, cpus=1, memory_mb=256,
    env={"STRATA_WORKER_HANDLER": "python"},
)  # fmt: skip
SOCKET = docker_socket_path(
    pool_docker_socket=env_setting("STRATA_POOL_DOCKER_SOCKET"), docker_host=os.environ.get("DOCKER_HOST")
)
CELL = json.dumps({"source": "print(1)"}).encode()


def spec(tenant: str = "bench") -> MachineSpec:
    return MachineSpec(
        machine_id=secrets.token_hex(6), tenant_id=tenant, machine_type=TYPE, worker_token=secrets.token_hex(16)
    )


def raw_body(machine: MachineSpec, *, confined: bool) -> dict[str, Any]:
    host_config: dict[str, Any] = {
        "PortBindings": {"8080/tcp": [{"HostIp": "127.0.0.1", "HostPort": ""}]},
        "NanoCpus": 1_000_000_000,
        "Memory": 256 * 1024 * 1024,
    }
    body: dict[str, Any] = {
        "Image": IMAGE,
        "Env": [f"{k}={v}" for k, v in machine.env().items()],
        "Labels": {"thermostat.pool": POOL},
        "ExposedPorts": {"8080/tcp": {}},
        "HostConfig": host_config,
    }
    if confined:
        host_config |= confinement(TYPE)
        body["User"] = TYPE.user
    return body


class Raw:
    """plain and confined: the Engine API called directly with the old body, or it plus the confinement."""

    def __init__(self, docker: httpx.AsyncClient, *, confined: bool) -> None:
        self.docker, self.confined = docker, confined

    async def start(self, machine: MachineSpec) -> tuple[str, str]:
        created = await self.docker.post("/containers/create", json=raw_body(machine, confined=self.confined))
        created.raise_for_status()
        container = created.json()["Id"]
        (await self.docker.post(f"/containers/{container}/start")).raise_for_status()
        inspected = (await self.docker.get(f"/containers/{container}/json")).json()
        port = inspected["NetworkSettings"]["Ports"]["8080/tcp"][0]["HostPort"]
        return container, f"http://127.0.0.1:{port}"

    async def stop(self, container: str) -> None:
        await self.docker.delete(f"/containers/{container}", params={"force": "true"})


class Shipped:
    def __init__(self, backend: DockerBackend, *, first: bool = False) -> None:
        self.backend, self.first = backend, first

    async def start(self, machine: MachineSpec) -> tuple[str, str]:
        handle = await self.backend.start(machine)
        return handle.provider_id, handle.endpoint

    async def stop(self, container: str) -> None:
        await self.backend.stop(container)


async def until_healthy(http: httpx.AsyncClient, endpoint: str, limit: float = 60.0) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        try:
            if (await http.get(f"{endpoint}/health", timeout=1.0)).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        await asyncio.sleep(0.01)
    raise RuntimeError(f"{endpoint} did not become healthy in {limit:.0f} s")


async def measure(way: Raw | Shipped, http: httpx.AsyncClient, jobs: int) -> tuple[float, list[float]]:
    machine = spec()
    if isinstance(way, Shipped) and way.first:
        machine = spec(tenant=f"bench-{secrets.token_hex(4)}")
    began = time.perf_counter()
    container, endpoint = await way.start(machine)
    try:
        await until_healthy(http, endpoint)
        cold = time.perf_counter() - began
        warm = []
        headers = {"Authorization": f"Bearer {machine.worker_token}"}
        for _ in range(jobs):
            sent = time.perf_counter()
            answered = await http.post(f"{endpoint}/execute", content=CELL, headers=headers, timeout=30)
            if answered.status_code != 200:
                raise RuntimeError(f"a warm job answered {answered.status_code}: {answered.text[:200]}")
            warm.append(time.perf_counter() - sent)
        return cold, warm
    finally:
        await way.stop(container)


async def main(rounds: int, jobs: int) -> int:
    transport = httpx.AsyncHTTPTransport(uds=SOCKET)
    async with (
        httpx.AsyncClient(transport=transport, base_url="http://docker", timeout=60) as docker,
        httpx.AsyncClient() as http,
        WorkerClient(probe_timeout_seconds=2) as worker,
    ):
        try:
            await docker.get("/_ping")
        except httpx.HTTPError:
            print(f"docker_hardening: skipped, no Docker daemon answers at {SOCKET}")
            return 0
        if (await docker.get(f"/images/{IMAGE}/json")).status_code != 200:
            print(f"docker_hardening: the daemon at {SOCKET} has no {IMAGE}: run `make images`", file=sys.stderr)
            return 1
        backend = DockerBackend(worker, socket_path=SOCKET, pool=POOL)
        keeper = await backend.start(spec())  # the tenant's network stays made for the run
        ways: dict[str, Raw | Shipped] = {
            "plain": Raw(docker, confined=False),
            "confined": Raw(docker, confined=True),
            "shipped": Shipped(backend),
            "first": Shipped(backend, first=True),
        }
        cold: dict[str, list[float]] = {name: [] for name in ways}
        warm: dict[str, list[float]] = {name: [] for name in ways}
        try:
            for round_number in range(rounds):
                for name, way in ways.items():
                    seconds, jobs_seconds = await measure(way, http, jobs)
                    cold[name].append(seconds)
                    warm[name].extend(jobs_seconds)
                print(f"round {round_number + 1}/{rounds} done", file=sys.stderr)
        finally:
            await backend.stop(keeper.provider_id)
            await backend.aclose()
    load = os.getloadavg()
    print(f"docker_hardening: {rounds} rounds, {jobs} warm jobs a machine a round, load {load[0]:.1f}")
    base_cold, base_warm = statistics.median(cold["plain"]), statistics.median(warm["plain"])
    for name in ways:
        c, w = statistics.median(cold[name]), statistics.median(warm[name])
        p99 = statistics.quantiles(warm[name], n=100)[98] if len(warm[name]) >= 100 else max(warm[name])
        print(
            f"  {name:9} cold start p50 {c * 1000:7.0f} ms ({c / base_cold:.2f}x plain)   "
            f"warm job p50 {w * 1000:6.2f} ms ({w / base_warm:.2f}x)  p99 {p99 * 1000:6.2f} ms"
        )
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--jobs", type=int, default=100)
    arguments = parser.parse_args()
    sys.exit(asyncio.run(main(arguments.rounds, arguments.jobs)))
