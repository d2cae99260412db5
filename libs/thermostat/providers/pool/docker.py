"""DockerBackend: machines as containers on a Docker daemon, over the Engine API's UNIX socket with httpx.

No Docker SDK: every request is a plain HTTP call whose shape a test pins against the simulator
(thermostat.dev.simulators.docker). notes/provider-apis.md §4 has the API facts.

Theory of operation:
- version: the first call reads `GET /version` (unversioned) once and speaks the highest Engine API version both
  sides support (policy/pool/docker_api.py); every later request carries that `/v1.NN` prefix. A daemon whose
  range does not meet the pool's is one error line naming both ranges, logged once, and every start fails with
  it; a daemon that did not answer is asked again on the next call.
- start: the tenant's network first (docker_networks.py: internal, one per tenant, made on demand), then `POST
  /containers/create?name={pool}-{type}-{machine}` with the image, the type's env plus the worker token, labels naming
  the pool, the machine type, the machine and the tenant's network, `HostConfig.NetworkMode` that network (and no
  published port: an internal network publishes none), and `NanoCpus` / `Memory` only when the type sets cpus /
  memory_mb (0 would mean "no limit" to the daemon: an unset limit is left out, never sent as 0), and the confinement
  every machine gets (policy/pool/hardening.py, issue 36): `CapDrop` ALL (then `CapAdd` the type's `capabilities_add`),
  `SecurityOpt` no-new-privileges, `ReadonlyRootfs` (unless `writable_root`), `Tmpfs` /tmp of `scratch_mb`, `PidsLimit`,
  `User` (`Config.User`, never root), `Runtime` when the type names one; no `Binds` or `Mounts` ever, so the daemon's
  socket is never inside a machine. A type listing `egress_hosts` runs on the tenant's network of that list instead,
  with its egress proxy (docker_egress.py, policy/pool/egress.py: one per tenant and allow-list, made on demand),
  its worker's `HTTP_PROXY` / `HTTPS_PROXY` naming the proxy; a type without has no route out. Then
  `POST /containers/{id}/start`,
  then `GET /containers/{id}/json` for the container's address on its network: the worker is reached there, at the
  worker port (the pool runs on the daemon's host, which routes to its bridges). The pool does not pull: an image not on
  the host fails with the daemon's own "No such image" message. A container that was created but would not start (or
  whose address cannot be read, or whose start was cancelled, or whose create answered without its id: removed by name)
  is force-removed before the error is raised, so nothing is left behind.
- stop: `GET /containers/{id}/json` for its network's label, `POST /containers/{id}/stop?t=5`, then
  `DELETE /containers/{id}?force=true`; a 404 from either (the container is already gone) and a 304 from stop
  (already stopped) are success. A 409 "removal … is already in
  progress" (another remover got there first) is followed by `POST /containers/{id}/wait?condition=removed`: the
  stop returns once the container is gone, whoever removed it. Then the tenant's network goes if it was the last
  machine on it (its egress proxies, whose endpoints would keep it, and their outside network with it).
- runtimes: `GET /info`'s `Runtimes` keys (the OCI runtimes the daemon knows: runc, runsc …), read for a catalogue
  PUT that names a `runtime`, so a runtime the daemon lacks is a 400 then, not a failed boot later.
- health: the daemon reports the container running, and its worker answers `GET /health` with 200.
- ended (between a boot's health polls): a container the daemon reports `exited` or `dead` has ended; its
  `State.ExitCode` and the last lines of `GET /containers/{id}/logs?stdout=1&stderr=1&tail=N` (the multiplexed
  stream's frames joined; a TTY container's raw stream as it is), scrubbed of the worker token and the type's env
  values, say why, so its boot fails at once rather than at the boot timeout (issue 35).
- Errors name the machine (or container) and carry the daemon's `message`, bounded and scrubbed of the
  worker token.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
from typing import Any, Final

import httpx

from thermostat.chassis.tracing import http_transport
from thermostat.policy.pool.docker_api import ApiVersion, NoCommonVersion, negotiate
from thermostat.policy.pool.egress import (
    DEFAULT_EGRESS_IMAGE,
    LABEL_EGRESS_OF,
    machine_network_key,
    worker_proxy_env,
)
from thermostat.policy.pool.hardening import scratch_mount
from thermostat.policy.pool.machine_type import MachineType
from thermostat.policy.pool.orphans import ListedMachine
from thermostat.policy.pool.tenant_network import LABEL_POOL, LABEL_TENANT_NETWORK
from thermostat.providers.pool.backend import (
    DEFAULT_WORKER_PORT,
    Backend,
    BackendError,
    ListsMachines,
    ListsRuntimes,
    MachineHandle,
    MachineSpec,
    ReportsEnd,
)
from thermostat.providers.pool.docker_egress import EgressProxies
from thermostat.providers.pool.docker_networks import TenantNetworks
from thermostat.providers.pool.provider_errors import (
    TAIL_LINES,
    ended_reason,
    json_object,
    machine_secrets,
    machine_subject,
    output_tail,
    provider_error,
    refusal,
)
from thermostat.providers.pool.worker_client import WorkerClient

DEFAULT_DOCKER_SOCKET: Final = "/var/run/docker.sock"
STOP_TIMEOUT_SECONDS: Final = 5
ANNOUNCE_SECONDS: Final = 5.0  # the pool's start waits no longer for a daemon's version than this
REMOVAL_WAIT_SECONDS: Final = 60.0  # another remover's removal: the daemon answers the wait when it is done
__all__ = ["LABEL_POOL", "LABEL_TENANT_NETWORK"]  # the labels' names, for the tests and the dev stack
LABEL_MACHINE_TYPE: Final = "thermostat.machine_type"
LABEL_MACHINE_ID: Final = "thermostat.machine_id"
LOG_TAIL_LINES: Final = 4 * TAIL_LINES  # the daemon counts blank lines too: a few more than the reason repeats

_log = logging.getLogger(__name__)


def docker_socket_path(*, pool_docker_socket: str | None, docker_host: str | None) -> str:
    """POOL_DOCKER_SOCKET, else a unix:// DOCKER_HOST, else /var/run/docker.sock (a tcp:// host is not used)."""
    if pool_docker_socket and pool_docker_socket.strip():
        return pool_docker_socket.strip()
    if docker_host and docker_host.strip().startswith("unix://"):
        return docker_host.strip().removeprefix("unix://")
    return DEFAULT_DOCKER_SOCKET


