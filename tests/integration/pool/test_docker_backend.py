"""The Docker backend against the Engine API simulator on a UNIX socket: request shapes, lifecycle, refusals."""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest

from tests.fixtures.polling import eventually
from tests.integration.pool.conftest import MACHINE_TOKEN, healthy, spec
from thermostat.dev.simulators.docker import DEFAULT_IMAGE, ENGINE_29_0, DockerSimulator, ImageSpec
from thermostat.dev.simulators.serving import RecordedRequest
from thermostat.policy.pool.job_outcome import ReplyKind
from thermostat.policy.pool.machine_type import BackendKind, MachineType
from thermostat.policy.pool.tenant_network import network_key
from thermostat.providers.pool.backend import BackendError, MachineHandle
from thermostat.providers.pool.docker import LOG_TAIL_LINES, DockerBackend, demultiplexed, docker_socket_path
from thermostat.providers.pool.worker_client import WorkerClient

ACME = network_key("pool-a", "acme")  # the tenant of conftest's spec: its network's key
PREFIX = ENGINE_29_0.highest.prefix  # the simulator plays Engine 29.0 (API 1.44–1.52): the pool speaks 1.52
# Every machine's confinement when its type relaxes nothing (issue 36): the Engine API's HostConfig fields
STRICT_HOST_CONFIG = {
    "CapDrop": ["ALL"],
    "SecurityOpt": ["no-new-privileges:true"],
    "ReadonlyRootfs": True,
    "Tmpfs": {"/tmp": "rw,nosuid,nodev,size=64m"},
    "PidsLimit": 256,
}


def docker_type(**fields: object) -> MachineType:
    return MachineType(**{"name": "cpu-small", "image": DEFAULT_IMAGE, "backend": BackendKind.DOCKER, **fields})


@pytest.fixture(scope="module")
def running_daemon() -> Iterator[DockerSimulator]:
    folder = tempfile.mkdtemp(prefix="dsim", dir="/tmp")  # AF_UNIX paths are short: pytest's tmp_path may not fit
    images = {
        DEFAULT_IMAGE: ImageSpec(),
        "broken:1": ImageSpec(start_error='OCI runtime create failed: exec: "worker": executable file not found'),
    }
    try:
        with DockerSimulator(f"{folder}/docker.sock", images=images) as simulator:
            yield simulator
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def daemon(running_daemon: DockerSimulator) -> Iterator[DockerSimulator]:
    running_daemon.reset()
    yield running_daemon
    running_daemon.reset()


@pytest.fixture
async def backend(daemon: DockerSimulator, client: WorkerClient) -> AsyncIterator[DockerBackend]:
    docker = DockerBackend(client, socket_path=daemon.socket_path, pool="pool-a", worker_port=8080)
    yield docker
    await docker.aclose()


def calls(daemon: DockerSimulator) -> list[tuple[str, str, str]]:
    return [(r.method, r.path, r.query) for r in daemon.requests()]


def create_request(daemon: DockerSimulator) -> RecordedRequest:
    return next(r for r in daemon.requests() if r.path.endswith("/containers/create"))


def test_socket_is_pool_setting_then_unix_docker_host_then_the_default() -> None:
    """POOL_DOCKER_SOCKET wins; a unix:// DOCKER_HOST is next; a tcp:// host is not a socket."""
    assert docker_socket_path(pool_docker_socket="/s/pool.sock", docker_host="unix:///s/host.sock") == "/s/pool.sock"
    assert docker_socket_path(pool_docker_socket=None, docker_host="unix:///s/host.sock") == "/s/host.sock"
    assert docker_socket_path(pool_docker_socket=" ", docker_host="tcp://10.0.0.1:2375") == "/var/run/docker.sock"
    assert docker_socket_path(pool_docker_socket=None, docker_host=None) == "/var/run/docker.sock"


