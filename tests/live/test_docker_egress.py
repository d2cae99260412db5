"""Egress, opt-in per type, on a real daemon (issue 36, item 1): a docker type listing one stand-in host reaches it
through its egress proxy (Debian's tinyproxy, deploy/egress/Dockerfile) and nothing else, and the proxy goes with its
network.

Tenant A runs cells of a `web` type (`egress_hosts`: the allowed stand-in's host:port) and of a `python` type without
egress; tenant B has a `web` machine too (its own proxy). Both stand-in hosts are servers in one network namespace of
the test's own, routed from the host (never a real outside address), as tests/live/test_docker_escape.py's outside is.
Every cell runs through a pool dispatcher (the test's own, on its Postgres); its shutdown stops its machines, and with
the last machine of each network its proxy and outside network go: nothing of the pool is left on the daemon. Needs root
(the namespace) and a daemon with iptables on, the thtn+ host rules in place (.ci/docker-engine.sh); runs wherever the
escape test runs.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.fixtures.docker import SOCKET, docker_required
from tests.fixtures.postgres import open_store
from tests.live.test_docker_escape import _answers, _host_address, reach
from thermostat.providers.pool.docker import LABEL_POOL

POOL = "thermostat-egress-live"
HOST_SIDE = "198.51.100.9"  # TEST-NET-2, beside the escape test's 198.51.100.0/30
ALLOWED = "198.51.100.10"
OTHER = "198.51.100.11"
PORT = 18080


@pytest.fixture
def stand_ins() -> Iterator[tuple[str, str]]:
    """Two HTTP servers (the allowed host and another) in a network namespace of their own, routed from the host."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        needs = "the egress test needs root and iproute2 for its stand-in hosts"
        if docker_required():
            pytest.fail(f"{needs}, and STRATA_POOL_REQUIRE_DOCKER=1 says it must run")
        pytest.skip(needs)
    suffix = secrets.token_hex(3)
    namespace, host_end, ns_end = f"th-egr-{suffix}", f"the{suffix}", f"thm{suffix}"
    in_ns = ["ip", "netns", "exec", namespace]
    commands = [
        ["ip", "netns", "add", namespace],
        ["ip", "link", "add", host_end, "type", "veth", "peer", "name", ns_end],
        ["ip", "link", "set", ns_end, "netns", namespace],
        ["ip", "addr", "add", f"{HOST_SIDE}/29", "dev", host_end],
        ["ip", "link", "set", host_end, "up"],
        [*in_ns, "ip", "addr", "add", f"{ALLOWED}/29", "dev", ns_end],
        [*in_ns, "ip", "addr", "add", f"{OTHER}/29", "dev", ns_end],
        [*in_ns, "ip", "link", "set", ns_end, "up"],
        [*in_ns, "ip", "route", "add", "default", "via", HOST_SIDE],
    ]
    servers: list[subprocess.Popen[bytes]] = []
    try:
        for command in commands:
            subprocess.run(command, check=True, capture_output=True)
        for address in (ALLOWED, OTHER):
            servers.append(subprocess.Popen(
                [*in_ns, sys.executable, "-m", "http.server", str(PORT), "--bind", address],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            ))  # fmt: skip
        for _ in range(150):
            if all(_answers(address, PORT) for address in (ALLOWED, OTHER)):
                break
            threading.Event().wait(0.1)
        else:
            pytest.fail("the stand-in hosts did not come up")
        yield ALLOWED, OTHER
    finally:
        for server in servers:
            server.kill()
            server.wait()
        subprocess.run(["ip", "link", "del", host_end], capture_output=True)
        subprocess.run(["ip", "netns", "del", namespace], capture_output=True)


@pytest.fixture
def pool_name(docker_worker_image: str, docker_egress_image: str, docker_daemon: Any) -> Iterator[str]:
    """The pool's name; whatever of it is left on the daemon (machines, proxies, networks) is removed at the end."""
    yield POOL
    client = docker_daemon.client
    for container in client.containers.list(all=True, ignore_removed=True, filters={"label": f"{LABEL_POOL}={POOL}"}):
        container.remove(force=True)
    for network in client.networks.list(filters={"label": f"{LABEL_POOL}={POOL}"}):
        network.remove()