def create_body(
    spec: MachineSpec, *, pool: str, worker_port: int, network: str, proxy: str | None = None
) -> dict[str, Any]:
    """The `POST /containers/create` body for one machine on its tenant's `network`, given its egress `proxy`'s address
    when its type has one (pure, pinned field by field by the tests)."""
    machine_type = spec.machine_type
    port = f"{worker_port}/tcp"
    host_config: dict[str, Any] = {"NetworkMode": network}
    if machine_type.cpus is not None:
        host_config["NanoCpus"] = math.ceil(machine_type.cpus * 1_000_000_000)
    if machine_type.memory_mb is not None:
        host_config["Memory"] = machine_type.memory_mb * 1024 * 1024
    host_config |= confinement(machine_type)
    proxied = worker_proxy_env(proxy) if proxy is not None else {}
    return {
        "Image": machine_type.image,
        "User": machine_type.user,
        "Env": [f"{name}={value}" for name, value in (spec.env() | proxied).items()],
        "Labels": {
            LABEL_POOL: pool,
            LABEL_MACHINE_TYPE: machine_type.name,
            LABEL_MACHINE_ID: spec.machine_id,
            LABEL_TENANT_NETWORK: machine_network_key(pool, spec.tenant_id, machine_type.egress_hosts),
        },
        "ExposedPorts": {port: {}},
        "HostConfig": host_config,
    }


