"""Hostile cells on a real daemon (issue 36, item 4): tenant A's escape attempts run as python jobs of the reference
worker through a pool dispatcher while tenant B has a warm machine; each attempt is refused, and B's next job still
completes.

The machines are the Docker backend's own (hardened defaults, each tenant on its internal network). The pool
dispatcher and Postgres are the test's own (each on loopback, tried at their ports on A's gateway and the host's
address too); a service bound to every address is a listener this test opens on 0.0.0.0 (what a dispatcher,
Postgres or an edge admin port listening there would be); the "outside" is a server in a network namespace of the
test's own, routed from the host (never a real outside address). The host rules on the thtn+ bridges
(.ci/docker-engine.sh) must be in place: without them the host's listener is reached and the test fails, as it
should. Needs root (the namespace: skipped without it unless a daemon is required) and a daemon with iptables on;
runs wherever tests/live/test_docker_live.py runs, STRATA_POOL_REQUIRE_DOCKER=1 in CI. docs/containers.md has the
table of attempts.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.fixtures.docker import SOCKET, docker_required
from tests.fixtures.postgres import open_store
from thermostat.providers.pool.docker import LABEL_POOL

POOL = "thermostat-escape"
OUTSIDE = "198.51.100.2"  # TEST-NET-2: the stand-in outside server's address in its own namespace
OUTSIDE_HOST_SIDE = "198.51.100.1"
OUTSIDE_PORT = 18080


@pytest.fixture
def outside() -> Iterator[str]:
    """An HTTP server in a network namespace of its own at OUTSIDE, routed from the host over a veth pair."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        needs = "the escape test needs root and iproute2 for its stand-in outside server"
        if docker_required():
            pytest.fail(f"{needs}, and STRATA_POOL_REQUIRE_DOCKER=1 says it must run")
        pytest.skip(needs)
    suffix = secrets.token_hex(3)
    namespace, host_end, ns_end = f"th-out-{suffix}", f"tho{suffix}", f"thn{suffix}"
    commands = [
        ["ip", "netns", "add", namespace],
        ["ip", "link", "add", host_end, "type", "veth", "peer", "name", ns_end],
        ["ip", "link", "set", ns_end, "netns", namespace],
        ["ip", "addr", "add", f"{OUTSIDE_HOST_SIDE}/30", "dev", host_end],
        ["ip", "link", "set", host_end, "up"],
        ["ip", "netns", "exec", namespace, "ip", "addr", "add", f"{OUTSIDE}/30", "dev", ns_end],
        ["ip", "netns", "exec", namespace, "ip", "link", "set", ns_end, "up"],
        ["ip", "netns", "exec", namespace, "ip", "route", "add", "default", "via", OUTSIDE_HOST_SIDE],
    ]
    server = None
    try:
        for command in commands:
            subprocess.run(command, check=True, capture_output=True)
        server = subprocess.Popen(
            ["ip", "netns", "exec", namespace, sys.executable, "-m", "http.server", str(OUTSIDE_PORT), "--bind",
             OUTSIDE],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        for _ in range(150):
            if _answers(OUTSIDE, OUTSIDE_PORT) or server.poll() is not None:
                break
            threading.Event().wait(0.1)
        if not _answers(OUTSIDE, OUTSIDE_PORT):
            pytest.fail(f"the stand-in outside server did not come up (exit {server.poll()})")
        yield OUTSIDE
    finally:
        if server is not None:
            server.kill()
            server.wait()
        subprocess.run(["ip", "link", "del", host_end], capture_output=True)
        subprocess.run(["ip", "netns", "del", namespace], capture_output=True)


@pytest.fixture
def host_service() -> Iterator[int]:
    """A listener on every address of the host: the stand-in for a service bound to 0.0.0.0."""
    with socket.create_server(("0.0.0.0", 0)) as server:
        server.settimeout(0.2)
        stop = threading.Event()

        def serve() -> None:
            while not stop.is_set():
                with contextlib.suppress(OSError):
                    connection, _ = server.accept()
                    connection.sendall(b"host service\n")
                    connection.close()

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        yield server.getsockname()[1]
        stop.set()
        thread.join(2)


@pytest.fixture
def pool_name(docker_worker_image: str, docker_daemon: Any) -> Iterator[str]:
    """The pool's name; whatever of it is left on the daemon is removed at the end, networks too."""
    yield POOL
    client = docker_daemon.client
    for container in client.containers.list(all=True, ignore_removed=True, filters={"label": f"{LABEL_POOL}={POOL}"}):
        container.remove(force=True)
    for network in client.networks.list(filters={"label": f"{LABEL_POOL}={POOL}"}):
        network.remove()


def reach(address: str, port: int, request: bytes = b"") -> str:
    """A cell that tries a TCP connection (and an HTTP request) and prints REACHED or REFUSED with the reason."""
    return f"""
import socket
try:
    with socket.create_connection(({address!r}, {port}), timeout=3) as s:
        s.sendall({request!r})
        s.settimeout(3)
        print("REACHED", s.recv(64))
except OSError as e:
    print("REFUSED", type(e).__name__, e.errno)
"""


WRITE_ROOT = """
import errno
for path in ("/app/escape", "/etc/escape", "/escape"):
    try:
        open(path, "w").write("x")
        print("REACHED", path)
        break
    except OSError as e:
        print("REFUSED", path, errno.errorcode.get(e.errno))
open("/tmp/scratch", "w").write("scratch is writable")
"""

READ_TOKEN = """
import glob
seen = []
for path in glob.glob("/proc/[0-9]*/environ"):
    try:
        seen.append(open(path, "rb").read())
    except OSError:
        pass
print("ENVIRON", b"\\n".join(seen).decode("utf-8", "replace"))
"""

DOCKER_SOCKET = """
import os, socket
paths = ("/var/run/docker.sock", "/run/docker.sock")
found = [p for p in paths if os.path.exists(p)]
try:
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(found[0] if found else paths[0])
    print("REACHED")
except OSError as e:
    print("REFUSED", type(e).__name__, found)
"""

FORK_BOMB = """
import os, signal
children = []
try:
    while len(children) < 5000:
        pid = os.fork()
        if pid == 0:
            signal.pause()
            os._exit(0)
        children.append(pid)
    print("REACHED", len(children))
except OSError as e:
    print("REFUSED", len(children), e.errno)
finally:
    for pid in children:
        os.kill(pid, signal.SIGKILL)
    for pid in children:
        os.waitpid(pid, 0)
"""

MEMORY_BOMB = """
chunks = []
for _ in range(32):
    chunks.append(b"\\x01" * (64 << 20))
print("REACHED", len(chunks) * 64, "MiB")
"""


async def run_cell(pool: Any, source: str, tenant: str = "tenant-a") -> str:
    """One cell as a sync job of `tenant`: the job's state, then its result (stdout) or the job's JSON."""
    body, metadata = await pool.run(
        json.dumps({"source": source}).encode(), tenant=tenant, machine_type="python", wait_seconds="120"
    )
    return f"{metadata.get('x-pool-job-state')} {body.decode('utf-8', 'replace')}"


@pytest.mark.timeout(600)
async def test_hostile_cells_are_refused_and_the_other_tenants_next_job_completes(
    pool_name: str, docker_worker_image: str, docker_daemon: Any, database_url: str, outside: str, host_service: int
) -> None:
    """Tenant A's cells try B's worker and /execute, the pool dispatcher, Postgres and a host service on every
    address, the outside, B's token, the root filesystem, a fork bomb, a memory bomb and the Docker socket; every
    one is refused, and B's warm machine answers its next job."""
    from tests.integration.pool_dispatcher.conftest import pool_env, start_pool

    python = {"name": "python", "image": docker_worker_image, "backend": "docker", "cpus": 1, "memory_mb": 256,
              "boot_timeout_seconds": 120, "env": {"STRATA_WORKER_HANDLER": "python"}}  # fmt: skip
    store = await open_store(database_url, max_size=12, application_name="pool-docker-escape")
    try:
        async with start_pool(store, pool_env([python], POOL_DOCKER_SOCKET=SOCKET, POOL_NAME=pool_name)) as pool:
            assert await run_cell(pool, "print('b warm')", tenant="tenant-b") == "completed b warm\n"
            assert await run_cell(pool, "print('a warm')") == "completed a warm\n"
            machines = {
                row["tenant_id"]: (row["provider_id"], row["endpoint"], row["token"])
                for row in await store.pool.fetch("SELECT tenant_id, provider_id, endpoint, token FROM pool_machines")
            }
            (_, b_endpoint, b_token), (a_container, _, _) = machines["tenant-b"], machines["tenant-a"]
            a_attrs = docker_daemon.client.containers.get(a_container).attrs
            (a_network,) = a_attrs["NetworkSettings"]["Networks"].values()
            gateway, host_address = a_network["Gateway"], _host_address()
            b_address, b_port = b_endpoint.removeprefix("http://").rsplit(":", 1)
            dispatcher_port = int(pool.address.rsplit(":", 1)[1])
            postgres_port = urlsplit(database_url).port or 5432
            assert _answers(outside, OUTSIDE_PORT)  # a refusal below is the machine's, not a dead server
            host_ports = (
                ("the pool dispatcher", dispatcher_port),
                ("Postgres", postgres_port),
                ("a host service on 0.0.0.0", host_service),
            )
            host_addresses = (("the bridge's gateway", gateway), ("the host's address", host_address),
                              ("loopback", "127.0.0.1"))  # fmt: skip
            execute = b"POST /execute HTTP/1.1\r\nHost: b\r\nContent-Length: 1\r\n\r\nx"
            attempts = {
                "B's worker": reach(b_address, int(b_port), b"GET /health HTTP/1.1\r\nHost: b\r\n\r\n"),
                "B's /execute": reach(b_address, int(b_port), execute),
                **{
                    f"{name} on {where}": reach(address, port)
                    for name, port in host_ports
                    for where, address in host_addresses
                },
                "the outside stand-in": reach(outside, OUTSIDE_PORT, b"GET / HTTP/1.0\r\n\r\n"),
                "the Docker socket": DOCKER_SOCKET,
                "the root filesystem": WRITE_ROOT,
                "a fork bomb": FORK_BOMB,
                "B's token": READ_TOKEN,
                "a memory bomb": MEMORY_BOMB,
            }
            outcomes = {name: await run_cell(pool, cell) for name, cell in attempts.items()}
            b_next = await run_cell(pool, "print('b still runs')", tenant="tenant-b")
    finally:
        await store.close()
    reached = {name: outcome for name, outcome in outcomes.items() if "REACHED" in outcome}
    assert reached == {}, outcomes
    assert b_token not in outcomes["B's token"]
    for name, outcome in outcomes.items():
        if name not in ("B's token", "a memory bomb"):
            assert outcome.startswith("completed REFUSED"), (name, outcome)
    assert outcomes["the root filesystem"].count("REFUSED") == 3
    assert outcomes["a memory bomb"].startswith("failed")  # the cell killed within the container's memory limit
    assert "exited with status -9" in outcomes["a memory bomb"]
    assert b_next == "completed b still runs\n"


def _answers(address: str, port: int) -> bool:
    try:
        with socket.create_connection((address, port), timeout=0.5):
            return True
    except OSError:
        return False


def _host_address() -> str:
    """The host's own address on its default route (not loopback, not a bridge)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect(("192.0.2.254", 9))  # no packet is sent: this only picks the route's source address
        address: str = probe.getsockname()[0]
        return address
