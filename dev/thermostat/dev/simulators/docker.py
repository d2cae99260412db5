"""Docker Engine API simulator on a UNIX socket, for the Docker backend's tests and `make run`.

Serves the calls the pool makes (notes/provider-apis.md §4), with or without a `/v1.NN` prefix:
  POST /containers/create?name=   201 {Id, Warnings}; 404 "No such image: …" for an image it does not have,
                                  409 for a name in use, 400 for a body without Image
  POST /containers/{id}/start     204; 304 already running; 500 with the image's start error (the container
                                  stays "created", as the daemon leaves it)
  GET  /containers/json?all=&filters=  the containers (`all` includes stopped ones), each {Id, Names, Image,
                                  Labels, State}; `filters` {"label": ["key=value" | "key"]} keeps matches
  GET  /containers/{id}/json      State {Status, Running, ExitCode, Pid}, Config {Image, Env, Labels},
                                  HostConfig as sent, NetworkSettings.Ports with the chosen host port
  POST /containers/{id}/stop?t=   204; 304 not running
  DELETE /containers/{id}?force=  204; 409 running without force; 409 "removal of container … is already in
                                  progress" while another remover holds it (`begin_removal`)
  POST /containers/{id}/wait?condition=removed  200 {StatusCode} once the container is gone (`finish_removal`)
  GET  /containers/{id}/logs?stdout=&stderr=&tail=  200, what the container printed (stdout and stderr together,
                                  sent as stdout frames), in the Engine's multiplexed stream format (each frame an
                                  8-byte header: stream, 0, 0, 0, the size big-endian), the last `tail` lines
  GET  /networks?filters=         the networks, each {Id, Name, Driver, Internal, Labels, Options}; `filters` by label
  POST /networks/create           201 {Id, Warning}; 409 "network with name … already exists"
  GET  /networks/{id|name}        the network, with `Containers` {id: {Name, IPv4Address}} of its running ones
  DELETE /networks/{id|name}      204; 404; 403 "… has active endpoints" while a running container is on it
  POST /networks/{id|name}/connect  {Container}: 200, the container joins the network too (inspect lists it, with
                                  the same loopback address); 404 for a container or network it does not have
  A container created with `HostConfig.NetworkMode` naming a network runs its machine on a loopback address of its
  own (127.x.y.z, the stand-in for its address on that network) at the port it exposes, which inspect reports in
  `NetworkSettings.Networks[name].IPAddress`; a NetworkMode naming no network is the daemon's 404 "network … not
  found". Without one it is published as before (`PortBindings`, a free loopback port).
  GET  /_ping, GET /version       `ApiVersion` / `MinAPIVersion` as configured
  GET  /info                      `Runtimes` ({name: {path}}) and `DefaultRuntime` "runc": `runtimes=` names
                                  them (default runc and io.containerd.runc.v2, a stock daemon's); a create whose
                                  `HostConfig.Runtime` is not among them is the daemon's 400 "Unknown runtime
                                  specified …"
A `/v1.NN` prefix outside the daemon's range is refused as the daemon does, 400 "client version 1.41 is too old.
Minimum supported API version is 1.44, …" (or "… is too new. Maximum supported API version is …"). The range
defaults to Engine 29.0's (`ENGINE_29_0`: 1.44–1.52, the one that raised its minimum); `api=ApiRange(…)` plays an
older or a newer daemon.
Every request is recorded (`requests()`), bodies decoded, so a test pins shapes field by field.
`thermostat-egress:latest` (the egress proxy's image) is an idle process: the simulator enforces no egress.

An image is a name mapped to the command that plays the container: by default `strata-worker:latest` runs
the reference worker (`python -m thermostat.worker`) as a real child process on a free loopback port; that
port is what the simulator reports as the daemon-chosen host port of every published port. `images={...,
"broken:latest": ImageSpec(start_error="…")}` makes a start fail with the daemon's message. A machine killed
(`kill_machine`) reads "exited" with 137; one whose command exits by itself reads "exited" with its exit code.

Standalone: `python -m thermostat.dev.simulators.docker --socket /tmp/docker-sim.sock` (then
`STRATA_POOL_DOCKER_SOCKET=/tmp/docker-sim.sock`); `--image NAME=COMMAND` adds an image.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import shlex
import socketserver
import sys
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Self
from urllib.parse import unquote

from thermostat.dev.simulators.machines import REFERENCE_WORKER, SimMachine, free_address
from thermostat.dev.simulators.serving import (
    Answer,
    RecordedRequest,
    RecordingHandler,
    ServedSimulator,
    json_answer,
    wait_for_signal,
)
from thermostat.policy.pool.docker_api import ApiRange, ApiVersion
from thermostat.policy.pool.egress import DEFAULT_EGRESS_IMAGE

DEFAULT_IMAGE = "strata-worker:latest"
WAIT_LIMIT_SECONDS = 60.0  # a waiter the test never releases answers then, as if removed, rather than hanging
DEFAULT_SOCKET = "/tmp/thermostat-docker-sim.sock"  # noqa: S108 - a development default, overridable
# Engine 29.0 (moby#51186 raised the minimum to 1.44; 29.3 lowered it back to 1.40, moby#52067)
ENGINE_29_0 = ApiRange(lowest=ApiVersion(major=1, minor=44), highest=ApiVersion(major=1, minor=52))
STOCK_RUNTIMES = ("io.containerd.runc.v2", "runc")  # what a daemon without extra runtimes lists in GET /info
IDLE: tuple[str, ...] = (sys.executable, "-c", "import signal; signal.pause()")


@dataclass(frozen=True, slots=True, kw_only=True)
class ImageSpec:
    """ImageSpec is what a simulated image does when started: run `command`, or fail with `start_error`."""

    command: tuple[str, ...] = REFERENCE_WORKER
    start_error: str | None = None
    # the start answers only once the command has ended: a container that dies before anyone inspects it (its
    # address gone by the first inspect), as a fast crash on a loaded host is seen
    dies_at_once: bool = False


EGRESS_IMAGES = {DEFAULT_EGRESS_IMAGE: ImageSpec(command=IDLE)}


@dataclass(slots=True, kw_only=True)
class SimContainer:
    id: str
    name: str
    image: str
    env: list[str]
    labels: dict[str, str]
    exposed_ports: dict[str, object]
    host_config: dict[str, Any]
    status: str = "created"
    exit_code: int = 0
    machine: SimMachine | None = None
    stop_timeouts: list[str] = field(default_factory=list)
    removing: bool = False
    user: str | None = None
    address: str | None = None  # its address on its network (NetworkMode), once started
    joined: list[str] = field(default_factory=list)  # networks it was connected to after create

    def on(self, network: str) -> bool:
        return network == self.network or network in self.joined

    @property
    def network(self) -> str | None:
        mode = self.host_config.get("NetworkMode")
        return mode if isinstance(mode, str) and mode not in ("", "default", "bridge", "host", "none") else None

    def refresh(self) -> None:
        if self.status == "running" and self.machine is not None and not self.machine.alive:
            self.status, self.exit_code = "exited", self.machine.exit_code or 137


def _error(status: int, message: str) -> Answer:
    return json_answer(status, {"message": message})


class _Server(socketserver.ThreadingUnixStreamServer):
    daemon_threads = True
    block_on_close = False

    def __init__(self, path: str, simulator: DockerSimulator) -> None:
        self.simulator = simulator
        super().__init__(path, _Handler)


class _Handler(RecordingHandler):
    server: _Server
    label = "docker simulator"

    def address_string(self) -> str:  # a UNIX socket peer has no address
        return "unix"

    def do_HEAD(self) -> None:
        self._serve()

    def answer(self, request: RecordedRequest) -> Answer:
        return self.server.simulator._handle(request)

    def failure(self) -> Answer:
        return _error(500, "simulator error")


class DockerSimulator(ServedSimulator[_Server]):
    """DockerSimulator serves the Engine API on `socket_path` from a background thread."""

    def __init__(
        self,
        socket_path: str,
        *,
        images: Mapping[str, ImageSpec] | None = None,
        api: ApiRange = ENGINE_29_0,
        runtimes: Sequence[str] = STOCK_RUNTIMES,
    ) -> None:
        super().__init__()
        self.socket_path = socket_path
        self.api = api
        self._configured_runtimes = self.runtimes = tuple(runtimes)
        self._images = dict(images) if images is not None else {DEFAULT_IMAGE: ImageSpec(), **EGRESS_IMAGES}
        self._lock = threading.RLock()
        self._containers: dict[str, SimContainer] = {}
        self._networks: dict[str, dict[str, Any]] = {}
        self._removed = threading.Condition(self._lock)

    def start(self) -> Self:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.socket_path)
        return self._serve(_Server(self.socket_path, self), "docker-sim")

    def stop(self) -> None:
        """Stop serving and kill every machine still running (nothing outlives the simulator)."""
        self._stop_serving()
        self.reset()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.socket_path)

    # --- control ---------------------------------------------------------------------------------------------

    def reset(self) -> None:
        """Kill every machine, forget every container and the request log; the runtimes are the configured ones."""
        self.runtimes = self._configured_runtimes
        with self._lock:
            for container in self._containers.values():
                if container.machine is not None:
                    container.machine.kill()
            self._containers.clear()
            self._networks.clear()
        self._request_log.clear()

    def add_image(self, name: str, spec: ImageSpec | None = None) -> None:
        with self._lock:
            self._images[name] = spec or ImageSpec()

    def containers(self) -> list[SimContainer]:
        with self._lock:
            for container in self._containers.values():
                container.refresh()
            return list(self._containers.values())

    def running(self) -> list[SimContainer]:
        """Containers whose machine is running: what would be billing."""
        return [container for container in self.containers() if container.status == "running"]

    def container(self, container_id: str) -> SimContainer:
        with self._lock:
            return self._containers[container_id]

    def add_network(self, name: str, labels: Mapping[str, str] | None = None) -> None:
        """A network made behind the pool's back (another process's, by name), internal."""
        with self._lock:
            network_id = secrets.token_hex(32)
            self._networks[network_id] = {
                "Id": network_id, "Name": name, "Driver": "bridge", "Internal": True, "Labels": dict(labels or {}),
                "Options": {},
            }  # fmt: skip

    def networks(self) -> list[dict[str, Any]]:
        """The networks as `GET /networks` lists them."""
        with self._lock:
            return [dict(network) for network in self._networks.values()]

    def begin_removal(self, container_id: str) -> None:
        """Another remover (a second pool process, the daemon's own auto-remove) has begun removing the container:
        its process is killed, and a DELETE now answers 409 "already in progress" until `finish_removal`."""
        with self._lock:
            container = self._containers[container_id]
            container.removing = True
            if container.machine is not None:
                container.machine.kill()

    def finish_removal(self, container_id: str) -> None:
        """The removal `begin_removal` began completes: the container is gone, and its waiters answer."""
        with self._lock:
            del self._containers[container_id]
            self._removed.notify_all()

    def kill_machine(self, container_id: str) -> None:
        """The container's process dies (kill -9): it reads exited from now on."""
        machine = self.container(container_id).machine
        if machine is not None:
            machine.kill()

    # --- the Engine API --------------------------------------------------------------------------------------

    def _handle(self, request: RecordedRequest) -> Answer:
        self._request_log.record(request)
        segments = [unquote(part) for part in request.path.split("/")[1:]]
        if segments and segments[0].startswith("v") and segments[0][1:2].isdigit():
            refused = self._refused_version(segments[0].removeprefix("v"))
            if refused is not None:
                return refused
            segments = segments[1:]
        params = request.params
        method = request.method
        api = self.api
        if segments == ["_ping"]:
            return 200, {"Content-Type": "text/plain; charset=utf-8", "Api-Version": str(api.highest)}, b"OK"
        if segments == ["version"]:
            return json_answer(
                200, {"ApiVersion": str(api.highest), "MinAPIVersion": str(api.lowest), "Version": "simulated"}
            )
        if segments == ["info"] and method == "GET":
            listed = {name: {"path": name} for name in self.runtimes}
            return json_answer(200, {"Runtimes": listed, "DefaultRuntime": "runc", "ServerVersion": "simulated"})
        if segments and segments[0] == "networks":
            with self._lock:
                return self._network_call(method, segments[1:], request)
        if segments == ["containers", "create"] and method == "POST":
            return self._create(request.json_body, (params.get("name") or [""])[0])
        if segments == ["containers", "json"] and method == "GET":
            return self._list(params)
        if len(segments) >= 2 and segments[0] == "containers":
            container_id, verb = segments[1], segments[2] if len(segments) > 2 else ""
            with self._lock:
                container = self._find(container_id)
                if container is None:
                    return _error(404, f"No such container: {container_id}")
                container.refresh()
                if verb == "json" and method == "GET":
                    return json_answer(200, self._inspect(container))
                if verb == "start" and method == "POST":
                    return self._start(container)
                if verb == "stop" and method == "POST":
                    return self._stop(container, (params.get("t") or ["10"])[0])
                if verb == "" and method == "DELETE":
                    return self._delete(container, (params.get("force") or ["false"])[0] in ("1", "true"))
                if verb == "logs" and method == "GET":
                    return self._logs(container, (params.get("tail") or ["all"])[0])
                if verb == "wait" and method == "POST" and (params.get("condition") or [""])[0] == "removed":
                    # the lock is the condition's: waiting releases it for the remover
                    self._removed.wait_for(lambda: container.id not in self._containers, timeout=WAIT_LIMIT_SECONDS)
                    return json_answer(200, {"StatusCode": container.exit_code})
        return _error(404, f"page not found: {method} {request.path}")

    def _refused_version(self, text: str) -> Answer | None:
        """The daemon's 400 for a path version outside its range (moby's versionMiddleware), else None."""
        version = ApiVersion.parse(text)
        if version is None:
            return _error(400, f"invalid API version: {text}")
        if version < self.api.lowest:
            return _error(
                400,
                f"client version {version} is too old. Minimum supported API version is {self.api.lowest}, "
                "please upgrade your client to a newer version",
            )
        if version > self.api.highest:
            return _error(
                400, f"client version {version} is too new. Maximum supported API version is {self.api.highest}"
            )
        return None

    def _network_call(self, method: str, rest: list[str], request: RecordedRequest) -> Answer:
        if rest == [] and method == "GET":
            try:
                filters = json.loads((request.params.get("filters") or ["{}"])[0])
            except ValueError:
                return _error(400, "invalid filter")
            wanted = filters.get("label", []) if isinstance(filters, dict) else []
            return json_answer(200, [
                dict(network) for network in self._networks.values()
                if all(_label_matches(network["Labels"], rule) for rule in wanted)
            ])  # fmt: skip
        if rest == ["create"] and method == "POST":
            body = request.json_body if isinstance(request.json_body, dict) else {}
            name = body.get("Name")
            if not isinstance(name, str) or not name:
                return _error(400, "network name is required")
            if self._find_network(name) is not None:
                return _error(409, f"network with name {name} already exists")
            network_id = secrets.token_hex(32)
            self._networks[network_id] = {
                "Id": network_id, "Name": name, "Driver": body.get("Driver") or "bridge",
                "Internal": body.get("Internal") is True, "Labels": dict(body.get("Labels") or {}),
                "Options": dict(body.get("Options") or {}),
            }  # fmt: skip
            return json_answer(201, {"Id": network_id, "Warning": ""})
        network = self._find_network(rest[0]) if len(rest) in (1, 2) else None
        if network is None:
            return _error(404, f"network {rest[0] if rest else ''} not found")
        attached = [c for c in self._containers.values() if c.on(network["Name"]) and c.status == "running"]
        if len(rest) == 2 and rest[1] == "connect" and method == "POST":
            body = request.json_body if isinstance(request.json_body, dict) else {}
            container = self._find(str(body.get("Container") or ""))
            if container is None:
                return _error(404, f"No such container: {body.get('Container')}")
            if not container.on(network["Name"]):
                container.joined.append(network["Name"])
            return 200, {}, b""
        if len(rest) == 2:
            return _error(404, f"page not found: {method} {request.path}")
        if method == "GET":
            members = {c.id: {"Name": c.name, "IPv4Address": f"{c.address}/32"} for c in attached}
            return json_answer(200, {**network, "Containers": members})
        if method == "DELETE":
            if attached:
                return _error(403, f"error while removing network: network {network['Name']} id {network['Id']} "
                                   "has active endpoints")  # fmt: skip
            del self._networks[network["Id"]]
            return 204, {}, b""
        return _error(404, f"page not found: {method} {request.path}")

    def _find_network(self, reference: str) -> dict[str, Any] | None:
        if reference in self._networks:
            return self._networks[reference]
        return next((n for n in self._networks.values() if n["Name"] == reference), None)

    def _list(self, params: Mapping[str, list[str]]) -> Answer:
        everything = (params.get("all") or ["false"])[0] in ("1", "true")
        try:
            filters = json.loads((params.get("filters") or ["{}"])[0])
        except ValueError:
            return _error(400, "invalid filter")
        wanted = filters.get("label", []) if isinstance(filters, dict) else []
        listed = []
        with self._lock:
            for container in self._containers.values():
                container.refresh()
                if not everything and container.status != "running":
                    continue
                if not all(_label_matches(container.labels, rule) for rule in wanted):
                    continue
                listed.append({
                    "Id": container.id, "Names": [f"/{container.name}"], "Image": container.image,
                    "Labels": dict(container.labels), "State": container.status,
                })  # fmt: skip
        return json_answer(200, listed)

    def _find(self, reference: str) -> SimContainer | None:
        if reference in self._containers:
            return self._containers[reference]
        return next((c for c in self._containers.values() if c.name == reference), None)

    def _create(self, body: object, name: str) -> Answer:
        if not isinstance(body, dict) or not isinstance(body.get("Image"), str) or not body["Image"]:
            return _error(400, "config cannot be empty in order to create a container")
        image = body["Image"]
        host_config = body.get("HostConfig")
        runtime = host_config.get("Runtime") if isinstance(host_config, dict) else None
        if runtime is not None and runtime not in self.runtimes:
            return _error(400, f"Unknown runtime specified {runtime}")
        mode = host_config.get("NetworkMode") if isinstance(host_config, dict) else None
        with self._lock:
            if image not in self._images:
                return _error(404, f"No such image: {image}")
            if isinstance(mode, str) and mode not in ("", "default", "bridge") and self._find_network(mode) is None:
                return _error(404, f"network {mode} not found")
            if name and self._find(name) is not None:
                return _error(409, f'Conflict. The container name "/{name}" is already in use.')
            container_id = secrets.token_hex(32)
            self._containers[container_id] = SimContainer(
                id=container_id,
                name=name or f"sim_{container_id[:12]}",
                image=image,
                env=[item for item in body.get("Env") or [] if isinstance(item, str)],
                labels=dict(body.get("Labels") or {}),
                exposed_ports=dict(body.get("ExposedPorts") or {}),
                host_config=dict(host_config) if isinstance(host_config, dict) else {},
                user=body.get("User") if isinstance(body.get("User"), str) else None,
            )
        return json_answer(201, {"Id": container_id, "Warnings": []})

    def _start(self, container: SimContainer) -> Answer:
        if container.status == "running":
            return 304, {}, b""
        image = self._images[container.image]
        if image.start_error is not None:
            return _error(500, image.start_error)
        env = dict(item.split("=", 1) for item in container.env if "=" in item)
        if container.network is None:
            container.machine = SimMachine(image.command, env, keep_output=True)
        else:  # reached at its own address on the network, at the port it exposes (the worker port)
            port = next((int(p.split("/")[0]) for p in container.exposed_ports if p.split("/")[0].isdigit()), 8080)
            address = free_address(port)
            if address is None:
                return _error(500, f"simulator: port {port} is taken on every loopback address (a wildcard listener)")
            container.address = address
            container.machine = SimMachine(image.command, env, keep_output=True, address=address, port=port)
        container.status, container.exit_code = "running", 0
        if image.dies_at_once:
            container.machine.wait(timeout=60)
        return 204, {}, b""

    def _logs(self, container: SimContainer, tail: str) -> Answer:
        printed = container.machine.output() if container.machine is not None else b""
        lines = printed.splitlines(keepends=True)
        if tail.isdigit():
            lines = lines[-int(tail) :] if int(tail) else []
        body = b"".join(b"\x01\x00\x00\x00" + len(line).to_bytes(4, "big") + line for line in lines)
        return 200, {"Content-Type": "application/vnd.docker.multiplexed-stream"}, body

    def _stop(self, container: SimContainer, timeout: str) -> Answer:
        container.stop_timeouts.append(timeout)
        if container.status != "running":
            return 304, {}, b""
        if container.machine is not None:
            container.machine.terminate(float(timeout) if timeout.lstrip("-").isdigit() else 10.0)
        container.status, container.exit_code = "exited", 143
        return 204, {}, b""

    def _delete(self, container: SimContainer, force: bool) -> Answer:
        if container.removing:
            return _error(409, f"removal of container {container.id} is already in progress")
        if container.status == "running" and not force:
            return _error(
                409,
                f"cannot remove container {container.name}: container is running: stop the "
                "container before removing or force remove",
            )
        if container.machine is not None:
            container.machine.kill()
        del self._containers[container.id]
        self._removed.notify_all()
        return 204, {}, b""

    def _inspect(self, container: SimContainer) -> dict[str, object]:
        running = container.status == "running" and container.machine is not None
        bindings = container.host_config.get("PortBindings") or {}
        ports: dict[str, object] = {}
        if running and container.machine is not None:
            for port, wanted in bindings.items():
                host_ip = wanted[0].get("HostIp", "") if isinstance(wanted, list) and wanted else ""
                ports[port] = [{"HostIp": host_ip or "0.0.0.0", "HostPort": str(container.machine.port)}]
        return {
            "Id": container.id,
            "Name": f"/{container.name}",
            "State": {
                "Status": container.status,
                "Running": running,
                "ExitCode": container.exit_code,
                "Pid": container.machine.pid if running and container.machine is not None else 0,
            },
            "Config": {
                "Image": container.image,
                "User": container.user or "",
                "Env": list(container.env),
                "Labels": dict(container.labels),
                "ExposedPorts": dict(container.exposed_ports),
            },
            "HostConfig": dict(container.host_config),
            "NetworkSettings": {"Ports": ports, "Networks": self._attachments(container, running)},
        }

    def _attachments(self, container: SimContainer, running: bool) -> dict[str, object]:
        network = container.network
        if network is None:
            return {}
        address = container.address if running and container.address is not None else ""
        attached: dict[str, object] = {}
        for name in (network, *container.joined):
            found = self._find_network(name)
            attached[name] = {"NetworkID": found["Id"] if found else "", "IPAddress": address, "IPPrefixLen": 32}
        return attached


def _arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m thermostat.dev.simulators.docker", description=(__doc__ or "").split("\n")[0]
    )
    parser.add_argument("--socket", default=DEFAULT_SOCKET, help="the UNIX socket to serve on")
    parser.add_argument(
        "--image",
        action="append",
        default=[],
        metavar="NAME=COMMAND",
        help=f"an image and the command that plays it ({DEFAULT_IMAGE} runs the reference worker)",
    )
    parser.add_argument(
        "--runtime", action="append", default=[], metavar="NAME",
        help=f"a runtime GET /info lists (repeatable; default: {', '.join(STOCK_RUNTIMES)})",
    )  # fmt: skip
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = _arguments(argv)
    images = {DEFAULT_IMAGE: ImageSpec()}
    for entry in args.image:
        name, _, command = entry.partition("=")
        images[name] = ImageSpec(command=tuple(shlex.split(command)))
    simulator = DockerSimulator(args.socket, images=images, runtimes=args.runtime or STOCK_RUNTIMES).start()
    wait_for_signal(["docker simulator ready", f"STRATA_POOL_DOCKER_SOCKET={simulator.socket_path}"])
    simulator.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


def _label_matches(labels: Mapping[str, str], rule: object) -> bool:
    key, has_value, value = str(rule).partition("=")
    return key in labels and (not has_value or labels[key] == value)