def confinement(machine_type: MachineType) -> dict[str, Any]:
    """The HostConfig fields that confine a machine (the strict defaults, as the type relaxes them)."""
    confined: dict[str, Any] = {
        "CapDrop": ["ALL"],
        "SecurityOpt": ["no-new-privileges:true"],
        "ReadonlyRootfs": not machine_type.writable_root,
        "Tmpfs": scratch_mount(machine_type.scratch_mb),
        "PidsLimit": machine_type.pids_limit,
    }
    if machine_type.capabilities_add:
        confined["CapAdd"] = list(machine_type.capabilities_add)
    if machine_type.runtime is not None:
        confined["Runtime"] = machine_type.runtime
    return confined


def container_name(spec: MachineSpec, *, pool: str) -> str:
    return f"{pool}-{spec.machine_type.name}-{spec.machine_id}"


class DockerBackend:
    """DockerBackend starts one container per machine on the daemon behind `socket_path`."""

    def __init__(
        self,
        worker: WorkerClient,
        *,
        socket_path: str = DEFAULT_DOCKER_SOCKET,
        pool: str = "thermostat",
        worker_port: int = DEFAULT_WORKER_PORT,
        timeout_seconds: float = 30.0,
        transport: httpx.AsyncBaseTransport | None = None,
        egress_image: str = DEFAULT_EGRESS_IMAGE,
    ) -> None:
        self._worker = worker
        self._pool = pool
        self._worker_port = worker_port
        self.socket_path = socket_path
        self._timeout = timeout_seconds
        self._http = httpx.AsyncClient(
            transport=http_transport(transport or httpx.AsyncHTTPTransport(uds=socket_path)),
            base_url="http://docker",
            timeout=httpx.Timeout(timeout_seconds),
            follow_redirects=False,
        )
        self._version: ApiVersion | str | None = None  # once negotiated: the version, or the refusal's line
        self._negotiating = asyncio.Lock()

        def refused(response: httpx.Response, subject: str, what: str) -> BackendError:
            return _refused(response, subject, what, ())

        self._egress = EgressProxies(self._call, refused, pool=pool, image=egress_image)
        self._networks = TenantNetworks(self._call, refused, pool=pool, detach=self._egress.remove)

    def __repr__(self) -> str:
        return f"DockerBackend(socket_path={self.socket_path!r}, pool={self._pool!r})"

    async def aclose(self) -> None:
        await self._http.aclose()

    async def negotiate(self) -> ApiVersion:
        """The Engine API version this backend speaks to the daemon, read from its `GET /version` once;
        BackendError when the daemon did not answer (asked again next time) or shares no version with the pool."""
        if isinstance(self._version, ApiVersion):  # every call asks: the settled answer takes no lock
            return self._version
        async with self._negotiating:
            if self._version is None:
                self._version = await self._read_version()
            if isinstance(self._version, str):
                raise BackendError(self._version)
            return self._version

    async def announce(self) -> None:
        """Negotiate at the pool's start, so a daemon the pool cannot speak to is one error line then, not at
        the first boot; a daemon that does not answer yet is said at warning and asked again at the first call."""
        try:
            async with asyncio.timeout(ANNOUNCE_SECONDS):
                await self.negotiate()
        except TimeoutError:
            _log.warning("docker: daemon at %s: no answer to GET /version within %.0f s", self.socket_path,
                         ANNOUNCE_SECONDS)  # fmt: skip
        except BackendError as error:
            if self._version is None:  # a refusal was logged at error as it was found
                _log.warning("%s", error)

    async def _read_version(self) -> ApiVersion | str:
        subject = f"daemon at {self.socket_path}"
        try:
            answered = await self._http.get("/version")
        except httpx.HTTPError as error:
            raise BackendError(f"docker: {subject} did not answer ({type(error).__name__})") from None
        if answered.status_code != 200:
            raise _refused(answered, subject, "version", ())
        fields = json_object(answered)
        outcome = negotiate(daemon_api=fields.get("ApiVersion"), daemon_min=fields.get("MinAPIVersion"))
        if isinstance(outcome, NoCommonVersion):
            _log.error("docker: %s: %s", subject, outcome.reason)
            return f"docker: {subject}: {outcome.reason}"
        _log.info("docker: %s: speaking Engine API %s", subject, outcome.version)
        return outcome.version

    async def start(self, spec: MachineSpec) -> MachineHandle:
        subject = machine_subject(spec.machine_id, spec.machine_type.name)
        secrets = (spec.worker_token,)
        name = container_name(spec, pool=self._pool)
        key = machine_network_key(self._pool, spec.tenant_id, spec.machine_type.egress_hosts)
        no_proxy: BackendError | None = None
        async with self._networks.held(key):  # no release of this network between its ensure and the create
            network = await self._networks.ensure(spec.tenant_id, subject, key)
            try:
                proxy = await self._proxy(spec, key, network, subject)
            except BackendError as error:
                no_proxy = error
            else:
                body = create_body(spec, pool=self._pool, worker_port=self._worker_port, network=network, proxy=proxy)
                created = await self._call(
                    "POST", "/containers/create", subject, "create", secrets, params={"name": name}, json=body
                )
        if no_proxy is not None:  # released out of the lock: release takes it
            await self._networks.release(key)
            raise no_proxy
        if created.status_code != 201:
            await self._networks.release(key)
            raise _refused(created, subject, "create", secrets)
        container_id = json_object(created).get("Id")
        if not isinstance(container_id, str) or not container_id:
            # the 201 says the daemon made it: removed by the name the pool gave it, so nothing is left behind
            with contextlib.suppress(Exception):
                await asyncio.shield(self._discard(name, key))
            raise BackendError(f"docker: {subject}: create answered without a container id")
        try:
            started = await self._call("POST", f"/containers/{container_id}/start", subject, "start", secrets)
            if started.status_code not in (204, 304):
                raise _refused(started, subject, "start", secrets)
            try:
                address = await self._address(container_id, network, subject, secrets)
            except BackendError:
                # a container that exited at once has no address any more: its exit and last words say why
                provisional = MachineHandle(provider_id=container_id, endpoint="", region=None)
                why = await self.ended(provisional, spec)
                if why is None:
                    raise
                raise BackendError(f"docker: {subject}: {why}") from None
        except BaseException:
            # a container that will not start is removed, not left behind (shielded: a cancelled boot too)
            with contextlib.suppress(Exception):
                await asyncio.shield(self._discard(container_id, key))
            raise
        return MachineHandle(provider_id=container_id, endpoint=f"http://{address}:{self._worker_port}", region=None)

    async def _proxy(self, spec: MachineSpec, key: str, network: str, subject: str) -> str | None:
        """The address of the type's egress proxy on the tenant's network; None for a type without egress."""
        hosts = spec.machine_type.egress_hosts
        if not hosts:
            return None
        return await self._egress.ensure(spec.tenant_id, key, network, hosts, subject)

    async def _discard(self, container: str, key: str) -> None:
        await self._remove(container)
        await self._networks.release(key)

    async def _address(self, container_id: str, network: str, subject: str, secrets: tuple[str, ...]) -> str:
        inspected = await self._call("GET", f"/containers/{container_id}/json", subject, "inspect", secrets)
        if inspected.status_code != 200:
            raise _refused(inspected, subject, "inspect", secrets)
        settings = json_object(inspected).get("NetworkSettings")
        networks = settings.get("Networks") if isinstance(settings, dict) else None
        attached = networks.get(network) if isinstance(networks, dict) else None
        address = attached.get("IPAddress") if isinstance(attached, dict) else None
        if not isinstance(address, str) or not _is_ipv4(address):
            raise BackendError(f"docker: {subject}: the daemon gave the container no address on {network}")
        return address

    async def stop(self, provider_id: str) -> None:
        subject = f"container {provider_id}"
        key = await self._network_key_of(provider_id, subject)
        stopped = await self._call(
            "POST", f"/containers/{provider_id}/stop", subject, "stop", (), params={"t": str(STOP_TIMEOUT_SECONDS)}
        )
        if stopped.status_code not in (204, 304, 404):
            raise _refused(stopped, subject, "stop", ())
        await self._remove(provider_id)
        if key is not None:
            await self._networks.release(key)

    async def _network_key_of(self, provider_id: str, subject: str) -> str | None:
        """The tenant network label of the container (None: it is gone, or predates the tenant networks)."""
        inspected = await self._call("GET", f"/containers/{provider_id}/json", subject, "inspect", ())
        config = json_object(inspected).get("Config") if inspected.status_code == 200 else None
        labels = config.get("Labels") if isinstance(config, dict) else None
        key = labels.get(LABEL_TENANT_NETWORK) if isinstance(labels, dict) else None
        return key if isinstance(key, str) and key else None

    async def runtimes(self) -> tuple[str, ...]:
        """The runtimes the daemon lists in `GET /info`; BackendError when it could not be read."""
        subject = f"daemon at {self.socket_path}"
        answered = await self._call("GET", "/info", subject, "info", ())
        if answered.status_code != 200:
            raise _refused(answered, subject, "info", ())
        listed = json_object(answered).get("Runtimes")
        if not isinstance(listed, dict):
            raise BackendError(f"docker: {subject}: GET /info listed no Runtimes")
        return tuple(sorted(str(name) for name in listed))

    async def list_machines(self) -> tuple[ListedMachine, ...] | None:
        """Every container, stopped ones too (they still hold their disk), labelled with this pool (the orphan
        sweep's listing), egress proxies aside; named by the name the pool gave it."""
        try:
            prefix = (await self.negotiate()).prefix
            listed = await self._http.get(
                f"{prefix}/containers/json",
                params={"all": "true", "filters": json.dumps({"label": [f"{LABEL_POOL}={self._pool}"]})},
            )
            containers = listed.json() if listed.status_code == 200 else None
        except (httpx.HTTPError, ValueError, BackendError):
            return None
        if not isinstance(containers, list):
            return None
        machines = []
        for container in containers:
            if not isinstance(container, dict) or LABEL_EGRESS_OF in (container.get("Labels") or {}):
                continue  # an egress proxy is the tenant network's, not a machine: it goes with the network
            names = container.get("Names")
            if not isinstance(container.get("Id"), str) or not isinstance(names, list) or not names:
                continue
            machines.append(ListedMachine(provider_id=container["Id"], name=str(names[0]).removeprefix("/")))
        return tuple(machines)

    async def _remove(self, container_id: str) -> None:
        subject = f"container {container_id}"
        removed = await self._call(
            "DELETE", f"/containers/{container_id}", subject, "remove", (), params={"force": "true"}
        )
        if removed.status_code == 409 and _removal_in_progress(removed):
            # another remover got there first (a second process's stop, the orphan sweep): this stop still
            # returns only once the container is gone, as one of its own does
            waited = await self._call(
                "POST", f"/containers/{container_id}/wait", subject, "wait for removal", (),
                params={"condition": "removed"}, timeout=httpx.Timeout(self._timeout, read=REMOVAL_WAIT_SECONDS),
            )  # fmt: skip
            if waited.status_code not in (200, 404):
                raise _refused(waited, subject, "wait for removal", ())
            return
        if removed.status_code not in (204, 404):
            raise _refused(removed, subject, "remove", ())

    async def health(self, handle: MachineHandle) -> bool:
        try:
            prefix = (await self.negotiate()).prefix
            inspected = await self._http.get(f"{prefix}/containers/{handle.provider_id}/json")
        except (httpx.HTTPError, BackendError):
            return False
        state = json_object(inspected).get("State") if inspected.status_code == 200 else None
        if not isinstance(state, dict) or state.get("Running") is not True:
            return False
        return await self._worker.health(handle.endpoint)

    async def ended(self, handle: MachineHandle, spec: MachineSpec) -> str | None:
        """Why the container is gone (exited or dead: its exit code and last lines of output), else None (running,
        still being created, or the daemon could not be read)."""
        try:
            inspected = await self._http.get(f"/containers/{handle.provider_id}/json")
        except httpx.HTTPError:
            return None
        state = json_object(inspected).get("State") if inspected.status_code == 200 else None
        if not isinstance(state, dict) or state.get("Status") not in ("exited", "dead"):
            return None
        code = state.get("ExitCode")
        try:
            logs = await self._http.get(
                f"/containers/{handle.provider_id}/logs",
                params={"stdout": "1", "stderr": "1", "tail": str(LOG_TAIL_LINES)},
            )
            output = demultiplexed(logs.content) if logs.status_code == 200 else b""
        except httpx.HTTPError:
            output = b""
        tail = output_tail(output, secrets=machine_secrets(spec.worker_token, spec.machine_type.env))
        return ended_reason(code if isinstance(code, int) and not isinstance(code, bool) else None, tail)

    async def _call(
        self, method: str, path: str, subject: str, what: str, secrets: tuple[str, ...], **kwargs: Any
    ) -> httpx.Response:
        try:
            version = await self.negotiate()
        except BackendError as error:  # said for the machine whose call it stopped
            raise BackendError(f"docker: {subject}: {what}: {str(error).removeprefix('docker: ')}") from None
        try:
            response = await self._http.request(method, f"{version.prefix}{path}", **kwargs)
        except httpx.HTTPError as error:
            # the exception's text could quote the request; only its class leaves this function
            raise provider_error(
                "docker",
                subject,
                what,
                f"daemon at {self.socket_path} did not answer ({type(error).__name__})",
                secrets=secrets,
            ) from None
        _log.debug("docker %s %s -> %d", method, path, response.status_code)
        return response


