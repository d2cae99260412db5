"""The simulated RunPod account: pods, network volumes, the catalogue and each pod's vLLM process.

Shapes follow the published REST v2 spec (runpod/docs `api-reference-v2/openapi.json`, Frontdoor v2.9.0;
notes/provider-apis.md §1): a pod carries every field `Pod` requires, `template` (null: a pod keeps no link to
the template it was created from) and never `templateId`; a create that breaks the contract is a 422 listing each
violation, one that breaks a cross-field rule or cannot be placed a 400 (create_request.py). Lifecycle is lazy:
a pod's status is advanced from the clock whenever it is read, so there is no background thread. Every public
method takes the one lock — the HTTP server is threaded and tests drive the world from another thread at the
same time.
"""

from __future__ import annotations

import math
import secrets
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from datetime import UTC, datetime
from typing import Any, Protocol

from thermostat.dev.simulators.machines import SimMachine
from thermostat.dev.simulators.runpod.catalog import (
    DEFAULT_DATACENTER_ID,
    DEFAULT_TEMPLATE_ID,
    SimGpu,
)
from thermostat.dev.simulators.runpod.create_request import (
    DEFAULT_DISK_GB,
    ApiError,
    CreateRequest,
    unprocessable,
)
from thermostat.dev.simulators.runpod.create_request import port_number as _port_number
from thermostat.dev.simulators.runpod.vllm_exposition import (
    CONTENT_TYPE as METRICS_CONTENT_TYPE,
)
from thermostat.dev.simulators.runpod.vllm_exposition import (
    EXPOSITION_STYLES,
    VllmCounters,
    render,
)
from thermostat.dev.simulators.serving import Answer

POD_STATUSES = ("PROVISIONING", "STARTING", "RUNNING", "EXITED", "ERROR", "TERMINATED")
# v2 `actions`: which transitions each status allows; anything else is 409.
ALLOWED_ACTIONS: dict[str, tuple[str, ...]] = {
    "PROVISIONING": ("stop", "terminate"),
    "STARTING": ("stop", "terminate"),
    "RUNNING": ("stop", "restart", "terminate"),
    "EXITED": ("start", "terminate"),
    "ERROR": ("start", "terminate"),
    "TERMINATED": (),
}
_BILLING = frozenset({"PROVISIONING", "STARTING", "RUNNING"})
_MOVING = frozenset({"PROVISIONING", "STARTING", "TERMINATED"})
_ID_ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789"
TEMPLATE_IMAGE = "vllm/vllm-openai:latest"
GPU_HOST_CUDA_VERSION = "12.8"
DEFAULT_CPU_FLAVOR = "cpu3g"
GB_PER_VCPU = 4  # cpu3g: 4 GB of RAM per vCPU (the pool's RunPod backend)


@dataclass(slots=True, kw_only=True)
class SimSettings:
    """SimSettings are the world's knobs. A negative lifecycle delay holds the pod in that status."""

    provisioning_seconds: float = 0.0
    starting_seconds: float = 0.0
    model_ready_seconds: float = 0.0
    terminated_linger_seconds: float = 0.0
    require_browser_user_agent: bool = True
    list_newest_first: bool = False
    list_without_runtime: bool = False
    hang_seconds: float = 30.0
    model_name: str = "tiny"  # the name the pod's vLLM serves (--served-model-name): /v1/models, the exposition
    metrics_style: str = "recent"
    vllm_port: int = 8000
    # Cloudflare in front of the pod proxy ends a request after 100 s with a 524 (provider-apis.md §1)
    proxy_timeout_seconds: float = 100.0
    # a template of the account that is a serverless one: a pod create naming it is the spec's 422
    serverless_template_id: str = ""
    stream_chunk_seconds: float = 0.05  # the simulated engine's pause between two streamed chunks

    def to_json(self) -> dict[str, object]:
        return {_camel(f.name): getattr(self, f.name) for f in fields(self)}

    def update(self, changes: Mapping[str, object]) -> None:
        """update applies camelCase changes all-or-nothing: one bad value leaves every setting as it was."""
        by_camel = {_camel(f.name): f.name for f in fields(self)}
        coerced: dict[str, object] = {}
        for key, value in changes.items():
            name = by_camel.get(key)
            if name is None:
                raise ValueError(f"unknown setting {key!r}")
            if key == "metricsStyle" and value not in EXPOSITION_STYLES:
                raise ValueError(f"metricsStyle must be one of {EXPOSITION_STYLES}")
            coerced[name] = _coerce(key, getattr(self, name), value)
        for name, value in coerced.items():
            setattr(self, name, value)