def through_proxy(url: str) -> str:
    """A cell that GETs `url` with urllib, which takes its proxy from HTTP_PROXY (the machine's only way out)."""
    return f"""
import os, urllib.error, urllib.request
print("PROXY", os.environ.get("HTTP_PROXY"))
try:
    with urllib.request.urlopen({url!r}, timeout=5) as answer:
        print("REACHED", answer.status)
except urllib.error.HTTPError as e:
    print("REFUSED", e.code, e.reason)
except OSError as e:
    print("REFUSED", type(e).__name__)
"""


def tunnel(host: str, port: int) -> str:
    """A cell that asks its proxy for a CONNECT tunnel to host:port (what HTTPS does) and speaks HTTP through it."""
    return f"""
import os, socket, urllib.parse
proxy = urllib.parse.urlsplit(os.environ["HTTPS_PROXY"])
with socket.create_connection((proxy.hostname, proxy.port), timeout=5) as s:
    s.sendall(b"CONNECT {host}:{port} HTTP/1.1\\r\\nHost: {host}:{port}\\r\\n\\r\\n")
    status = s.recv(256).split(b"\\r\\n")[0]
    if b" 200 " not in status:
        print("REFUSED", status.decode())
    else:
        s.sendall(b"GET / HTTP/1.0\\r\\n\\r\\n")
        print("REACHED", status.decode(), s.recv(64).split(b"\\r\\n")[0].decode())
"""


PROXY_VARIABLES = """
import os
print("VARIABLES", sorted(k for k in os.environ if k.lower().endswith("_proxy")))
"""


def egress_proxies(docker_daemon: Any) -> list[tuple[str, dict[str, Any]]]:
    """Each running proxy of the pool: its address on its machines' network, and its outside network's attachment."""
    found = []
    for container in docker_daemon.client.containers.list(filters={"label": f"{LABEL_POOL}={POOL}"}):
        if "thermostat.egress_of" not in container.attrs["Config"]["Labels"]:
            continue
        networks = container.attrs["NetworkSettings"]["Networks"]
        inside = next(n["IPAddress"] for name, n in networks.items() if "-tenant-" in name)
        found.append((inside, next(n for name, n in networks.items() if "-egress-" in name)))
    return found


async def run_cell(pool: Any, source: str, *, tenant: str = "tenant-a", machine_type: str = "web") -> str:
    body, metadata = await pool.run(
        json.dumps({"source": source}).encode(), tenant=tenant, machine_type=machine_type, wait_seconds="120"
    )
    return f"{metadata.get('x-pool-job-state')} {body.decode('utf-8', 'replace')}"