async def test_start_creates_starts_and_inspects_with_the_seed_shapes(
    daemon: DockerSimulator, backend: DockerBackend
) -> None:
    """Create carries image, env + token, labels, the port on loopback with a daemon-chosen host port."""
    machine = spec(docker_type(env={"CELL": "on"}))
    handle = await backend.start(machine)
    wanted = json.dumps({"label": ["thermostat.pool=pool-a", f"thermostat.tenant_network={ACME}"]})
    assert calls(daemon) == [
        ("GET", "/version", ""),
        ("GET", f"{PREFIX}/networks", urlencode({"filters": wanted})),
        ("POST", f"{PREFIX}/networks/create", ""),
        ("POST", f"{PREFIX}/containers/create", f"name=pool-a-cpu-small-{machine.machine_id}"),
        ("POST", f"{PREFIX}/containers/{handle.provider_id}/start", ""),
        ("GET", f"{PREFIX}/containers/{handle.provider_id}/json", ""),
    ]
    body = create_request(daemon).json_body
    assert body == {
        "Image": DEFAULT_IMAGE,
        "User": "65534:65534",
        "Env": ["CELL=on", f"STRATA_WORKER_TOKEN={MACHINE_TOKEN}"],
        "Labels": {
            "thermostat.pool": "pool-a",
            "thermostat.machine_type": "cpu-small",
            "thermostat.machine_id": machine.machine_id,
            "thermostat.tenant_network": ACME,
        },
        "ExposedPorts": {"8080/tcp": {}},
        "HostConfig": {"NetworkMode": f"pool-a-tenant-{ACME}", **STRICT_HOST_CONFIG},
    }
    address = daemon.container(handle.provider_id).address
    assert handle == MachineHandle(provider_id=handle.provider_id, endpoint=f"http://{address}:8080", region=None)


async def test_limits_are_sent_only_when_set(daemon: DockerSimulator, backend: DockerBackend) -> None:
    """cpus become NanoCpus and memory_mb bytes; the daemon records them as sent."""
    handle = await backend.start(spec(docker_type(cpus=1.5, memory_mb=512)))
    host_config = create_request(daemon).json_body["HostConfig"]  # type: ignore[index]
    assert host_config["NanoCpus"] == 1_500_000_000
    assert host_config["Memory"] == 512 * 1024 * 1024
    assert daemon.container(handle.provider_id).host_config["NanoCpus"] == 1_500_000_000


async def test_unset_limits_are_omitted_never_zero(daemon: DockerSimulator, backend: DockerBackend) -> None:
    """An unset limit is absent: 0 would also mean unlimited, but says something the type did not."""
    await backend.start(spec(docker_type()))
    host_config = create_request(daemon).json_body["HostConfig"]  # type: ignore[index]
    assert "NanoCpus" not in host_config
    assert "Memory" not in host_config


async def test_every_machine_is_confined_by_default_and_mounts_nothing(
    daemon: DockerSimulator, backend: DockerBackend
) -> None:
    """All capabilities dropped, no new privileges, a read-only root with a /tmp tmpfs, a pids limit, nobody."""
    handle = await backend.start(spec(docker_type(cpus=1, memory_mb=256)))
    body = create_request(daemon).json_body
    host_config = body["HostConfig"]  # type: ignore[index]
    assert {key: host_config[key] for key in STRICT_HOST_CONFIG} == STRICT_HOST_CONFIG
    assert body["User"] == "65534:65534"  # type: ignore[index]
    assert not {"Binds", "Mounts", "Volumes", "Privileged", "CapAdd", "Runtime"} & (set(host_config) | set(body))  # type: ignore[arg-type]
    assert daemon.container(handle.provider_id).host_config["CapDrop"] == ["ALL"]


async def test_a_type_relaxes_only_what_it_names(daemon: DockerSimulator, backend: DockerBackend) -> None:
    """writable_root, scratch_mb, pids_limit, user and capabilities_add each change their own field; the rest
    stay strict."""
    relaxed = docker_type(
        writable_root=True, scratch_mb=512, pids_limit=1024, user="worker", capabilities_add=("NET_BIND_SERVICE",)
    )
    await backend.start(spec(relaxed))
    body = create_request(daemon).json_body
    host_config = body["HostConfig"]  # type: ignore[index]
    assert host_config["ReadonlyRootfs"] is False
    assert host_config["Tmpfs"] == {"/tmp": "rw,nosuid,nodev,size=512m"}
    assert host_config["PidsLimit"] == 1024
    assert body["User"] == "worker"  # type: ignore[index]
    assert (host_config["CapDrop"], host_config["CapAdd"]) == (["ALL"], ["NET_BIND_SERVICE"])
    assert host_config["SecurityOpt"] == ["no-new-privileges:true"]