def _coerce(key: str, current: object, value: object) -> object:
    """_coerce checks a control-API value against the setting's type (JSON has one number type)."""
    if isinstance(current, bool):
        if isinstance(value, bool):
            return value
    elif isinstance(value, int | float) and not isinstance(value, bool):
        if isinstance(current, float):
            return float(value)
        if isinstance(current, int) and float(value).is_integer():
            return int(value)
    elif isinstance(current, str) and isinstance(value, str):
        return value
    raise ValueError(f"{key} must be a {type(current).__name__}")


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def _ssh_proxy(username: str) -> dict[str, object]:
    return {"host": "ssh.runpod.io", "port": 22, "username": username, "command": f"ssh {username}@ssh.runpod.io"}


def _iso(moment: float | None) -> str | None:
    if moment is None:
        return None
    return datetime.fromtimestamp(moment, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(slots=True, kw_only=True)
class SimPod:
    id: str
    name: str
    status: str
    status_since: float
    created_at: float
    datacenter_id: str
    price_per_hour: float
    gpu_id: str | None = None
    gpu_count: int = 0
    vcpu_count: int | None = None
    cloud: str = "SECURE"
    template_id: str | None = None
    image: str | None = None
    ports: list[str] = field(default_factory=list)
    network_mounts: list[dict[str, str]] = field(default_factory=list)
    started_at: float | None = None
    terminated_at: float | None = None
    delays: dict[str, float] = field(default_factory=dict)
    vllm: VllmCounters = field(default_factory=lambda: VllmCounters(started_at=0.0))
    vllm_dead: bool = False
    patch: dict[str, object] = field(default_factory=dict)
    cpu_id: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    disk: int = DEFAULT_DISK_GB
    ssh_suffix: str = field(default_factory=lambda: secrets.token_hex(4))
    machine: SimMachine | None = None  # an image pod of a simulator given a machine command: a real worker

    def serves_port(self, port: int) -> bool:
        return any(_port_number(entry) == port for entry in self.ports)


@dataclass(slots=True, kw_only=True)
class BilledStretch:
    """One stretch a pod billed: from entering a billing status to leaving it (None: still billing)."""

    pod_id: str
    price_per_hour: float
    start: float
    end: float | None = None
    volume_id: str | None = None  # the network volume the pod mounts (the pod may be gone by the time it is read)

    def to_json(self) -> dict[str, object]:
        return {
            "podId": self.pod_id,
            "volumeId": self.volume_id,
            "pricePerHour": self.price_per_hour,
            "start": _iso(self.start),
            "end": _iso(self.end),
        }


class EngineHooks(Protocol):
    """A real engine behind each pod (simulators/runpod/engine.py): told when a pod's vLLM starts and stops.

    Called under the world's lock: neither may block (a stop's grace is waited out elsewhere)."""

    def started(self, pod_id: str) -> None: ...

    def stopped(self, pod_id: str) -> None: ...

    def ready(self, pod_id: str) -> bool: ...


class PodWorld:
    """PodWorld is the simulated account. Methods raise ApiError (v2 answers), KeyError (unknown pod on the
    control side) or ValueError (a control request that makes no sense)."""

    def __init__(
        self,
        *,
        settings: SimSettings,
        catalogue: Iterable[SimGpu],
        volumes: Mapping[str, str],
        clock: Callable[[], float] = time.time,
        machine_command: Sequence[str] | None = None,
    ) -> None:
        self.lock = threading.RLock()
        self._machine_command = tuple(machine_command) if machine_command else None
        self.settings = settings
        self._catalogue: dict[str, SimGpu] = {gpu.id: gpu for gpu in catalogue}
        self._volumes: dict[str, str] = dict(volumes)
        self._pods: dict[str, SimPod] = {}
        # The pods whose status moves on by itself (PROVISIONING, STARTING) or that leave (TERMINATED): the only
        # ones a request's tick looks at. Ticking every pod made each request O(N), and seeding 10,000 pods O(N²).
        self._moving: dict[str, SimPod] = {}
        # rendered expositions by counter values: 10,000 idle pods share one text
        self._rendered: dict[tuple[object, ...], bytes] = {}
        self._next_ids: deque[str] = deque()
        self._clock = clock
        # what RunPod would bill: each pod's stretches in a billing status, kept after the pod is gone
        self._billed: list[BilledStretch] = []
        self.engines: EngineHooks | None = None  # a real vLLM per RUNNING pod instead of the simulated one

    # --- lifecycle -------------------------------------------------------------------------------------------

    def _delay(self, pod: SimPod, key: str) -> float:
        value = pod.delays.get(key, getattr(self.settings, f"{key}_seconds"))
        return math.inf if value < 0 else float(value)

    def _bill(self, pod: SimPod, was: str | None, status: str, at: float) -> None:
        billing, was_billing = status in _BILLING, was in _BILLING
        if billing and not was_billing:
            volume = next((m.get("volumeId") for m in pod.network_mounts if m.get("volumeId")), None)
            self._billed.append(
                BilledStretch(pod_id=pod.id, price_per_hour=pod.price_per_hour, start=at, volume_id=volume)
            )
        elif was_billing and not billing:
            for stretch in reversed(self._billed):
                if stretch.pod_id == pod.id and stretch.end is None:
                    stretch.end = at
                    break

    def _enter(self, pod: SimPod, status: str, at: float) -> None:
        was_running = pod.status == "RUNNING"
        self._bill(pod, pod.status, status, at)
        pod.status = status
        pod.status_since = at
        if status in _MOVING:
            self._moving[pod.id] = pod
        else:
            self._moving.pop(pod.id, None)
        if status == "RUNNING":
            # A (re)started pod is a new vLLM process under the same id: counters from zero (#2075).
            pod.started_at = at
            pod.vllm = VllmCounters(started_at=at)
            pod.vllm_dead = False
            if self.engines is not None and pod.machine is None:
                self.engines.started(pod.id)
        elif was_running:
            pod.vllm = VllmCounters(started_at=at)
            if self.engines is not None and pod.machine is None:
                self.engines.stopped(pod.id)
        if status == "TERMINATED":
            pod.terminated_at = at
            if pod.machine is not None:
                pod.machine.kill()

    def _advance(self, pod: SimPod, now: float) -> None:
        following = {"PROVISIONING": ("provisioning", "STARTING"), "STARTING": ("starting", "RUNNING")}
        while pod.status in following:
            key, successor = following[pod.status]
            delay = self._delay(pod, key)
            if now - pod.status_since < delay:
                return
            self._enter(pod, successor, pod.status_since + delay)

    def _tick(self) -> float:
        now = self._clock()
        linger = self.settings.terminated_linger_seconds
        for pod in list(self._moving.values()):
            self._advance(pod, now)
            if pod.status == "TERMINATED" and (pod.terminated_at or now) + linger <= now:
                del self._pods[pod.id]
                del self._moving[pod.id]
        return now

    def _pod(self, pod_id: str) -> SimPod:
        pod = self._pods.get(pod_id)
        if pod is None:
            raise ApiError(404, "Not Found", f"pod {pod_id} not found or not accessible to the caller")
        return pod

    def _new_id(self) -> str:
        if self._next_ids:
            return self._next_ids.popleft()
        while True:
            candidate = "".join(secrets.choice(_ID_ALPHABET) for _ in range(14))
            if candidate not in self._pods:
                return candidate

    # --- v2 rendering ----------------------------------------------------------------------------------------

    def _runtime(self, pod: SimPod, now: float) -> dict[str, object]:
        busy = pod.vllm.running > 0
        return {
            # Counted in started seconds: a simulated RUNNING pod is past the GPU-attach instant (uptime 0).
            "uptime": max(1, int(now - pod.status_since)),
            "gpus": [{"util": 94 if busy else 0, "memoryUtil": 78} for _ in range(pod.gpu_count)],
            "cpu": {"util": 12},
            "memory": {"util": 30},
            "ports": [
                {"private": _port_number(entry), "public": None, "type": entry.split("/", 1)[-1], "ip": None}
                for entry in pod.ports
            ],
        }

    def _v2(self, pod: SimPod, now: float) -> dict[str, object]:
        """The spec's `Pod` (v2.9.0), every field it marks required present; `gpu` only on a GPU pod and `cpu`
        only on a CPU pod ("omitted from" the other)."""
        gpu = self._catalogue.get(pod.gpu_id) if pod.gpu_id else None
        ssh_user = f"{pod.id}-{pod.ssh_suffix}"
        body: dict[str, object] = {
            "id": pod.id,
            "name": pod.name,
            "status": pod.status,
            "actions": list(ALLOWED_ACTIONS[pod.status]),
            # a template pod's image is the template's (the simulator plays it as vLLM's)
            "image": pod.image if pod.image is not None else TEMPLATE_IMAGE,
            "args": "",
            "disk": pod.disk,
            "mounts": {"network": [dict(mount) for mount in pod.network_mounts]},
            "ports": list(pod.ports),
            "env": dict(pod.env),
            "registry": None,
            "cloud": pod.cloud,
            "dataCenterId": pod.datacenter_id,
            # "Null means unknown or not applicable (CPU pods …)"
            "cudaVersion": GPU_HOST_CUDA_VERSION if pod.gpu_id else None,
            # "direct": "Null unless `22/tcp` is in `ports`" and published
            "ssh": {"proxy": _ssh_proxy(ssh_user), "direct": None},
            # templateId: "the created pod does not retain a link to the template (`template` stays null)"
            "template": None,
            "cost": pod.price_per_hour if pod.status in _BILLING else 0,
            "locked": False,
            "globalNetworking": {"enabled": False},
            "runtime": self._runtime(pod, now) if pod.status == "RUNNING" else None,
            "createdAt": _iso(pod.created_at),
            "startedAt": _iso(pod.started_at),
        }
        if pod.gpu_id:
            body["gpu"] = {"id": pod.gpu_id, "count": pod.gpu_count, "displayName": gpu.name if gpu else pod.gpu_id}
        if pod.vcpu_count is not None:
            vcpus = pod.vcpu_count
            body["cpu"] = {"id": pod.cpu_id or DEFAULT_CPU_FLAVOR, "vcpuCount": vcpus, "memory": vcpus * GB_PER_VCPU}
        body.update(pod.patch)
        return body

    # --- v2 API ----------------------------------------------------------------------------------------------

    def catalog(self, query: Mapping[str, list[str]]) -> dict[str, object]:
        with self.lock:
            includes = {part.strip().upper() for value in query.get("include", []) for part in value.split(",")}
            with_availability = "AVAILABILITY" in includes
            if with_availability and not query.get("product"):
                raise ApiError(400, "Bad Request", "product is required when include=AVAILABILITY")
            cloud = (query.get("cloud") or [""])[0].upper()
            rows = [
                gpu.to_v2(with_availability=with_availability)
                for gpu in self._catalogue.values()
                if not (cloud == "SECURE" and gpu.secure_price is None)
                and not (cloud == "COMMUNITY" and gpu.community_price is None)
            ]
            return {"gpus": rows}

    def list_pods(self) -> dict[str, object]:
        with self.lock:
            now = self._tick()
            pods = list(self._pods.values())
            if self.settings.list_newest_first:
                pods.reverse()
            listed = [self._v2(pod, now) for pod in pods]
            if self.settings.list_without_runtime:
                # Nothing verified against the live API says a list entry carries `runtime` (the v1 list had
                # no such block): this shape leaves the key out of every entry; GET /pods/{id} still has it.
                for entry in listed:
                    entry.pop("runtime", None)
            return {"pods": listed}

    def get_pod(self, pod_id: str) -> dict[str, object]:
        with self.lock:
            now = self._tick()
            return self._v2(self._pod(pod_id), now)

    def create_pod(self, body: object) -> dict[str, object]:
        with self.lock:
            now = self._tick()
            request = CreateRequest.read(body)
            if request.template_id is not None and request.template_id == self.settings.serverless_template_id:
                raise unprocessable(f"$.templateId: {request.template_id} is a serverless template, not a pod's")
            datacenter_id, price = self._place(request)
            pod = SimPod(
                id=self._new_id(),
                name=request.name,
                status="PROVISIONING",
                status_since=now,
                created_at=now,
                datacenter_id=datacenter_id,
                price_per_hour=price,
                gpu_id=request.gpu_id,
                gpu_count=request.gpu_count,
                vcpu_count=request.vcpu_count,
                cloud=request.cloud,
                template_id=request.template_id,
                image=request.image,
                ports=request.ports or [f"{self.settings.vllm_port}/http"],
                network_mounts=request.mounts,
                cpu_id=request.cpu_id,
                env=request.env,
                disk=request.disk,
            )
            if self._machine_command is not None and request.image is not None and request.template_id is None:
                # the pod's container: booted at create, reachable through the proxy once RUNNING
                pod.machine = SimMachine(self._machine_command, request.env)
            self._pods[pod.id] = pod
            self._moving[pod.id] = pod  # created PROVISIONING, never through _enter
            self._bill(pod, None, pod.status, now)
            self._advance(pod, now)
            return self._v2(pod, now)

    def _place(self, request: CreateRequest) -> tuple[str, float]:
        volume_dcs = set()
        for mount in request.mounts:
            datacenter = self._volumes.get(mount["volumeId"])
            if datacenter is None:
                raise ApiError(400, "Bad Request", f"network volume {mount['volumeId']} does not exist")
            volume_dcs.add(datacenter)
        if len(volume_dcs) > 1:
            raise ApiError(400, "Bad Request", "network volumes are in different datacenters")
        allowed = request.datacenter_ids
        if volume_dcs:
            (volume_dc,) = volume_dcs
            if allowed and volume_dc not in allowed:
                raise ApiError(400, "Bad Request", f"the network volume is in {volume_dc}, not in dataCenterIds")
            allowed = [volume_dc]
        if request.gpu_id is None:
            return (allowed[0] if allowed else DEFAULT_DATACENTER_ID), 0.08 * (request.vcpu_count or 2)
        gpu = self._catalogue.get(request.gpu_id)
        if gpu is None:
            raise ApiError(400, "Bad Request", f"unknown GPU type {request.gpu_id}")
        price = gpu.secure_price if request.cloud == "SECURE" else gpu.community_price
        if price is None:
            raise ApiError(400, "Bad Request", f"{gpu.id} is not offered on {request.cloud} cloud")
        if request.gpu_count > gpu.max_count:
            raise ApiError(400, "Bad Request", f"{gpu.id} allows at most {gpu.max_count} per pod")
        candidates = allowed or [dc.id for dc in gpu.datacenters]
        for datacenter_id in candidates:
            stock = gpu.stock_in(datacenter_id)
            if stock is not None and stock.can_place:
                return datacenter_id, round(price * request.gpu_count, 4)
        raise ApiError(
            400,
            "Bad Request",
            f"There are no longer any instances available with the requested specifications "
            f"({gpu.id} in {', '.join(candidates) or 'any datacenter'}).",
        )

    def action(self, pod_id: str, body: object) -> dict[str, object] | None:
        """action serves POST /pods/{id}/action; None is the terminate action's empty 204."""
        with self.lock:
            now = self._tick()
            pod = self._pod(pod_id)
            action = body.get("action") if isinstance(body, dict) else None
            if action not in ("start", "stop", "restart", "terminate"):
                raise ApiError(400, "Bad Request", "action must be one of start, stop, restart, terminate")
            if action not in ALLOWED_ACTIONS[pod.status]:
                raise ApiError(409, "Conflict", f"action {action} is not valid for a pod in status {pod.status}")
            target = {"start": "STARTING", "stop": "EXITED", "restart": "STARTING", "terminate": "TERMINATED"}
            self._enter(pod, target[action], now)
            self._advance(pod, now)
            if action == "terminate":
                self._tick()
                return None
            return self._v2(pod, now)

    def delete_pod(self, pod_id: str) -> None:
        with self.lock:
            now = self._tick()
            pod = self._pod(pod_id)
            if pod.status != "TERMINATED":
                self._enter(pod, "TERMINATED", now)
            self._tick()

    def machine_port(self, pod_id: str, port: int) -> int | None:
        """The loopback port of the worker behind {podId}-{port}; None when the proxy has nothing to reach."""
        with self.lock:
            self._tick()
            pod = self._pods.get(pod_id)
            if pod is None or pod.machine is None or pod.status != "RUNNING" or not pod.serves_port(port):
                return None
            return pod.machine.port if pod.machine.alive else -1

    def has_machine(self, pod_id: str) -> bool:
        with self.lock:
            pod = self._pods.get(pod_id)
            return pod is not None and pod.machine is not None

    def kill_machine(self, pod_id: str) -> None:
        """The pod's worker dies (kill -9); the pod itself stays RUNNING and billed, as a crashed container does."""
        with self.lock:
            machine = self._control_pod(pod_id).machine
        if machine is not None:
            machine.kill()

    def pod_env(self, pod_id: str) -> dict[str, str]:
        with self.lock:
            return dict(self._control_pod(pod_id).env)

    def metrics(self, pod_id: str, port: int, user_agent: str) -> tuple[int, dict[str, str], bytes]:
        """metrics is the pod proxy in front of vLLM's /metrics, with Cloudflare's and vLLM's failure modes."""
        with self.lock:
            refused = self.vllm_gate(pod_id, port, user_agent)
            if refused is not None:
                return refused
            return 200, {"Content-Type": METRICS_CONTENT_TYPE}, self._render(self._pods[pod_id])

    def vllm_gate(self, pod_id: str, port: int, user_agent: str, *, model_loaded: bool | None = None) -> Answer | None:
        """What the pod proxy answers instead of the pod's vLLM, None when vLLM answers: Cloudflare's 1010 to a
        client without a browser User-Agent, 404 while the pod is not RUNNING (or has no such port), 502 while
        the model loads or vLLM is dead. `model_loaded` is a real engine's word on the load."""
        with self.lock:
            now = self._tick()
            if self.settings.require_browser_user_agent and not user_agent.startswith("Mozilla/"):
                return 403, {"Content-Type": "text/plain; charset=utf-8"}, b"error code: 1010\n"
            pod = self._pods.get(pod_id)
            if pod is None or pod.status != "RUNNING" or not pod.serves_port(port):
                return 404, {"Content-Type": "text/plain; charset=utf-8"}, b"404 page not found\n"
            loading = (
                now - pod.status_since < self._delay(pod, "model_ready") if model_loaded is None else not model_loaded
            )
            if pod.vllm_dead or loading:
                return 502, {"Content-Type": "text/html; charset=utf-8"}, b"<html>502 Bad Gateway</html>\n"
            return None

    def begin_request(self, pod_id: str) -> VllmCounters:
        """A request the simulated vLLM started: running until `end_request` with the counters returned (those of
        the vLLM process that took it: a restart meanwhile leaves the new process's counters alone)."""
        with self.lock:
            counters = self._running_pod(pod_id).vllm
            counters.running += 1
            return counters

    def end_request(
        self, counters: VllmCounters, prompt_tokens: int, generation_tokens: int, finished_reason: str | None
    ) -> None:
        """The request ended: no longer running; a finished one counts as a turn, an aborted one only its prompt
        (vLLM does not count an abort in request_success, vllm#31503)."""
        with self.lock:
            counters.running = max(0, counters.running - 1)
            if finished_reason is None:
                counters.prompt_tokens += prompt_tokens
                counters.generation_tokens += generation_tokens
            else:
                counters.record_turn(
                    prompt_tokens=prompt_tokens, generation_tokens=generation_tokens, finished_reason=finished_reason
                )

    def advance(self) -> None:
        """Move every pod in motion on to where the clock says it is (lifecycle is lazy: reads do this too)."""
        with self.lock:
            self._tick()

    def _render(self, pod: SimPod) -> bytes:
        v, settings = pod.vllm, self.settings
        key: tuple[object, ...] = (v.started_at, v.running, v.waiting, v.prompt_tokens, v.generation_tokens)
        key += (tuple(v.success.items()), settings.model_name, settings.metrics_style)
        text = self._rendered.get(key)
        if text is None:
            if len(self._rendered) >= 4096:
                self._rendered.clear()
            text = render(v, model_name=settings.model_name, style=settings.metrics_style).encode()
            self._rendered[key] = text
        return text

    # --- control ---------------------------------------------------------------------------------------------

    def _control_pod(self, pod_id: str) -> SimPod:
        pod = self._pods.get(pod_id)
        if pod is None:
            raise KeyError(pod_id)
        return pod

    def add_volume(self, volume_id: str, datacenter_id: str) -> None:
        with self.lock:
            self._volumes[volume_id] = datacenter_id

    def volumes(self) -> dict[str, str]:
        with self.lock:
            return dict(self._volumes)

    def set_catalogue(self, gpus: Iterable[SimGpu]) -> None:
        with self.lock:
            self._catalogue = {gpu.id: gpu for gpu in gpus}

    def catalogue(self) -> tuple[SimGpu, ...]:
        with self.lock:
            return tuple(self._catalogue.values())

    def set_next_pod_ids(self, pod_ids: Iterable[str]) -> None:
        with self.lock:
            self._next_ids = deque(pod_ids)

    def add_pod(
        self,
        *,
        pod_id: str | None = None,
        name: str = "qwen-seeded",
        status: str = "EXITED",
        gpu_id: str | None = "NVIDIA A100 80GB PCIe",
        gpu_count: int = 1,
        volume_id: str | None = None,
        datacenter_id: str | None = None,
        template_id: str | None = DEFAULT_TEMPLATE_ID,
        price_per_hour: float | None = None,
    ) -> str:
        """add_pod seeds a pod as if created earlier (e.g. the stale EXITED pod of a wake), no capacity check."""
        if status not in POD_STATUSES:
            raise ValueError(f"status must be one of {POD_STATUSES}")
        with self.lock:
            now = self._tick()
            new_id = pod_id or self._new_id()
            if new_id in self._pods:
                raise ValueError(f"pod {new_id} already exists")
            if volume_id is not None and volume_id not in self._volumes:
                raise ValueError(f"network volume {volume_id} does not exist")
            gpu = self._catalogue.get(gpu_id) if gpu_id else None
            pod = SimPod(
                id=new_id,
                name=name,
                status="EXITED",
                status_since=now,
                created_at=now,
                datacenter_id=datacenter_id or (self._volumes[volume_id] if volume_id else DEFAULT_DATACENTER_ID),
                price_per_hour=price_per_hour
                if price_per_hour is not None
                else ((gpu.secure_price or 0.0) * gpu_count if gpu else 0.0),
                gpu_id=gpu_id,
                gpu_count=gpu_count if gpu_id else 0,
                template_id=template_id,
                ports=[f"{self.settings.vllm_port}/http"],
                network_mounts=[{"volumeId": volume_id, "path": "/workspace"}] if volume_id else [],
            )
            self._pods[new_id] = pod
            self._enter(pod, status, now)
            return new_id

    def billed(self) -> list[BilledStretch]:
        """Every stretch a pod spent in a billing status (PROVISIONING, STARTING, RUNNING), oldest first; `end`
        None while it still bills. The simulator's own record of what ran when, to check metering against."""
        with self.lock:
            self._tick()
            return [
                BilledStretch(
                    pod_id=b.pod_id, price_per_hour=b.price_per_hour, start=b.start, end=b.end, volume_id=b.volume_id
                )
                for b in self._billed
            ]

    def set_pod_status(self, pod_id: str, status: str) -> None:
        if status not in POD_STATUSES:
            raise ValueError(f"status must be one of {POD_STATUSES}")
        with self.lock:
            now = self._tick()
            self._enter(self._control_pod(pod_id), status, now)

    def patch_pod(self, pod_id: str, fields_: Mapping[str, object] | None) -> None:
        """patch_pod overlays fields on the pod's v2 JSON (e.g. runtime: {}); None clears every overlay."""
        with self.lock:
            pod = self._control_pod(pod_id)
            pod.patch = {} if fields_ is None else {**pod.patch, **fields_}

    def set_pod_lifecycle(self, pod_id: str, **delays: float | None) -> None:
        """set_pod_lifecycle overrides provisioning / starting / model_ready seconds for one pod (None: global)."""
        with self.lock:
            pod = self._control_pod(pod_id)
            for key, value in delays.items():
                if key not in ("provisioning", "starting", "model_ready"):
                    raise ValueError(f"unknown lifecycle delay {key!r}")
                if value is None:
                    pod.delays.pop(key, None)
                else:
                    pod.delays[key] = float(value)

    def _running_pod(self, pod_id: str) -> SimPod:
        self._tick()
        pod = self._control_pod(pod_id)
        if pod.status != "RUNNING":
            raise ValueError(f"pod {pod_id} is {pod.status}: its vLLM is not running")
        return pod

    def record_turn(
        self, pod_id: str, prompt_tokens: int, generation_tokens: int, finished_reason: str = "stop"
    ) -> None:
        with self.lock:
            self._running_pod(pod_id).vllm.record_turn(
                prompt_tokens=prompt_tokens, generation_tokens=generation_tokens, finished_reason=finished_reason
            )

    def set_in_flight(self, pod_id: str, running: int, waiting: int = 0) -> None:
        if running < 0 or waiting < 0:
            raise ValueError("request gauges are never negative")
        with self.lock:
            pod = self._running_pod(pod_id)
            pod.vllm.running = running
            pod.vllm.waiting = waiting

    def set_vllm_alive(self, pod_id: str, alive: bool) -> None:
        """A dead vLLM on a RUNNING pod answers 502 through the proxy — billed but not serving (#1998)."""
        with self.lock:
            self._tick()
            self._control_pod(pod_id).vllm_dead = not alive

    def pod_state(self, pod: SimPod, now: float) -> dict[str, object]:
        ready_after = self._delay(pod, "model_ready")
        loaded = now - pod.status_since >= ready_after
        if self.engines is not None and pod.machine is None:
            loaded = self.engines.ready(pod.id)
        return {
            "id": pod.id,
            "status": pod.status,
            "v2": self._v2(pod, now),
            "vllm": pod.vllm.to_json(),
            "vllmAlive": not pod.vllm_dead,
            "modelReady": pod.status == "RUNNING" and not pod.vllm_dead and loaded,
            "lifecycle": dict(pod.delays),
        }

    def one_pod_state(self, pod_id: str) -> dict[str, object]:
        """The control view of one pod (KeyError if unknown), without rendering every other."""
        with self.lock:
            now = self._tick()
            return self.pod_state(self._control_pod(pod_id), now)

    def pods_state(self) -> list[dict[str, object]]:
        with self.lock:
            now = self._tick()
            return [self.pod_state(pod, now) for pod in self._pods.values()]

    def kill_machines(self) -> None:
        with self.lock:
            for pod in self._pods.values():
                if pod.machine is not None:
                    pod.machine.kill()

    # --- a state file across restarts (server.py's `state_file`) ------------------------------------------------

    def export_state(self) -> dict[str, object]:
        """The pods, the volumes and what billed, as JSON values. A pod running a real worker (the pool's) is left
        out, its stretch closed: its process ends with this one, as a machine of a restarted host would."""
        with self.lock:
            now = self._tick()
            kept = [pod for pod in self._pods.values() if pod.machine is None]
            left = {pod.id for pod in self._pods.values() if pod.machine is not None}
            return {
                "pods": [
                    {**{f.name: getattr(pod, f.name) for f in fields(SimPod) if f.name not in ("machine", "vllm")},
                     "vllm": asdict(pod.vllm)}
                    for pod in kept
                ],
                "volumes": dict(self._volumes),
                "billed": [
                    {**asdict(b), "end": now if b.end is None and b.pod_id in left else b.end} for b in self._billed
                ],
            }  # fmt: skip

    def import_state(self, state: Mapping[str, Any]) -> None:
        """Take the pods, volumes and billed stretches `export_state` wrote; a pod's lifecycle goes on from its
        recorded times (the clock is the wall clock)."""
        with self.lock:
            self._volumes.update(state.get("volumes") or {})
            for raw in state.get("pods") or []:
                values = dict(raw)
                counters = VllmCounters(**values.pop("vllm"))
                pod = SimPod(**values, vllm=counters)
                self._pods[pod.id] = pod
                if pod.status in _MOVING:
                    self._moving[pod.id] = pod
            self._billed = [BilledStretch(**stretch) for stretch in state.get("billed") or []]
            self._tick()

    def reset(self, *, catalogue: Iterable[SimGpu], volumes: Mapping[str, str], settings: SimSettings) -> None:
        with self.lock:
            self.kill_machines()
            self._pods.clear()
            self._moving.clear()
            self._billed.clear()
            self._next_ids.clear()
            self._catalogue = {gpu.id: gpu for gpu in catalogue}
            self._volumes = dict(volumes)
            self.settings = settings
