"""RunPod REST v2 + pod-proxy simulator over a real socket, for the tests and `make run`.

One threaded HTTP server on loopback serves three surfaces:
  /v2/...                       the REST v2 paths and shapes (bearer auth, problem+json errors)
  /proxy/{podId}-{port}/metrics each pod's public proxy in front of vLLM (Cloudflare's UA rule, 404 while
                                not RUNNING, 502 while the model loads or vLLM is dead)
  /proxy/{podId}-{port}/v1/...  the same proxy in front of vLLM's OpenAI routes: a canned answer from the
                                simulated engine (openai_routes.py, streamed when asked), or with `engine`
                                (`--engine vllm`) every path relayed to a real vLLM the pod runs (engine.py)
  /proxy/{podId}-{port}/...     for a pool pod (created with an `image` by a simulator given
                                `machine_command`): a real worker process, forwarded to while RUNNING,
                                502 once it died, 524 past `proxy_timeout_seconds` (Cloudflare's 100 s)
  /_sim/...                     JSON control: volumes, catalogue, faults, pods, vLLM driving, request log

Clients point RUNPOD_V2_BASE_URL at `{url}/v2` and the proxy template at `{url}/proxy/{podId}-{port}`.
Standalone: `python -m thermostat.dev.simulators.runpod --port 9100`.
"""

from __future__ import annotations

import argparse
import copy
import json
import logging
import os
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any, Self
from urllib.parse import unquote

from thermostat.dev.engine.recipe import Installation, installation
from thermostat.dev.simulators.faults import Fault, FaultMix, Hold, ServedFault, fault_from_json
from thermostat.dev.simulators.machines import REFERENCE_WORKER, forward
from thermostat.dev.simulators.runpod import openai_routes
from thermostat.dev.simulators.runpod.catalog import (
    DEFAULT_TEMPLATE_ID,
    DEFAULT_VOLUME_ID,
    SimGpu,
    default_catalogue,
    default_volumes,
    gpu_from_control,
)
from thermostat.dev.simulators.runpod.create_request import ApiError
from thermostat.dev.simulators.runpod.engine import Engines
from thermostat.dev.simulators.runpod.fast_proxy import FastProxy
from thermostat.dev.simulators.runpod.streaming import Streamed, send_streamed
from thermostat.dev.simulators.runpod.world import BilledStretch, PodWorld, SimSettings
from thermostat.dev.simulators.serving import (
    Answer,
    RecordedRequest,
    RecordingHandler,
    ServedSimulator,
    json_answer,
    wait_for_signal,
)

DEFAULT_API_KEY = "sim-runpod-key"

_log = logging.getLogger(__name__)


