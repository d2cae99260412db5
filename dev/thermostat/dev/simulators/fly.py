"""Fly Machines API simulator over a real socket, for the Fly backend's tests and `make run`.

One threaded HTTP server on loopback serves (notes/provider-apis.md §3):
  /v1/apps/{app}/machines           POST create → 200 Machine (started at once unless skip_launch), GET list
  /v1/apps/{app}/machines/{id}      GET → 200 Machine; DELETE [?force=true] → 200 {"ok": true}, 412 while
                                    started without force, 404 once destroyed
  /vm/{id}/...                      the machine's private address: forwarded to its worker while started,
                                    502 otherwise (point POOL_FLY_ENDPOINT_TEMPLATE at `{url}/vm/{id}`)
Bearer auth (401 `{"error": …}`); unknown app 404; an image the simulator does not have is a 422 like Fly's
("failed to get manifest"). `refuse_next_create(status, error)` scripts a refusal (e.g. 422 insufficient
capacity; `after_commit=True` makes the machine first, a gateway error after Fly acted);
`answer_next_create(status, with_id=…)` makes the next create answer an off-spec 2xx (201, 202), or its
machine without the `id` (the machine is made all the same). Every API request
is recorded for shape pins. A machine's worker is a real child process (`machine_command`, the reference
worker by default); when it dies the machine reads `stopped`, as a
`restart: no` machine does.

Standalone: `python -m thermostat.dev.simulators.fly --port 9200 --app thermostat-pool`, then
POOL_FLY_BASE_URL={url}/v1, POOL_FLY_ENDPOINT_TEMPLATE={url}/vm/{id}, FLY_API_TOKEN=sim-fly-token.
"""

from __future__ import annotations

import argparse
import secrets
import threading
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import ThreadingHTTPServer
from typing import Any, Self
from urllib.parse import unquote

from thermostat.dev.simulators.machines import REFERENCE_WORKER, SimMachine, forward
from thermostat.dev.simulators.serving import (
    Answer,
    RecordedRequest,
    RecordingHandler,
    ServedSimulator,
    json_answer,
    wait_for_signal,
)

DEFAULT_TOKEN = "sim-fly-token"  # noqa: S105 - the simulator's fixed development token
DEFAULT_APP = "thermostat-pool"
DEFAULT_IMAGES = ("strata-worker:latest", "registry.fly.io/strata-worker:latest")


def _error(status: int, message: str, kind: str = "unknown") -> Answer:
    return json_answer(status, {"error": message, "status": kind})


@dataclass(slots=True, kw_only=True)
class SimFlyMachine:
    id: str
    name: str
    app: str
    region: str
    config: dict[str, Any]
    state: str
    created_at: str
    instance_id: str = field(default_factory=lambda: secrets.token_hex(13).upper())
    process: SimMachine | None = None

    def refresh(self) -> None:
        if self.state == "started" and self.process is not None and not self.process.alive:
            self.state = "stopped"

    def to_json(self) -> dict[str, object]:
        return {
            "id": self.id,
            "name": self.name,
            "state": self.state,
            "region": self.region,
            "instance_id": self.instance_id,
            "private_ip": f"fdaa:0:1::{int(self.id[:4], 16):x}",
            "config": self.config,
            "image_ref": {"repository": str(self.config.get("image", "")), "tag": "latest"},
            "created_at": self.created_at,
            "updated_at": self.created_at,
        }


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    request_queue_size = 256

    def __init__(self, address: tuple[str, int], simulator: FlySimulator) -> None:
        self.simulator = simulator
        super().__init__(address, _Handler)


class _Handler(RecordingHandler):
    server: _Server
    label = "fly simulator"
    wbufsize = 64 * 1024
    disable_nagle_algorithm = True

    def answer(self, request: RecordedRequest) -> Answer:
        return self.server.simulator._handle(request)

    def failure(self) -> Answer:
        return _error(500, "simulator error")