async def test_a_types_runtime_goes_to_the_daemon_as_the_containers_runtime(
    daemon: DockerSimulator, backend: DockerBackend
) -> None:
    """`runtime` is HostConfig.Runtime; a type without one sends none (the daemon's default, runc)."""
    daemon.runtimes = ("runc", "runsc")
    await backend.start(spec(docker_type(runtime="runsc")))
    assert create_request(daemon).json_body["HostConfig"]["Runtime"] == "runsc"  # type: ignore[index]


async def test_the_daemons_runtimes_are_read_from_info(daemon: DockerSimulator, backend: DockerBackend) -> None:
    """GET /info's Runtimes keys, sorted."""
    daemon.runtimes = ("runsc", "runc", "io.containerd.runc.v2")
    assert await backend.runtimes() == ("io.containerd.runc.v2", "runc", "runsc")
    assert calls(daemon)[-1] == ("GET", f"{PREFIX}/info", "")


async def test_a_runtime_the_daemon_lost_fails_the_boot_with_its_message(
    daemon: DockerSimulator, backend: DockerBackend
) -> None:
    """Accepted at PUT, gone from the daemon since: the create's 400 is the boot's error, nothing is left."""
    daemon.runtimes = ("runc",)
    with pytest.raises(BackendError, match="Unknown runtime specified runsc"):
        await backend.start(spec(docker_type(runtime="runsc")))
    assert daemon.containers() == []


async def test_catalogue_token_never_replaces_the_minted_one(daemon: DockerSimulator, backend: DockerBackend) -> None:
    """A STRATA_WORKER_TOKEN in the type's env is overwritten by the machine's own."""
    await backend.start(spec(docker_type(env={"STRATA_WORKER_TOKEN": "from-catalogue"})))
    assert create_request(daemon).json_body["Env"] == [f"STRATA_WORKER_TOKEN={MACHINE_TOKEN}"]  # type: ignore[index]


async def test_machine_boots_runs_a_job_and_is_destroyed(
    daemon: DockerSimulator, backend: DockerBackend, client: WorkerClient
) -> None:
    """start → health → a real execute through the worker client → stop (gone); a second stop is a no-op."""
    handle = await backend.start(spec(docker_type()))
    await healthy(backend, handle)
    reply = await client.execute(handle.endpoint, MACHINE_TOKEN, b"job payload", deadline_seconds=10)
    assert (reply.kind, reply.status, reply.body) == (ReplyKind.ANSWERED, 200, b"job payload")
    daemon.clear_requests()
    await backend.stop(handle.provider_id)
    wanted = json.dumps({"label": ["thermostat.pool=pool-a", f"thermostat.tenant_network={ACME}"]})
    assert calls(daemon) == [
        ("GET", f"{PREFIX}/containers/{handle.provider_id}/json", ""),
        ("POST", f"{PREFIX}/containers/{handle.provider_id}/stop", "t=5"),
        ("DELETE", f"{PREFIX}/containers/{handle.provider_id}", "force=true"),
        ("GET", f"{PREFIX}/containers/json", urlencode({"all": "true", "filters": wanted})),
        ("DELETE", f"{PREFIX}/networks/pool-a-tenant-{ACME}", ""),
    ]
    assert (daemon.containers(), daemon.networks()) == ([], [])
    assert not await backend.health(handle)
    await backend.stop(handle.provider_id)  # 404 from both calls: already gone


async def test_a_stop_that_meets_another_removal_in_progress_returns_once_the_container_is_gone(
    daemon: DockerSimulator, backend: DockerBackend
) -> None:
    """Two removers of one container (a second process's stop, the orphan sweep): when the other began first, the
    daemon answers this DELETE 409 "already in progress"; the stop then waits for the removal, not failing and not
    returning while the container still exists (found when two test processes removed one container)."""
    handle = await backend.start(spec(docker_type()))
    await healthy(backend, handle)
    daemon.begin_removal(handle.provider_id)
    daemon.clear_requests()
    stopping = asyncio.ensure_future(backend.stop(handle.provider_id))

    async def waiting() -> bool | None:
        return True if any(r.path.endswith("/wait") for r in daemon.requests()) else None

    await eventually(waiting)  # the barrier: the stop is waiting on the daemon
    assert not stopping.done()
    daemon.finish_removal(handle.provider_id)
    await asyncio.wait_for(stopping, 10)
    assert calls(daemon)[1:4] == [
        ("POST", f"{PREFIX}/containers/{handle.provider_id}/stop", "t=5"),
        ("DELETE", f"{PREFIX}/containers/{handle.provider_id}", "force=true"),
        ("POST", f"{PREFIX}/containers/{handle.provider_id}/wait", "condition=removed"),
    ]
    assert daemon.containers() == []


