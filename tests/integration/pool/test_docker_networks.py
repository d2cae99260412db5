"""Each tenant's Docker machines on an internal network of its own (issue 36), against the Engine API simulator:
made on demand, shared by the tenant's machines, another tenant's apart, found again by its label after a restart,
removed once its last machine is gone, never left behind by a failed boot."""

from __future__ import annotations

import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator

import pytest

from tests.integration.pool.conftest import MACHINE_TOKEN, healthy
from thermostat.dev.simulators.docker import DEFAULT_IMAGE, DockerSimulator, ImageSpec
from thermostat.policy.pool.machine_type import BackendKind, MachineType
from thermostat.policy.pool.tenant_network import network_key
from thermostat.providers.pool.backend import BackendError, MachineSpec
from thermostat.providers.pool.docker import DockerBackend
from thermostat.providers.pool.worker_client import WorkerClient

POOL = "pool-n"


def machine(tenant: str, image: str = DEFAULT_IMAGE) -> MachineSpec:
    machine_type = MachineType(name="cpu", image=image, backend=BackendKind.DOCKER)
    return MachineSpec(
        machine_id=uuid.uuid4().hex, tenant_id=tenant, machine_type=machine_type, worker_token=MACHINE_TOKEN
    )


@pytest.fixture
def daemon() -> Iterator[DockerSimulator]:
    folder = tempfile.mkdtemp(prefix="dnet", dir="/tmp")  # AF_UNIX paths are short
    try:
        with DockerSimulator(f"{folder}/docker.sock", images={DEFAULT_IMAGE: ImageSpec()}) as simulator:
            yield simulator
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
async def backend(daemon: DockerSimulator, client: WorkerClient) -> AsyncIterator[DockerBackend]:
    docker = DockerBackend(client, socket_path=daemon.socket_path, pool=POOL)
    yield docker
    await docker.aclose()


def network_names(daemon: DockerSimulator) -> list[str]:
    return sorted(network["Name"] for network in daemon.networks())


async def test_a_tenants_first_machine_makes_its_internal_network_labelled_and_bridged_by_name(
    daemon: DockerSimulator, backend: DockerBackend
) -> None:
    """Internal (no route out), labelled with the pool, the tenant and its key, its bridge `thtn{key}`."""
    handle = await backend.start(machine("acme"))
    key = network_key(POOL, "acme")
    (network,) = daemon.networks()
    assert {k: network[k] for k in ("Name", "Driver", "Internal", "Labels", "Options")} == {
        "Name": f"{POOL}-tenant-{key}",
        "Driver": "bridge",
        "Internal": True,
        "Labels": {"thermostat.pool": POOL, "thermostat.tenant": "acme", "thermostat.tenant_network": key},
        "Options": {"com.docker.network.bridge.name": f"thtn{key}"},
    }
    assert daemon.container(handle.provider_id).host_config["NetworkMode"] == network["Name"]
    assert "PortBindings" not in daemon.container(handle.provider_id).host_config  # an internal network has none


async def test_the_pool_reaches_the_worker_at_its_address_on_the_tenants_network(
    daemon: DockerSimulator, backend: DockerBackend
) -> None:
    """The endpoint is the container's address on its network at the worker port, and the worker answers there."""
    handle = await backend.start(machine("acme"))
    address = daemon.container(handle.provider_id).address
    assert address is not None and address.startswith("127.") and address != "127.0.0.1"
    assert handle.endpoint == f"http://{address}:8080"
    await healthy(backend, handle)


async def test_a_tenants_machines_share_its_network_and_another_tenant_gets_its_own(
    daemon: DockerSimulator, backend: DockerBackend
) -> None:
    """Two machines of acme, one network; globex's machine, another."""
    first, second = await backend.start(machine("acme")), await backend.start(machine("acme"))
    other = await backend.start(machine("globex"))
    modes = {h.provider_id: daemon.container(h.provider_id).host_config["NetworkMode"] for h in (first, second, other)}
    assert modes[first.provider_id] == modes[second.provider_id] != modes[other.provider_id]
    assert network_names(daemon) == sorted({*modes.values()})


async def test_the_network_goes_with_its_tenants_last_machine_only(
    daemon: DockerSimulator, backend: DockerBackend
) -> None:
    """Stopping one of two machines keeps the network; stopping the last removes it; globex's stays."""
    first, second = await backend.start(machine("acme")), await backend.start(machine("acme"))
    other = await backend.start(machine("globex"))
    acme = f"{POOL}-tenant-{network_key(POOL, 'acme')}"
    await backend.stop(first.provider_id)
    assert acme in network_names(daemon)
    await backend.stop(second.provider_id)
    assert network_names(daemon) == [f"{POOL}-tenant-{network_key(POOL, 'globex')}"]
    await backend.stop(other.provider_id)
    assert daemon.networks() == []


async def test_a_restarted_pool_finds_the_tenants_network_by_its_label(
    daemon: DockerSimulator, backend: DockerBackend, client: WorkerClient
) -> None:
    """A second backend (a restarted process) lists the network by label and makes none; its stop removes it."""
    handle = await backend.start(machine("acme"))
    restarted = DockerBackend(client, socket_path=daemon.socket_path, pool=POOL)
    try:
        daemon.clear_requests()
        again = await restarted.start(machine("acme"))
        assert not any(r.path.endswith("/networks/create") for r in daemon.requests())
        assert len(daemon.networks()) == 1
        await restarted.stop(handle.provider_id)
        await restarted.stop(again.provider_id)
    finally:
        await restarted.aclose()
    assert daemon.networks() == []


async def test_a_network_made_by_another_process_first_is_used(daemon: DockerSimulator, backend: DockerBackend) -> None:
    """Another process made it between this one's listing and its create: the create's 409 "already exists" is
    the network, not a failed boot."""
    name = f"{POOL}-tenant-{network_key(POOL, 'acme')}"
    daemon.add_network(name)  # unlabelled: the listing does not find it, the create meets it
    handle = await backend.start(machine("acme"))
    assert daemon.container(handle.provider_id).host_config["NetworkMode"] == name
    assert network_names(daemon) == [name]


async def test_a_boot_that_fails_leaves_no_network(daemon: DockerSimulator, backend: DockerBackend) -> None:
    """The tenant's first machine's image is missing: no container, no network left."""
    with pytest.raises(BackendError, match="No such image"):
        await backend.start(machine("acme", image="not-pulled:1"))
    assert (daemon.containers(), daemon.networks()) == ([], [])