class FlySimulator(ServedSimulator[_Server]):
    """FlySimulator serves the Machines API and the machines' private addresses from a background thread."""

    def __init__(
        self,
        *,
        token: str = DEFAULT_TOKEN,
        apps: Iterable[str] = (DEFAULT_APP,),
        images: Iterable[str] = DEFAULT_IMAGES,
        machine_command: Sequence[str] = REFERENCE_WORKER,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        super().__init__()
        self._token = token
        self._apps = set(apps)
        self._images = set(images)
        self._command = tuple(machine_command)
        self._host = host
        self._requested_port = port
        self._lock = threading.RLock()
        self._machines: dict[str, SimFlyMachine] = {}
        self._refusals: deque[tuple[int, str, str, bool]] = deque()
        self._answers: deque[tuple[int, bool]] = deque()

    def start(self) -> Self:
        return self._serve(_Server((self._host, self._requested_port), self), "fly-sim")

    def stop(self) -> None:
        self._stop_serving()
        self.reset()

    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError("the simulator is not running")
        return f"http://{self._host}:{self._server.server_address[1]}"

    @property
    def base_url(self) -> str:
        """POOL_FLY_BASE_URL for a client of this simulator."""
        return f"{self.url}/v1"

    @property
    def endpoint_template(self) -> str:
        """POOL_FLY_ENDPOINT_TEMPLATE: a machine's private address, simulated."""
        return f"{self.url}/vm/{{id}}"

    # --- control ---------------------------------------------------------------------------------------------

    def reset(self) -> None:
        with self._lock:
            for machine in self._machines.values():
                if machine.process is not None:
                    machine.process.kill()
            self._machines.clear()
            self._refusals.clear()
            self._answers.clear()
        self._request_log.clear()

    def refuse_next_create(self, status: int, error: str, kind: str = "unknown", *, after_commit: bool = False) -> None:
        """The next create answers `status` with Fly's error body, e.g. 422 / insufficient_capacity;
        `after_commit` makes the machine first (a gateway error after Fly acted)."""
        with self._lock:
            self._refusals.append((status, error, kind, after_commit))

    def answer_next_create(self, status: int, *, with_id: bool = True) -> None:
        """The next create that makes a machine answers `status` (an off-spec 201 or 202), and without the
        machine's `id` when `with_id` is False (the machine is made all the same)."""
        with self._lock:
            self._answers.append((status, with_id))

    def machines(self) -> list[SimFlyMachine]:
        with self._lock:
            for machine in self._machines.values():
                machine.refresh()
            return list(self._machines.values())

    def live(self) -> list[SimFlyMachine]:
        """Machines not destroyed: what would be billing (a stopped machine still holds its rootfs)."""
        return [machine for machine in self.machines() if machine.state != "destroyed"]

    def kill_machine(self, machine_id: str) -> None:
        with self._lock:
            process = self._machines[machine_id].process
        if process is not None:
            process.kill()

    # --- the API ---------------------------------------------------------------------------------------------

    def _handle(self, request: RecordedRequest) -> Answer:
        segments = [unquote(part) for part in request.path.split("/")[1:]]
        if segments and segments[0] == "vm":
            return self._private_network(request, segments)
        self._request_log.record(request)
        if request.headers.get("authorization") != f"Bearer {self._token}":
            return _error(401, "You must be authenticated to view this.")
        if len(segments) < 4 or segments[:2] != ["v1", "apps"] or segments[3] != "machines":
            return _error(404, "Not Found")
        app = segments[2]
        if app not in self._apps:
            return _error(404, f'Could not find App "{app}"')
        with self._lock:
            if len(segments) == 4 and request.method == "POST":
                return self._create(app, request.json_body)
            if len(segments) == 4 and request.method == "GET":
                listed = [m.to_json() for m in self.machines() if m.app == app and m.state != "destroyed"]
                return json_answer(200, listed)
            machine = self._machines.get(segments[4]) if len(segments) == 5 else None
            if machine is None or machine.app != app or machine.state == "destroyed":
                return _error(404, "machine not found")
            machine.refresh()
            if request.method == "GET":
                return json_answer(200, machine.to_json())
            if request.method == "DELETE":
                return self._destroy(machine, "force=true" in request.query.split("&"))
        return _error(404, "Not Found")

    def _create(self, app: str, body: object) -> Answer:
        if self._refusals:
            status, error, kind, after_commit = self._refusals.popleft()
            if after_commit:
                self._create(app, body)
            return _error(status, error, kind)
        config = body.get("config") if isinstance(body, dict) else None
        if not isinstance(config, dict) or not isinstance(config.get("image"), str):
            return _error(400, "config.image is required")
        image = config["image"]
        if image not in self._images:
            return _error(422, f"failed to get manifest {image}: not found")
        env = config.get("env") or {}
        if not isinstance(env, dict):
            return _error(400, "json: cannot unmarshal config.env")
        assert isinstance(body, dict)
        machine_id = secrets.token_hex(7)
        region = body.get("region") if isinstance(body.get("region"), str) else "ord"
        machine = SimFlyMachine(
            id=machine_id,
            name=str(body.get("name") or f"sim-{machine_id}"),
            app=app,
            region=str(region),
            config=dict(config),
            state="created",
            created_at=datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
        )
        if not body.get("skip_launch"):
            machine.process = SimMachine(self._command, {str(k): str(v) for k, v in env.items()})
            machine.state = "started"
        self._machines[machine_id] = machine
        status, with_id = self._answers.popleft() if self._answers else (200, True)
        answered = machine.to_json()
        if not with_id:
            del answered["id"]
        return json_answer(status, answered)

    def _destroy(self, machine: SimFlyMachine, force: bool) -> Answer:
        if machine.state == "started" and not force:
            return _error(412, "unable to destroy machine, not currently stopped, suspended or failed")
        if machine.process is not None:
            machine.process.kill()
        machine.state = "destroyed"
        return json_answer(200, {"ok": True})

    def _private_network(self, request: RecordedRequest, segments: list[str]) -> Answer:
        with self._lock:
            machine = self._machines.get(segments[1]) if len(segments) > 1 else None
            if machine is not None:
                machine.refresh()
            port = machine.process.port if machine and machine.state == "started" and machine.process else None
        if port is None:
            return 502, {"Content-Type": "text/plain; charset=utf-8"}, b"no machine at this address\n"
        rest = "/" + "/".join(request.path.split("/")[3:])
        target = rest + (f"?{request.query}" if request.query else "")
        return forward(port, request.method, target, request.headers, request.raw_body or b"",
                       timeout=300.0, timeout_status=504)  # fmt: skip


def _arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m thermostat.dev.simulators.fly", description=(__doc__ or "").split("\n")[0]
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9200, help="0 picks a free port (printed)")
    parser.add_argument("--token", default=DEFAULT_TOKEN, help="the bearer the API expects")
    parser.add_argument("--app", action="append", default=[], help=f"an app that exists (default {DEFAULT_APP})")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = _arguments(argv)
    simulator = FlySimulator(token=args.token, apps=args.app or [DEFAULT_APP], host=args.host, port=args.port).start()
    wait_for_signal(
        [
            "fly simulator ready",
            f"POOL_FLY_BASE_URL={simulator.base_url}",
            f"POOL_FLY_ENDPOINT_TEMPLATE={simulator.endpoint_template}",
        ]
    )
    simulator.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