@pytest.mark.timeout(600)
async def test_an_egress_type_reaches_its_allowed_host_and_nothing_else(
    pool_name: str, docker_worker_image: str, docker_egress_image: str, docker_daemon: Any, database_url: str,
    stand_ins: tuple[str, str],
) -> None:  # fmt: skip
    """Through its proxy the web type reaches the allowed host:port (HTTP and CONNECT); another host, another port,
    the host's own services and tenant B's proxy are refused; directly it has no route; the same tenant's python
    type has no proxy and no route; every proxy and network goes with the machines."""
    from tests.integration.pool_dispatcher.conftest import pool_env, start_pool

    allowed, other = stand_ins
    common = {"image": docker_worker_image, "backend": "docker", "cpus": 1, "memory_mb": 256,
              "boot_timeout_seconds": 120, "env": {"STRATA_WORKER_HANDLER": "python"}}  # fmt: skip
    types = [{"name": "web", "egress_hosts": [f"{allowed}:{PORT}"], **common}, {"name": "python", **common}]
    env = pool_env(types, POOL_DOCKER_SOCKET=SOCKET, POOL_NAME=pool_name, POOL_EGRESS_IMAGE=docker_egress_image)
    store = await open_store(database_url, max_size=12, application_name="pool-docker-egress")
    try:
        async with start_pool(store, env) as pool:
            assert (await run_cell(pool, PROXY_VARIABLES, tenant="tenant-b")).startswith("completed VARIABLES")
            (b_proxy,) = egress_proxies(docker_daemon)
            b_proxy_address, outside = b_proxy
            postgres_port = urlsplit(database_url).port or 5432
            attempts = {
                "the allowed host, HTTP through the proxy": through_proxy(f"http://{allowed}:{PORT}/"),
                "the allowed host, CONNECT through the proxy": tunnel(allowed, PORT),
                "another host, HTTP through the proxy": through_proxy(f"http://{other}:{PORT}/"),
                "another host, CONNECT through the proxy": tunnel(other, PORT),
                "the allowed host on another port, CONNECT": tunnel(allowed, 22),
                "the allowed host on another port, HTTP": through_proxy(f"http://{allowed}:8000/"),
                "the allowed host's name with a user part": through_proxy(f"http://{allowed}:{PORT}@{other}:{PORT}/"),
                "Postgres on the host, CONNECT through the proxy": tunnel(_host_address(), postgres_port),
                "the proxy's own gateway on the allowed port, CONNECT": tunnel(outside["Gateway"], PORT),
                "the host's address on the allowed port, CONNECT": tunnel(_host_address(), PORT),
                "the allowed host directly, without the proxy": reach(allowed, PORT, b"GET / HTTP/1.0\r\n\r\n"),
                "another host directly": reach(other, PORT, b"GET / HTTP/1.0\r\n\r\n"),
                "tenant B's proxy": reach(b_proxy_address, 8888, b"GET http://x/ HTTP/1.0\r\n\r\n"),
            }
            outcomes = {name: await run_cell(pool, cell) for name, cell in attempts.items()}
            ((a_proxy_address, _),) = [p for p in egress_proxies(docker_daemon) if p[0] != b_proxy_address]
            closed = {
                "variables": await run_cell(pool, PROXY_VARIABLES, machine_type="python"),
                "the allowed host directly": await run_cell(pool, reach(allowed, PORT), machine_type="python"),
                "tenant A's own web proxy": await run_cell(pool, reach(a_proxy_address, 8888), machine_type="python"),
            }
            running_proxies = egress_proxies(docker_daemon)
    finally:
        await store.close()
    left = docker_daemon.client.containers.list(all=True, filters={"label": f"{LABEL_POOL}={POOL}"})
    networks = docker_daemon.client.networks.list(filters={"label": f"{LABEL_POOL}={POOL}"})

    for name in ("the allowed host, HTTP through the proxy", "the allowed host, CONNECT through the proxy"):
        assert "REACHED" in outcomes[name], (name, outcomes[name])
    refused = {name: outcome for name, outcome in outcomes.items() if "REACHED" not in outcome}
    assert len(refused) == len(outcomes) - 2, outcomes
    for name in ("another host, HTTP through the proxy", "the allowed host on another port, HTTP",
                 "the allowed host's name with a user part"):  # fmt: skip
        assert "REFUSED 403" in outcomes[name], (name, outcomes[name])
    for name in ("another host, CONNECT through the proxy", "the proxy's own gateway on the allowed port, CONNECT",
                 "the host's address on the allowed port, CONNECT"):  # fmt: skip
        assert "REFUSED HTTP/1.1 403 Filtered" in outcomes[name], (name, outcomes[name])
    for name in ("the allowed host on another port, CONNECT", "Postgres on the host, CONNECT through the proxy"):
        assert "REFUSED HTTP/1.1 403 Access violation" in outcomes[name], (name, outcomes[name])
    for name in ("the allowed host directly, without the proxy", "another host directly", "tenant B's proxy"):
        assert outcomes[name].startswith("completed REFUSED"), (name, outcomes[name])
    assert closed["variables"] == "completed VARIABLES []\n"
    assert closed["the allowed host directly"].startswith("completed REFUSED"), closed
    assert closed["tenant A's own web proxy"].startswith("completed REFUSED"), closed
    assert len(running_proxies) == 2  # A's and B's, one each, while their machines ran
    assert (left, networks) == ([], [])