async def test_machine_that_dies_reads_unhealthy(daemon: DockerSimulator, backend: DockerBackend) -> None:
    """Killing the container's process makes the daemon report it exited, and health false."""
    handle = await backend.start(spec(docker_type()))
    await healthy(backend, handle)
    daemon.kill_machine(handle.provider_id)
    assert not await backend.health(handle)
    assert daemon.container(handle.provider_id).status == "exited"


async def test_a_container_that_exits_at_start_has_ended_with_its_exit_code_and_log_tail(
    daemon: DockerSimulator, backend: DockerBackend, tmp_path: Path
) -> None:
    """Issue 35: the container's exit code (State) and its last lines (GET /containers/{id}/logs), no secret. The
    container exits once the test says so, after its start (a death before the start's inspect is the test above)."""
    go = tmp_path / "exit-now"
    script = (
        "import os, sys, time; print('loading', os.environ['HF_TOKEN'], flush=True)\n"
        f"while not os.path.exists({str(go)!r}): time.sleep(0.01)\n"
        "sys.exit('no handler named nope')"
    )
    daemon.add_image("dies:1", ImageSpec(command=(sys.executable, "-c", script)))
    machine_spec = spec(docker_type(image="dies:1", env={"HF_TOKEN": "hf-secret-value-1234"}))
    handle = await backend.start(machine_spec)
    go.touch()

    async def ended() -> str | None:
        return await backend.ended(handle, machine_spec)

    reason = await eventually(ended, timeout=10, every=0.05)
    assert reason == (
        "the machine exited with code 1 before answering its health check; "
        "its last output: loading <redacted> | no handler named nope"
    )
    logs = [r for r in daemon.requests() if r.path.endswith(f"/containers/{handle.provider_id}/logs")]
    assert [(r.method, r.params) for r in logs] == [
        ("GET", {"stdout": ["1"], "stderr": ["1"], "tail": [str(LOG_TAIL_LINES)]})
    ]
    await backend.stop(handle.provider_id)


async def test_a_running_or_killed_container_reads_as_such(daemon: DockerSimulator, backend: DockerBackend) -> None:
    """Running: not ended; killed (-9, nothing printed): ended with 137 and no output."""
    machine_spec = spec(docker_type())
    handle = await backend.start(machine_spec)
    await healthy(backend, handle)
    assert await backend.ended(handle, machine_spec) is None
    daemon.kill_machine(handle.provider_id)
    assert await backend.ended(handle, machine_spec) == (
        "the machine exited with code 137 before answering its health check"
    )
    await backend.stop(handle.provider_id)


@pytest.mark.parametrize(
    ("body", "payload"),
    [
        pytest.param(b"\x01\0\0\0\0\0\0\x03one\x02\0\0\0\0\0\0\x04two\n", b"onetwo\n", id="stdout-and-stderr-frames"),
        pytest.param(b"plain text from a tty\n", b"plain text from a tty\n", id="a-raw-stream-as-it-is"),
        pytest.param(b"", b"", id="empty"),
    ],
)
def test_the_log_stream_is_demultiplexed(body: bytes, payload: bytes) -> None:
    assert demultiplexed(body) == payload


async def test_missing_image_fails_with_the_daemons_message(daemon: DockerSimulator, backend: DockerBackend) -> None:
    """The pool does not pull: an image not on the host is the daemon's own "No such image", nothing created."""
    machine = spec(docker_type(image="not-here:1"))
    with pytest.raises(BackendError) as refused:
        await backend.start(machine)
    assert str(refused.value) == (
        f"docker: machine {machine.machine_id} (type cpu-small): create HTTP 404: No such image: not-here:1"
    )
    assert daemon.containers() == []
    assert [r.path for r in daemon.requests() if "/images/" in r.path] == []


