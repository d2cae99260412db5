"""The pool's docker demo type on a real Docker daemon (POOL_DEMO_DOCKER=daemon) rather than the simulator.

The demo type runs containers of the reference worker image (`make images` builds strata-worker:latest). Before the
stack starts its services it checks that the daemon answers at the Docker backend's socket and holds the image, so
a missing one is one clear message rather than a job that fails later. The pool's containers carry the run's own
pool name (POOL_NAME, `devstack-<pid>` unless set), and the stack removes every container with that label when it
stops, after the pool dispatcher, and then the pool's tenant networks (issue 36): as the simulators kill their
machines, Ctrl-C leaves nothing running (`docker ps`).
"""

from __future__ import annotations

import httpx

from thermostat.dev.images import WORKER_IMAGE
from thermostat.policy.pool.docker_api import NoCommonVersion, negotiate
from thermostat.providers.pool.docker import LABEL_POOL

DEMO_DOCKER_MODES = ("simulator", "daemon")


def demo_docker_from(value: str | None) -> str:
    """POOL_DEMO_DOCKER: `simulator` (the default) or `daemon` (the real one at the Docker backend's socket)."""
    mode = (value or "simulator").strip().lower()
    if mode not in DEMO_DOCKER_MODES:
        raise ValueError(f"POOL_DEMO_DOCKER: {value!r} is not one of {', '.join(DEMO_DOCKER_MODES)}")
    return mode


def _client(socket_path: str, timeout: float = 10) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.AsyncHTTPTransport(uds=socket_path),
                             base_url="http://docker", timeout=timeout)  # fmt: skip


async def _prefix(client: httpx.AsyncClient) -> str:
    """The `/v1.NN` the Docker backend would speak to this daemon (its own negotiation, docker_api.py)."""
    answered = await client.get("/version")
    answered.raise_for_status()
    fields = answered.json()
    outcome = negotiate(daemon_api=fields.get("ApiVersion"), daemon_min=fields.get("MinAPIVersion"))
    if isinstance(outcome, NoCommonVersion):
        raise RuntimeError(f"POOL_DEMO_DOCKER=daemon: {outcome.reason}")
    return outcome.version.prefix


async def check_daemon(socket_path: str, image: str = WORKER_IMAGE) -> None:
    """Raise RuntimeError, saying what to do, unless a daemon answers at `socket_path` and has `image`."""
    try:
        async with _client(socket_path) as client:
            prefix = await _prefix(client)
            found = await client.get(f"{prefix}/images/{image}/json")
    except httpx.HTTPError as error:
        raise RuntimeError(
            f"POOL_DEMO_DOCKER=daemon: no Docker daemon answers at {socket_path} ({type(error).__name__}); "
            "start one, or set STRATA_POOL_DOCKER_SOCKET"
        ) from error
    if found.status_code == 404:
        raise RuntimeError(f"POOL_DEMO_DOCKER=daemon: the daemon has no {image}: run `make images`")
    found.raise_for_status()


async def remove_pool_containers(socket_path: str, pool: str) -> int:
    """Force-remove every container labelled with `pool`, then its networks; how many containers there were."""
    filters = '{"label": ["%s=%s"]}' % (LABEL_POOL, pool)  # noqa: UP031 - JSON braces
    async with _client(socket_path, timeout=30) as client:
        prefix = await _prefix(client)
        listed = await client.get(f"{prefix}/containers/json", params={"all": "1", "filters": filters})
        listed.raise_for_status()
        for container in listed.json():
            await client.delete(f"{prefix}/containers/{container['Id']}", params={"force": "true"})
        networks = await client.get(f"{prefix}/networks", params={"filters": filters})
        networks.raise_for_status()
        for network in networks.json():
            await client.delete(f"{prefix}/networks/{network['Id']}")
    return len(listed.json())