def demultiplexed(body: bytes) -> bytes:
    """The payloads of the Engine's multiplexed log stream, in order (each frame an 8-byte header: stream 0-2, three
    zero bytes, the payload's size big-endian); a body not framed that way (a TTY container's raw stream) as it
    is."""
    payloads = bytearray()
    at = 0
    while at < len(body):
        header = body[at : at + 8]
        if len(header) < 8 or header[0] > 2 or header[1:4] != b"\0\0\0":
            return body
        size = int.from_bytes(header[4:8], "big")
        payloads += body[at + 8 : at + 8 + size]
        at += 8 + size
    return bytes(payloads)


def _is_ipv4(text: str) -> bool:
    parts = text.split(".")
    return len(parts) == 4 and all(part.isascii() and part.isdigit() and int(part) < 256 for part in parts)


def _removal_in_progress(response: httpx.Response) -> bool:
    try:
        message = response.json().get("message", "")
    except (ValueError, AttributeError):
        return False
    return isinstance(message, str) and "already in progress" in message


def _refused(response: httpx.Response, subject: str, what: str, secrets: tuple[str, ...]) -> BackendError:
    return refusal("docker", response, subject, what, said_in="message", secrets=secrets)


def _conforms(backend: DockerBackend) -> Backend:
    """DockerBackend satisfies the Backend protocol (checked by mypy here)."""
    return backend


def _lists(backend: DockerBackend) -> ListsMachines:
    return backend


def _reports_end(backend: DockerBackend) -> ReportsEnd:
    return backend


def _lists_runtimes(backend: DockerBackend) -> ListsRuntimes:
    return backend
