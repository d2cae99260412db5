"""Egress, opt-in per docker type (issue 36), against the Engine API simulator: the egress proxy and its outside
network made on demand, the worker pointed at it, one proxy per tenant network and allow-list, found again by its
labels after a restart, removed with the tenant's network, never left behind by a failed boot. The simulator enforces
nothing: tests/live/test_docker_egress.py shows the allow-list held on a real daemon."""

from __future__ import annotations

import json
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from urllib.parse import urlencode

import pytest

from tests.integration.pool.conftest import MACHINE_TOKEN, healthy
from thermostat.dev.simulators.docker import DEFAULT_IMAGE, EGRESS_IMAGES, DockerSimulator, ImageSpec
from thermostat.policy.pool.egress import (
    DEFAULT_EGRESS_IMAGE,
    create_outside_network_body,
    create_proxy_body,
    egress_digest,
    machine_network_key,
)
from thermostat.policy.pool.machine_type import BackendKind, MachineType
from thermostat.policy.pool.tenant_network import network_key
from thermostat.providers.pool.backend import BackendError, MachineSpec
from thermostat.providers.pool.docker import DockerBackend
from thermostat.providers.pool.worker_client import WorkerClient

POOL = "pool-e"
HOSTS = ("pypi.org", "198.51.100.2:18080")


def machine(tenant: str, hosts: tuple[str, ...] = HOSTS, name: str = "web") -> MachineSpec:
    machine_type = MachineType(name=name, image=DEFAULT_IMAGE, backend=BackendKind.DOCKER, egress_hosts=hosts)
    return MachineSpec(
        machine_id=uuid.uuid4().hex, tenant_id=tenant, machine_type=machine_type, worker_token=MACHINE_TOKEN
    )


@pytest.fixture
def daemon() -> Iterator[DockerSimulator]:
    folder = tempfile.mkdtemp(prefix="degr", dir="/tmp")  # AF_UNIX paths are short
    try:
        with DockerSimulator(f"{folder}/docker.sock", images={DEFAULT_IMAGE: ImageSpec(), **EGRESS_IMAGES}) as sim:
            yield sim
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
async def backend(daemon: DockerSimulator, client: WorkerClient) -> AsyncIterator[DockerBackend]:
    docker = DockerBackend(client, socket_path=daemon.socket_path, pool=POOL)
    yield docker
    await docker.aclose()


def proxies(daemon: DockerSimulator) -> list[str]:
    return sorted(c.name for c in daemon.containers() if c.image == DEFAULT_EGRESS_IMAGE)


def env_of(daemon: DockerSimulator, container_id: str) -> dict[str, str]:
    return dict(item.split("=", 1) for item in daemon.container(container_id).env)