async def test_container_that_will_not_start_is_removed(daemon: DockerSimulator, backend: DockerBackend) -> None:
    """A failed start surfaces the daemon's message and force-removes the container it created."""
    with pytest.raises(BackendError, match="start HTTP 500: OCI runtime create failed") as refused:
        await backend.start(spec(docker_type(image="broken:1")))
    assert MACHINE_TOKEN not in str(refused.value)
    assert daemon.containers() == []
    assert calls(daemon)[-1][0] == "DELETE"


async def test_container_created_without_an_id_in_the_answer_is_removed_by_name(
    daemon: DockerSimulator, backend: DockerBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 201 whose body lost the id still made a container: it is force-removed by the name the pool gave it."""
    original = daemon._handle

    def answer_without_id(request: RecordedRequest) -> Any:
        result = original(request)
        if request.path.endswith("/containers/create"):
            return (201, {"Content-Type": "application/json"}, b"{}")
        return result

    monkeypatch.setattr(daemon, "_handle", answer_without_id)
    with pytest.raises(BackendError, match="create answered without a container id"):
        await backend.start(spec(docker_type()))
    assert daemon.containers() == []


async def test_daemon_message_is_bounded_and_never_carries_the_token(
    daemon: DockerSimulator, backend: DockerBackend
) -> None:
    """A daemon that echoes the environment in a long error does not leak the token into the job's error."""
    daemon.add_image("echoes:1", ImageSpec(start_error=f"bad env STRATA_WORKER_TOKEN={MACHINE_TOKEN} " + "x" * 2000))
    with pytest.raises(BackendError) as refused:
        await backend.start(spec(docker_type(image="echoes:1")))
    message = str(refused.value)
    assert MACHINE_TOKEN not in message
    assert "STRATA_WORKER_TOKEN=<redacted>" in message
    assert len(message) < 450


async def test_a_container_dead_before_its_first_inspect_fails_its_start_with_its_exit_code_and_last_words(
    daemon: DockerSimulator, backend: DockerBackend
) -> None:
    """A fast crash on a loaded host: the container has exited (and lost its address) before the start inspects it.
    The start says why (its exit and last lines), not that the daemon gave it no address; nothing is left."""
    script = "import sys; print('cannot import handler nope', file=sys.stderr, flush=True); sys.exit(3)"
    daemon.add_image("dies-at-once:1", ImageSpec(command=(sys.executable, "-c", script), dies_at_once=True))
    with pytest.raises(BackendError) as refused:
        await backend.start(spec(docker_type(image="dies-at-once:1")))
    assert str(refused.value).endswith(
        "the machine exited with code 3 before answering its health check; its last output: cannot import handler nope"
    )
    assert daemon.containers() == []


async def test_unreachable_daemon_names_the_socket_and_the_machine(client: WorkerClient) -> None:
    """No daemon behind the socket is a BackendError naming where the backend looked."""
    docker = DockerBackend(client, socket_path="/tmp/no-such-docker.sock")
    try:
        machine = spec(docker_type())
        with pytest.raises(BackendError, match=rf"machine {machine.machine_id}.*/tmp/no-such-docker.sock"):
            await docker.start(machine)
    finally:
        await docker.aclose()


async def test_list_machines_names_this_pools_containers_stopped_ones_too(
    daemon: DockerSimulator, backend: DockerBackend, client: WorkerClient
) -> None:
    """The orphan sweep's listing: containers labelled with this pool, by their names; another pool's are not."""
    ours = await backend.start(spec(docker_type()))
    stopped = await backend.start(spec(docker_type()))
    daemon.kill_machine(stopped.provider_id)  # exited: a stopped container still holds its disk
    other_pool = DockerBackend(client, socket_path=daemon.socket_path, pool="pool-b", worker_port=8080)
    try:
        theirs = await other_pool.start(spec(docker_type()))
        listed = await backend.list_machines()
        assert listed is not None
        assert {machine.provider_id for machine in listed} == {ours.provider_id, stopped.provider_id}
        assert all(machine.name.startswith("pool-a-") for machine in listed)
        assert [machine.provider_id for machine in await other_pool.list_machines() or ()] == [theirs.provider_id]
    finally:
        await other_pool.aclose()