def _problem(error: ApiError) -> Answer:
    return json_answer(error.status, error.problem(), content_type="application/problem+json")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    # A hanging fault must not block shutdown: handler threads are not joined on close.
    block_on_close = False
    # The monitor scrapes every pod of a volume at once; socketserver's default backlog of 5 drops a burst.
    request_queue_size = 1024

    def __init__(self, address: tuple[str, int], simulator: RunPodSimulator) -> None:
        self.simulator = simulator
        super().__init__(address, _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that timed out and hung up mid-answer is expected under fault injection.
        _log.debug("runpod simulator: connection from %s ended abruptly", client_address)


class _Handler(RecordingHandler):
    server: _Server
    label = "runpod simulator"
    # Headers and body leave in one segment: written separately, Nagle plus delayed ACK add ~40 ms a request.
    wbufsize = 64 * 1024
    disable_nagle_algorithm = True

    def do_PUT(self) -> None:
        self._serve()

    def do_PATCH(self) -> None:
        self._serve()

    def answer(self, request: RecordedRequest) -> Answer:
        return self.server.simulator._route(request)

    def failure(self) -> Answer:
        return _problem(ApiError(500, "Internal Server Error", "simulator error"))

    def _serve(self) -> None:
        simulator = self.server.simulator
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            # Bodies are read by Content-Length only; an unread chunked body would corrupt the next request.
            self.close_connection = True
        request = self.read_request()
        simulator._request_log.record(request)
        fault = None if request.path.startswith("/_sim") else simulator._take_fault(self.command, request.path)
        if fault is not None:
            simulator._note_fault(request, fault)
            if fault.hold is not None and not fault.hold.after_commit:
                fault.hold.park(simulator._stopping)
            if fault.delay_seconds > 0 and simulator._stopping.wait(fault.delay_seconds):
                return
            if fault.hang:
                simulator._stopping.wait(simulator.world.settings.hang_seconds)
                self.close_connection = True
                return
            if fault.status is not None and not fault.commit_then_fail:
                self.send_answer(fault.response())
                return
        streamed = self._engine_answer(request)
        if isinstance(streamed, Streamed):
            send_streamed(self, streamed)
            return
        answer = self.answer_or_failure(request) if streamed is None else streamed
        if request.method != "GET":  # a write may have changed the world: the state file follows it
            simulator.save_state()
        if fault is not None and fault.hold is not None and fault.hold.after_commit:
            fault.hold.park(simulator._stopping)
        if fault is not None and fault.commit_then_fail:
            # The gateway-5xx-after-commit incident: the pod now exists and bills, the caller sees a 502.
            answer = fault.response()
        self.send_answer(answer)

    def _engine_answer(self, request: RecordedRequest) -> Answer | Streamed | None:
        """A pod's engine answering through the proxy (None: any other route)."""
        try:
            return self.server.simulator._engine_answer(request)
        except Exception:
            self._log.exception("%s: %s %s failed", self.label, self.command, request.path)
            return self.failure()


class RunPodSimulator(ServedSimulator[_Server]):
    """RunPodSimulator runs the server in a background thread and exposes the control API in-process.

    Every control method has an HTTP twin under /_sim (see `_control`), so a test in another process or the
    demo can drive the same world.
    """

    def __init__(
        self,
        *,
        api_key: str | None = DEFAULT_API_KEY,
        host: str = "127.0.0.1",
        port: int = 0,
        settings: SimSettings | None = None,
        catalogue: Iterable[SimGpu] | None = None,
        volumes: Mapping[str, str] | None = None,
        request_log_size: int = 10_000,
        clock: Callable[[], float] = time.time,
        machine_command: Sequence[str] | None = None,
        fast_proxy: bool = False,
        engine: Installation | None = None,
        engine_log_dir: Path | None = None,
        state_file: Path | None = None,
    ) -> None:
        """`clock` drives every lifecycle and model-load delay; tests pass a manual one instead of sleeping.

        `machine_command` (e.g. REFERENCE_WORKER) makes every pod created with an `image` run that command as
        its container, on a loopback port the pod proxy forwards to: the pool's RunPod backend end to end.
        `fast_proxy` serves the pods' /metrics from an event-loop listener of its own (fast_proxy.py), which
        `proxy_url_template` then names: thousands of pods scraped at once without a thread each.
        `engine` (an installed thermostat.dev.engine) runs a real vLLM for each RUNNING pod, its output logged under
        `engine_log_dir` (default: a temporary directory), and the proxy relays to it (engine.py).
        `state_file` keeps the pods across restarts (issue 35: restarting `make run` while a pod ran, the simulator
        forgot it and its billing on record never closed): read at start when it exists, written after every
        request that may change the world and at stop; none by default.
        """
        if engine is not None and fast_proxy:
            raise ValueError("fast_proxy serves the simulated /metrics only: it does not go with a real engine")
        if engine is not None and not engine.ready:
            raise ValueError(f"the engine is not installed in {engine.venv}: make engine")
        super().__init__(request_log_size=request_log_size)
        self._api_key = api_key
        self._host = host
        self._requested_port = port
        self._initial_settings = copy.deepcopy(settings or SimSettings())
        self._initial_catalogue = tuple(catalogue) if catalogue is not None else default_catalogue()
        self._initial_volumes = dict(volumes) if volumes is not None else default_volumes()
        self.world = PodWorld(
            settings=copy.deepcopy(self._initial_settings),
            catalogue=self._initial_catalogue,
            volumes=self._initial_volumes,
            clock=clock,
            machine_command=machine_command,
        )
        self._lock = threading.Lock()
        self._faults: list[Fault] = []
        self._mix: FaultMix | None = None
        self._served_faults: deque[ServedFault] = deque(maxlen=request_log_size)
        self._stopping = threading.Event()
        self._fast_proxy = FastProxy(self, host) if fast_proxy else None
        self.engines = Engines(self.world, engine, log_dir=engine_log_dir) if engine is not None else None
        self.world.engines = self.engines
        self._state_file = state_file
        self._state_lock = threading.Lock()

    # --- server --------------------------------------------------------------------------------------------

    def start(self) -> Self:
        if self._server is not None:
            raise RuntimeError("the simulator is already running")
        self._stopping.clear()
        if self._state_file is not None and self._state_file.exists():
            self.world.import_state(json.loads(self._state_file.read_text()))
        if self._fast_proxy is not None:
            self._fast_proxy.start()
        if self.engines is not None:
            self.engines.start()
        return self._serve(_Server((self._host, self._requested_port), self), "runpod-sim")

    def stop(self) -> None:
        if self._server is None:
            return
        self._stopping.set()
        self.save_state()
        self.world.kill_machines()
        if self.engines is not None:
            self.engines.close()
        if self._fast_proxy is not None:
            self._fast_proxy.stop()
        self._stop_serving()

    def save_state(self) -> None:
        """Write the world to the state file, if there is one (atomically: a restart reads a whole one)."""
        if self._state_file is None:
            return
        with self._state_lock:
            written = self._state_file.with_name(self._state_file.name + ".tmp")
            try:
                self._state_file.parent.mkdir(parents=True, exist_ok=True)
                written.write_text(json.dumps(self.world.export_state()))
                written.replace(self._state_file)
            except OSError as error:  # the world goes on; the next write tries again
                _log.warning("runpod simulator: state file %s not written: %s", self._state_file, error)

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("the simulator is not running")
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://{self._host}:{self.port}"

    @property
    def base_url(self) -> str:
        """base_url is RUNPOD_V2_BASE_URL for a client of this simulator."""
        return f"{self.url}/v2"

    @property
    def proxy_url_template(self) -> str:
        if self._fast_proxy is not None:
            return f"http://{self._host}:{self._fast_proxy.port}/proxy/{{podId}}-{{port}}"
        return f"{self.url}/proxy/{{podId}}-{{port}}"

    # --- control: the world --------------------------------------------------------------------------------

    def configure(self, **changes: object) -> None:
        """configure changes settings by their snake_case names, e.g. configure(model_ready_seconds=0.2)."""
        camel = {}
        for name, value in changes.items():
            head, *rest = name.split("_")
            camel[head + "".join(part.title() for part in rest)] = value
        with self.world.lock:
            self.world.settings.update(camel)

    @property
    def settings(self) -> SimSettings:
        with self.world.lock:
            return copy.deepcopy(self.world.settings)

    def add_volume(self, volume_id: str, datacenter_id: str) -> None:
        self.world.add_volume(volume_id, datacenter_id)

    def set_catalogue(self, gpus: Iterable[SimGpu]) -> None:
        self.world.set_catalogue(gpus)

    def set_next_pod_ids(self, pod_ids: Iterable[str]) -> None:
        """set_next_pod_ids fixes the ids the next creates get (else random 14-character ids)."""
        self.world.set_next_pod_ids(pod_ids)

    def add_pod(self, **kwargs: Any) -> str:
        """add_pod seeds a pod (defaults: EXITED, one A100, no volume); see PodWorld.add_pod."""
        return self.world.add_pod(**kwargs)

    def set_pod_status(self, pod_id: str, status: str) -> None:
        self.world.set_pod_status(pod_id, status)

    def patch_pod(self, pod_id: str, fields: Mapping[str, object] | None) -> None:
        """patch_pod overlays fields on the pod's v2 JSON, e.g. {"runtime": {}}; None clears the overlay."""
        self.world.patch_pod(pod_id, fields)

    def set_pod_lifecycle(
        self,
        pod_id: str,
        *,
        provisioning_seconds: float | None = None,
        starting_seconds: float | None = None,
        model_ready_seconds: float | None = None,
    ) -> None:
        """set_pod_lifecycle overrides one pod's delays (negative holds the status); None keeps the global."""
        self.world.set_pod_lifecycle(
            pod_id, provisioning=provisioning_seconds, starting=starting_seconds, model_ready=model_ready_seconds
        )

    def record_turn(self, pod_id: str, prompt_tokens: int, gen_tokens: int, finished_reason: str = "stop") -> None:
        """record_turn is one finished chat turn on the pod's vLLM: success + token counters advance."""
        self.world.record_turn(pod_id, prompt_tokens, gen_tokens, finished_reason)

    def set_in_flight(self, pod_id: str, running: int, waiting: int = 0) -> None:
        self.world.set_in_flight(pod_id, running, waiting)

    def kill_vllm(self, pod_id: str) -> None:
        self.world.set_vllm_alive(pod_id, False)

    def revive_vllm(self, pod_id: str) -> None:
        self.world.set_vllm_alive(pod_id, True)

    def kill_machine(self, pod_id: str) -> None:
        """The pool pod's worker process dies; the pod stays RUNNING and its proxy answers 502."""
        self.world.kill_machine(pod_id)

    def pod_env(self, pod_id: str) -> dict[str, str]:
        """The env a pod was created with (a pool pod's machine runs with it)."""
        return self.world.pod_env(pod_id)

    def pod(self, pod_id: str) -> dict[str, object]:
        """pod is the pod's current v2 JSON (as GET /v2/pods/{id} would answer), KeyError if unknown."""
        v2 = self.world.one_pod_state(pod_id)["v2"]
        assert isinstance(v2, dict)
        return v2

    def billed(self) -> list[BilledStretch]:
        """What ran when: every stretch a pod billed (GET /_sim/billed)."""
        return self.world.billed()

    def pods(self) -> list[dict[str, object]]:
        """pods is the control view of every pod: v2 JSON, vLLM counters, liveness, model readiness."""
        return self.world.pods_state()

    # --- control: faults and the request log ---------------------------------------------------------------

    def inject(
        self,
        method: str,
        path: str,
        *,
        status: int | None = None,
        count: int | None = 1,
        body: str = "problem",
        json_body: object = None,
        retry_after: str | None = None,
        delay_seconds: float = 0.0,
        hang: bool = False,
        commit_then_fail: bool = False,
    ) -> Fault:
        """inject scripts the next `count` requests (None: all) matching method + path glob; see Fault."""
        fault = Fault(
            method=method.upper(),
            path=path,
            remaining=count,
            status=status,
            body=body,
            json_body=json_body,
            retry_after=retry_after,
            delay_seconds=delay_seconds,
            hang=hang,
            commit_then_fail=commit_then_fail,
        )
        self._add_fault(fault)
        return fault

    def hold(self, method: str, path: str, *, after_commit: bool = False, count: int | None = 1) -> Hold:
        """hold parks the next `count` requests matching method + path glob until `release()`; see Hold."""
        held = Hold(after_commit=after_commit)
        self._add_fault(Fault(method=method.upper(), path=path, remaining=count, hold=held))
        return held

    def _add_fault(self, fault: Fault) -> None:
        with self._lock:
            self._faults.append(fault)

    def clear_faults(self) -> None:
        with self._lock:
            self._faults.clear()
            self._mix = None

    def fail_at_random(self, mix: FaultMix | None) -> None:
        """Fail a share of the API requests a scripted fault does not match, each in a random kind (FaultMix);
        None stops it. The mix counts what it injected."""
        with self._lock:
            self._mix = mix

    def _note_fault(self, request: RecordedRequest, fault: Fault) -> None:
        with self._lock:
            self._served_faults.append(ServedFault(request=request, fault=fault))

    def served_faults(self) -> list[ServedFault]:
        """Every request answered by a fault (scripted or drawn), oldest first, with the fault it got."""
        with self._lock:
            return list(self._served_faults)

    def faults(self) -> list[Fault]:
        with self._lock:
            return list(self._faults)

    def _take_fault(self, method: str, path: str) -> Fault | None:
        with self._lock:
            for fault in self._faults:
                if fault.matches(method, path):
                    if fault.remaining is not None:
                        fault.remaining -= 1
                        if fault.remaining == 0:
                            self._faults.remove(fault)
                    return fault
            mix = self._mix
        return None if mix is None else mix.draw(method, path)

    def requests(self, prefix: str | None = None, *, include_control: bool = False) -> list[RecordedRequest]:
        """requests lists received requests oldest first; /_sim control calls only when asked for."""
        return [
            request
            for request in self._request_log.requests()
            if (prefix is None or request.path.startswith(prefix))
            and (include_control or not request.path.startswith("/_sim"))
        ]

    def reset(self) -> None:
        """reset restores the constructor's catalogue, volumes and settings; drops pods, faults and the log."""
        self.world.reset(
            catalogue=self._initial_catalogue,
            volumes=self._initial_volumes,
            settings=copy.deepcopy(self._initial_settings),
        )
        if self.engines is not None:  # after: no pod is left to start another meanwhile
            self.engines.stop_all()
        with self._lock:
            self._faults.clear()
            self._mix = None
            self._served_faults.clear()
        self._request_log.clear()

    def state(self) -> dict[str, object]:
        return {
            "settings": self.settings.to_json(),
            "volumes": self.world.volumes(),
            "catalog": [gpu.to_control() for gpu in self.world.catalogue()],
            "pods": self.pods(),
            "faults": [fault.to_json() for fault in self.faults()],
            "urls": {"base": self.base_url, "proxyTemplate": self.proxy_url_template},
        }

    # --- routing -------------------------------------------------------------------------------------------

    def _route(self, request: RecordedRequest) -> Answer:
        segments = [unquote(segment) for segment in request.path.split("/")[1:]]
        surface, rest = (segments[0], segments[1:]) if segments else ("", [])
        if surface == "v2":
            if self._api_key is not None and request.headers.get("authorization") != f"Bearer {self._api_key}":
                return _problem(ApiError(401, "Unauthorized", "a valid API key is required"))
            try:
                return self._v2(request, rest)
            except ApiError as error:
                return _problem(error)
        if surface == "proxy":
            return self._proxy(request, rest)
        if surface == "_sim":
            return self._control(request, rest)
        return 404, {"Content-Type": "text/plain; charset=utf-8"}, b"404 page not found\n"

    def _v2(self, request: RecordedRequest, path: list[str]) -> Answer:
        method, world = request.method, self.world
        if path == ["catalog", "gpus"] and method == "GET":
            return json_answer(200, world.catalog(request.params))
        if path == ["pods"] and method == "GET":
            return json_answer(200, world.list_pods())
        if path == ["pods"] and method == "POST":
            if request.body and request.json_body is None:
                raise ApiError(400, "Bad Request", "the body is not valid JSON")
            return json_answer(201, world.create_pod(request.json_body))
        if len(path) == 2 and path[0] == "pods" and method == "GET":
            return json_answer(200, world.get_pod(path[1]))
        if len(path) == 2 and path[0] == "pods" and method == "DELETE":
            world.delete_pod(path[1])
            return 204, {}, b""
        if len(path) == 3 and path[0] == "pods" and path[2] == "action" and method == "POST":
            pod = world.action(path[1], request.json_body)
            return (204, {}, b"") if pod is None else json_answer(200, pod)
        raise ApiError(404, "Not Found", f"no route {method} /v2/{'/'.join(path)}")

    def _engine_answer(self, request: RecordedRequest) -> Answer | Streamed | None:
        """`/proxy/{podId}-{port}/...` of a pod's vLLM: relayed to its real engine, or the simulated engine's
        OpenAI routes; None for every other route (the pool's machines, the simulated /metrics, the rest)."""
        if not request.path.startswith("/proxy/"):
            return None
        _, _, address, *rest = [*request.path.split("/", 3), ""]
        pod_id, _, port = unquote(address).rpartition("-")
        if not pod_id or not port.isdigit() or self.world.has_machine(pod_id):
            return None
        route = "/" + (rest[0] if rest else "")
        if self.engines is not None:
            target = route + (f"?{request.query}" if request.query else "")
            return self.engines.relay(request, pod_id=pod_id, port=int(port), target=target)
        if (request.method, route) in openai_routes.ROUTES:
            return openai_routes.answer(
                self.world, request, pod_id=pod_id, port=int(port), route=route, stopping=self._stopping
            )
        return None

    def _proxy(self, request: RecordedRequest, path: list[str]) -> Answer:
        not_found: Answer = 404, {"Content-Type": "text/plain; charset=utf-8"}, b"404 page not found\n"
        if path and "-" in path[0] and self.world.has_machine(path[0].rpartition("-")[0]):
            return self._to_machine(request, path, not_found)
        if len(path) != 2 or path[1] != "metrics" or request.method != "GET" or "-" not in path[0]:
            return not_found
        pod_id, _, port = path[0].rpartition("-")
        if not port.isdigit():
            return not_found
        return self.world.metrics(pod_id, int(port), request.headers.get("user-agent", ""))

    def _to_machine(self, request: RecordedRequest, path: list[str], not_found: Answer) -> Answer:
        pod_id, _, port = path[0].rpartition("-")
        machine_port = self.world.machine_port(pod_id, int(port)) if port.isdigit() else None
        if machine_port is None:
            return not_found
        if machine_port < 0:
            return 502, {"Content-Type": "text/html; charset=utf-8"}, b"<html>502 Bad Gateway</html>\n"
        prefix = request.path.split("/", 3)
        rest = "/" + prefix[3] if len(prefix) > 3 else "/"
        target = rest + (f"?{request.query}" if request.query else "")
        content = request.raw_body if request.raw_body is not None else request.body.encode()
        return forward(
            machine_port,
            request.method,
            target,
            request.headers,
            content,
            timeout=self.world.settings.proxy_timeout_seconds,
            timeout_status=524,
        )

    def _control(self, request: RecordedRequest, path: list[str]) -> Answer:
        body = request.json_body if isinstance(request.json_body, dict) else {}
        try:
            return json_answer(*self._control_call(request.method, path, body, request.params))
        except KeyError as error:
            return json_answer(404, {"error": f"no pod {error.args[0]}"})
        except (ValueError, TypeError) as error:
            return json_answer(400, {"error": str(error)})

    def _control_call(
        self, method: str, path: list[str], body: dict[str, Any], params: dict[str, list[str]]
    ) -> tuple[int, object]:
        """_control_call is the /_sim HTTP API; each route mirrors one Python control method."""
        ok: dict[str, object] = {"ok": True}
        route = (method, *path)
        if method == "POST" and len(path) == 3 and path[0] == "pods":
            return self._pod_control(path[1], path[2], body)
        if route == ("GET", "state"):
            return 200, self.state()
        if route == ("POST", "reset"):
            self.reset()
        elif route == ("GET", "settings"):
            return 200, self.settings.to_json()
        elif route == ("PUT", "settings"):
            with self.world.lock:
                self.world.settings.update(body)
            return 200, self.settings.to_json()
        elif route == ("GET", "catalog"):
            return 200, {"gpus": [gpu.to_control() for gpu in self.world.catalogue()]}
        elif route == ("PUT", "catalog"):
            self._put_catalog(body)
        elif route == ("GET", "volumes"):
            return 200, self.world.volumes()
        elif route == ("POST", "volumes"):
            self.add_volume(str(body["id"]), str(body["dataCenterId"]))
        elif route == ("GET", "faults"):
            return 200, [fault.to_json() for fault in self.faults()]
        elif route == ("POST", "faults"):
            fault = fault_from_json(body)
            self._add_fault(fault)
            return 201, fault.to_json()
        elif route == ("DELETE", "faults"):
            self.clear_faults()
        elif route == ("GET", "requests"):
            return 200, self._requests_json(params)
        elif route == ("DELETE", "requests"):
            self.clear_requests()
        elif route == ("GET", "pods"):
            return 200, self.pods()
        elif route == ("GET", "billed"):
            return 200, [stretch.to_json() for stretch in self.world.billed()]
        elif route == ("POST", "pods") and isinstance(body.get("pods"), list):
            # many at once (a bench seeding 10,000 pods): {"pods": [pod, ...]}; answers how many were added
            return 201, {"added": len([self._add_pod_json(pod) for pod in body["pods"]])}
        elif route == ("POST", "pods"):
            return 201, self.pod(self._add_pod_json(body))
        elif route == ("POST", "next-pod-ids"):
            self.set_next_pod_ids([str(pod_id) for pod_id in body["ids"]])
        else:
            raise ValueError(f"no control route {method} /_sim/{'/'.join(path)}")
        return 200, ok

    def _pod_control(self, pod_id: str, verb: str, body: dict[str, Any]) -> tuple[int, object]:
        if verb == "status":
            self.set_pod_status(pod_id, str(body["status"]))
        elif verb == "patch":
            self.patch_pod(pod_id, body.get("fields"))
        elif verb == "lifecycle":
            self.set_pod_lifecycle(
                pod_id,
                provisioning_seconds=body.get("provisioningSeconds"),
                starting_seconds=body.get("startingSeconds"),
                model_ready_seconds=body.get("modelReadySeconds"),
            )
        elif verb == "turn":
            self.record_turn(
                pod_id,
                int(body.get("promptTokens", 0)),
                int(body.get("generationTokens", 0)),
                str(body.get("finishedReason", "stop")),
            )
        elif verb == "in-flight":
            self.set_in_flight(pod_id, int(body.get("running", 0)), int(body.get("waiting", 0)))
        elif verb == "vllm":
            self.world.set_vllm_alive(pod_id, bool(body.get("alive", True)))
        elif verb == "kill-machine":
            self.kill_machine(pod_id)
        else:
            raise ValueError(f"unknown pod control {verb!r}")
        return 200, self.world.one_pod_state(pod_id)

    def _put_catalog(self, body: Mapping[str, object]) -> None:
        gpus = body.get("gpus")
        if not isinstance(gpus, list):
            raise ValueError("the body needs a gpus list")
        self.set_catalogue([gpu_from_control(row) for row in gpus if isinstance(row, Mapping)])

    def _add_pod_json(self, body: Mapping[str, Any]) -> str:
        return self.add_pod(
            pod_id=body.get("id"),
            name=body.get("name", "qwen-seeded"),
            status=body.get("status", "EXITED"),
            gpu_id=body.get("gpuId", "NVIDIA A100 80GB PCIe"),
            gpu_count=int(body.get("gpuCount", 1)),
            volume_id=body.get("volumeId"),
            datacenter_id=body.get("dataCenterId"),
            template_id=body.get("templateId", DEFAULT_TEMPLATE_ID),
            price_per_hour=body.get("pricePerHour"),
        )

    def _requests_json(self, params: dict[str, list[str]]) -> list[dict[str, object]]:
        prefix = params["prefix"][0] if params.get("prefix") else None
        include_control = (params.get("includeControl") or ["false"])[0] == "true"
        return [request.to_json() for request in self.requests(prefix, include_control=include_control)]


# --- standalone ----------------------------------------------------------------------------------------------


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m thermostat.dev.simulators.runpod", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9100, help="0 picks a free port (printed)")
    parser.add_argument("--api-key", default=DEFAULT_API_KEY, help="the bearer the /v2 API expects")
    parser.add_argument("--provisioning-seconds", type=float, default=2.0)
    parser.add_argument("--starting-seconds", type=float, default=3.0)
    parser.add_argument("--model-ready-seconds", type=float, default=8.0, help="vLLM load time after RUNNING")
    parser.add_argument("--terminated-linger-seconds", type=float, default=30.0)
    parser.add_argument("--allow-any-user-agent", action="store_true", help="turn off the Cloudflare UA rule")
    parser.add_argument("--volume", action="append", default=[], metavar="ID=DATACENTER", help="add a network volume")
    parser.add_argument(
        "--machines",
        action="store_true",
        help="pods created with an image run the reference worker behind the proxy (the pool)",
    )
    parser.add_argument("--stopped-pod", action="store_true", help=f"seed an EXITED pod on volume {DEFAULT_VOLUME_ID}")
    parser.add_argument(
        "--fast-proxy", action="store_true", help="serve the pods' /metrics from an event-loop listener (benches)"
    )
    parser.add_argument(
        "--engine",
        choices=("simulated", "vllm"),
        default="simulated",
        help="vllm: each RUNNING pod runs a real vLLM (installed by `make engine`) that its proxy relays to",
    )
    parser.add_argument("--engine-log-dir", type=Path, help="where each engine's output goes (default: a temp dir)")
    parser.add_argument("--model-name", default=SimSettings().model_name, help="the name the pods' vLLM serves")
    parser.add_argument(
        "--stream-chunk-seconds", type=float, default=SimSettings().stream_chunk_seconds,
        help="the simulated engine's pause between streamed chunks",
    )  # fmt: skip
    parser.add_argument(
        "--state-file",
        type=Path,
        default=os.environ.get("RUNPOD_SIMULATOR_STATE_FILE") or None,
        help="keep the pods across restarts in this JSON file (else RUNPOD_SIMULATOR_STATE_FILE; none: forget them)",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    # each engine's start, readiness (its load time), exit and stop, on the simulator's output (make run relays it)
    engine_log = logging.getLogger("thermostat.dev.simulators.runpod.engine")
    engine_log.setLevel(logging.INFO)
    engine_log.addHandler(logging.StreamHandler(sys.stdout))
    settings = SimSettings(
        provisioning_seconds=args.provisioning_seconds,
        starting_seconds=args.starting_seconds,
        model_ready_seconds=args.model_ready_seconds,
        terminated_linger_seconds=args.terminated_linger_seconds,
        require_browser_user_agent=not args.allow_any_user_agent,
        model_name=args.model_name,
        stream_chunk_seconds=args.stream_chunk_seconds,
    )
    engine = installation() if args.engine == "vllm" else None
    if engine is not None and not engine.ready:
        print(
            f"runpod simulator: --engine vllm needs the engine installed in {engine.venv}: make engine", file=sys.stderr
        )
        return 2
    volumes = default_volumes()
    for entry in args.volume:
        volume_id, _, datacenter_id = entry.partition("=")
        volumes[volume_id] = datacenter_id
    simulator = RunPodSimulator(
        api_key=args.api_key,
        host=args.host,
        port=args.port,
        settings=settings,
        volumes=volumes,
        machine_command=REFERENCE_WORKER if args.machines else None,
        fast_proxy=args.fast_proxy,
        engine=engine,
        engine_log_dir=args.engine_log_dir,
        state_file=args.state_file,
    ).start()
    if args.stopped_pod:
        simulator.add_pod(volume_id=DEFAULT_VOLUME_ID)
    wait_for_signal(
        [
            "runpod simulator ready",
            f"RUNPOD_V2_BASE_URL={simulator.base_url}",
            f"RUNPOD_PROXY_URL_TEMPLATE={simulator.proxy_url_template}",
            f"control: {simulator.url}/_sim/state",
            f"engine: {'a real vLLM per RUNNING pod' if engine else 'simulated'}, serving {args.model_name!r}",
        ]
    )
    simulator.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