async def test_an_egress_types_first_machine_makes_its_proxy_and_is_pointed_at_it(
    daemon: DockerSimulator, backend: DockerBackend
) -> None:
    """The outside network (not internal, labelled, bridge thte{key}), the proxy created on it, connected to the
    tenant's network and started, in that order, before the worker, whose HTTP(S)_PROXY is the proxy's address on the
    tenant's network."""
    handle = await backend.start(machine("acme"))
    key = machine_network_key(POOL, "acme", HOSTS)
    tenant, outside = f"{POOL}-tenant-{key}", f"{POOL}-egress-{key}"
    calls = [(r.method, r.path.split("/", 2)[2], r.query) for r in daemon.requests() if r.path != "/version"]
    labels = json.dumps({"label": [f"thermostat.pool={POOL}", f"thermostat.egress_of={key}"]})
    digest = egress_digest(HOSTS)
    with_digest = json.dumps({"label": [f"thermostat.pool={POOL}", f"thermostat.egress_of={key}",
                                        f"thermostat.egress_list={digest}"]})  # fmt: skip
    (proxy,) = [c for c in daemon.containers() if c.image == DEFAULT_EGRESS_IMAGE]
    assert calls[2:9] == [
        ("GET", "containers/json", urlencode({"all": "true", "filters": with_digest})),
        ("GET", "networks", urlencode({"filters": labels})),
        ("POST", "networks/create", ""),
        ("POST", "containers/create", urlencode({"name": f"{POOL}-egress-{key}-{digest}"})),
        ("POST", f"networks/{tenant}/connect", ""),
        ("POST", f"containers/{proxy.id}/start", ""),
        ("GET", f"containers/{proxy.id}/json", ""),
    ]
    bodies = {r.path.split("/", 2)[2]: r.json_body for r in daemon.requests() if r.method == "POST"}
    assert bodies[f"networks/{tenant}/connect"] == {"Container": proxy.id}
    created = [r.json_body for r in daemon.requests() if r.path.endswith("/networks/create")]
    assert created[1] == create_outside_network_body(POOL, "acme", key)
    proxy_body = next(r.json_body for r in daemon.requests() if "egress" in r.query and "create" in r.path)
    assert proxy_body == create_proxy_body(image=DEFAULT_EGRESS_IMAGE, hosts=HOSTS, pool=POOL, key=key,
                                           outside=outside)  # fmt: skip
    assert proxy.address is not None
    env = env_of(daemon, handle.provider_id)
    assert env["HTTP_PROXY"] == env["HTTPS_PROXY"] == f"http://{proxy.address}:8888"
    assert env["NO_PROXY"] == "localhost,127.0.0.1,::1"
    await healthy(backend, handle)


async def test_a_type_without_egress_gets_no_proxy_and_no_proxy_variables(
    daemon: DockerSimulator, backend: DockerBackend
) -> None:
    """No egress_hosts: no outside network, no proxy, no HTTP_PROXY; the machine's network is internal only."""
    handle = await backend.start(machine("acme", hosts=()))
    assert proxies(daemon) == []
    assert [network["Internal"] for network in daemon.networks()] == [True]
    assert not any(name.lower().endswith("_proxy") for name in env_of(daemon, handle.provider_id))


async def test_an_egress_type_runs_on_a_network_of_its_tenant_and_list_apart_from_the_tenants_others(
    daemon: DockerSimulator, backend: DockerBackend
) -> None:
    """The egress type's machine and its proxy share an internal network of (tenant, list), labelled with the tenant;
    the same tenant's type without egress is on the tenant's own network, which no proxy joins."""
    opted, closed = await backend.start(machine("acme")), await backend.start(machine("acme", hosts=()))
    tenant, listed = network_key(POOL, "acme"), machine_network_key(POOL, "acme", HOSTS)
    assert tenant != listed
    modes = {h.provider_id: daemon.container(h.provider_id).host_config["NetworkMode"] for h in (opted, closed)}
    assert (modes[opted.provider_id], modes[closed.provider_id]) == (
        f"{POOL}-tenant-{listed}",
        f"{POOL}-tenant-{tenant}",
    )
    (proxy,) = [c for c in daemon.containers() if c.image == DEFAULT_EGRESS_IMAGE]
    assert proxy.joined == [f"{POOL}-tenant-{listed}"]
    internal = {n["Name"]: n for n in daemon.networks() if n["Internal"]}
    assert internal[f"{POOL}-tenant-{listed}"]["Labels"] == {
        "thermostat.pool": POOL, "thermostat.tenant": "acme", "thermostat.tenant_network": listed
    }  # fmt: skip


async def test_one_proxy_per_tenant_network_and_allow_list(daemon: DockerSimulator, backend: DockerBackend) -> None:
    """Two machines of a type share its proxy; a type with another list gets another; another tenant its own."""
    first, second = await backend.start(machine("acme")), await backend.start(machine("acme"))
    other_list = await backend.start(machine("acme", hosts=("files.pythonhosted.org",), name="pip"))
    other_tenant = await backend.start(machine("globex"))
    proxy_of = {h.provider_id: env_of(daemon, h.provider_id)["HTTP_PROXY"] for h in (first, second, other_list,
                                                                                       other_tenant)}  # fmt: skip
    assert proxy_of[first.provider_id] == proxy_of[second.provider_id]
    assert len({proxy_of[first.provider_id], proxy_of[other_list.provider_id], proxy_of[other_tenant.provider_id]}) == 3
    assert len(proxies(daemon)) == 3


async def test_a_restarted_pool_finds_the_proxy_by_its_labels(
    daemon: DockerSimulator, backend: DockerBackend, client: WorkerClient
) -> None:
    """A second backend (a restarted process) finds the running proxy and makes none; its stops remove it all."""
    handle = await backend.start(machine("acme"))
    restarted = DockerBackend(client, socket_path=daemon.socket_path, pool=POOL)
    try:
        daemon.clear_requests()
        again = await restarted.start(machine("acme"))
        assert [r.path for r in daemon.requests() if r.path.endswith("/create")] == [
            r.path for r in daemon.requests() if "containers/create" in r.path and "egress" not in r.query
        ]
        assert env_of(daemon, again.provider_id)["HTTP_PROXY"] == env_of(daemon, handle.provider_id)["HTTP_PROXY"]
        await restarted.stop(handle.provider_id)
        await restarted.stop(again.provider_id)
    finally:
        await restarted.aclose()
    assert (daemon.containers(), daemon.networks()) == ([], [])


async def test_the_proxy_and_its_network_go_with_the_tenants_last_machine(
    daemon: DockerSimulator, backend: DockerBackend
) -> None:
    """Stopping one of two machines keeps the proxy; the last one's stop removes the proxy, the outside network and
    the tenant's network; another tenant's stay."""
    first, second, other = [await backend.start(machine(t)) for t in ("acme", "acme", "globex")]
    await backend.stop(first.provider_id)
    assert len(proxies(daemon)) == 2
    await backend.stop(second.provider_id)
    key = machine_network_key(POOL, "globex", HOSTS)
    assert proxies(daemon) == [f"{POOL}-egress-{key}-{egress_digest(HOSTS)}"]
    assert sorted(n["Name"] for n in daemon.networks()) == [f"{POOL}-egress-{key}", f"{POOL}-tenant-{key}"]
    await backend.stop(other.provider_id)
    assert (daemon.containers(), daemon.networks()) == ([], [])


async def test_a_stopped_proxy_is_made_again(daemon: DockerSimulator, backend: DockerBackend) -> None:
    """A proxy found not running (its process died, the daemon restarted) is removed and another made."""
    handle = await backend.start(machine("acme"))
    (proxy,) = [c for c in daemon.containers() if c.image == DEFAULT_EGRESS_IMAGE]
    daemon.kill_machine(proxy.id)
    again = await backend.start(machine("acme"))
    (remade,) = [c for c in daemon.containers() if c.image == DEFAULT_EGRESS_IMAGE]
    assert remade.id != proxy.id and remade.status == "running"
    assert env_of(daemon, again.provider_id)["HTTP_PROXY"] == f"http://{remade.address}:8888"
    await backend.stop(handle.provider_id)
    await backend.stop(again.provider_id)
    assert (daemon.containers(), daemon.networks()) == ([], [])


async def test_a_proxy_that_cannot_be_made_fails_the_boot_and_leaves_nothing(
    daemon: DockerSimulator, client: WorkerClient
) -> None:
    """No proxy image on the daemon: the boot fails with the daemon's "No such image", and no container or network is
    left (the worker is never created: it would have no way out it was promised)."""
    docker = DockerBackend(client, socket_path=daemon.socket_path, pool=POOL, egress_image="no-such-egress:1")
    try:
        with pytest.raises(BackendError, match=r"create egress proxy.*No such image"):
            await docker.start(machine("acme"))
    finally:
        await docker.aclose()
    assert (daemon.containers(), daemon.networks()) == ([], [])


async def test_the_orphan_sweeps_listing_leaves_the_proxy_out(daemon: DockerSimulator, backend: DockerBackend) -> None:
    """The proxy carries the pool's label but is no machine: the sweep would otherwise remove it."""
    handle = await backend.start(machine("acme"))
    listed = await backend.list_machines()
    assert listed is not None and [m.provider_id for m in listed] == [handle.provider_id]
