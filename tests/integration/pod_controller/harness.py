"""What the pod-controller tests share: a controller on its own env, call helpers that keep the status code
and the initial metadata (the edge's `x-http-code` / `x-problem-title`), and the simulator's request log
reduced to what RunPod was asked, so a test can pin the exact sequence of API calls."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import grpc

from tests.fixtures.services import OPERATOR, RunningService, pod_controller_env, start_pod_controller
from thermostat.chassis.clock import SYSTEM_CLOCK, Clock
from thermostat.dev.simulators.runpod.server import RunPodSimulator
from thermostat.pods.v1 import pods_pb2, pods_pb2_grpc
from thermostat.store.db import Store

A100 = "NVIDIA A100 80GB PCIe"
RTX_4500 = "NVIDIA RTX PRO 4500 Blackwell"
LIST = ("GET", "/v2/pods")
CATALOG = ("GET", "/v2/catalog/gpus")
CREATE = ("POST", "/v2/pods")


@dataclass
class Controller:
    """One running pod controller and stubs on one channel to it."""

    running: RunningService
    public: pods_pb2_grpc.PodControllerStub
    internal: pods_pb2_grpc.PodControllerInternalStub


@contextlib.asynccontextmanager
async def controller(
    sim: RunPodSimulator, store: Store, *, clock: Clock = SYSTEM_CLOCK, **env: str
) -> AsyncIterator[Controller]:
    """A pod controller on the simulator with `env` overriding the test defaults (fast polls, qwen)."""
    async with (
        start_pod_controller(pod_controller_env(sim, **env), store, clock=clock) as running,
        running.channel() as channel,
    ):
        yield Controller(
            running=running,
            public=pods_pb2_grpc.PodControllerStub(channel),
            internal=pods_pb2_grpc.PodControllerInternalStub(channel),
        )


@dataclass
class Answer:
    """A unary call's outcome as the edge sees it: status, initial metadata, reply or error details."""

    code: grpc.StatusCode
    metadata: dict[str, str] = field(default_factory=dict)
    reply: pods_pb2.StartPodResponse | None = None
    details: str = ""

    @property
    def http_code(self) -> str | None:
        return self.metadata.get("x-http-code")


async def start(
    stub: pods_pb2_grpc.PodControllerStub,
    name: str = "qwen",
    *,
    metadata: tuple[tuple[str, str], ...] = OPERATOR,
    timeout: float = 30,
) -> Answer:
    """StartPod, keeping the status code and the initial metadata whether it succeeded or not."""
    call = stub.StartPod(pods_pb2.StartPodRequest(name=name), metadata=metadata, timeout=timeout)
    try:
        reply = await call
    except grpc.aio.AioRpcError as error:
        return Answer(code=error.code(), metadata=_metadata(error.initial_metadata()), details=error.details() or "")
    return Answer(code=grpc.StatusCode.OK, metadata=_metadata(await call.initial_metadata()), reply=reply)


def _metadata(metadata: grpc.aio.Metadata | None) -> dict[str, str]:
    return {str(key): str(value) for key, value in (metadata or ())}


def api_calls(sim: RunPodSimulator) -> list[tuple[str, str]]:
    """(method, path) of every RunPod API request so far, oldest first (query strings dropped)."""
    return [(r.method, r.path) for r in sim.requests("/v2/")]


def writes(sim: RunPodSimulator) -> list[tuple[str, str]]:
    """The billable requests (start/stop actions, creates, terminates), oldest first."""
    return [c for c in api_calls(sim) if c[0] in ("POST", "DELETE")]


def created_gpus(sim: RunPodSimulator) -> list[str]:
    """The GPU id of every POST /v2/pods, in order."""
    bodies = [r.json_body for r in sim.requests("/v2/pods") if r.method == "POST" and r.path == "/v2/pods"]
    return [body["gpu"]["id"] for body in bodies if isinstance(body, dict)]


def action(pod_id: str) -> tuple[str, str]:
    return ("POST", f"/v2/pods/{pod_id}/action")


def observe(pod_id: str) -> tuple[str, str]:
    return ("GET", f"/v2/pods/{pod_id}")


def delete(pod_id: str) -> tuple[str, str]:
    return ("DELETE", f"/v2/pods/{pod_id}")


def pods_on(sim: RunPodSimulator, volume: str) -> list[dict[str, object]]:
    """The simulator's pods mounting `volume`, as v2 JSON."""
    found = []
    for state in sim.pods():
        v2 = state["v2"]
        assert isinstance(v2, dict)
        if any(m.get("volumeId") == volume for m in v2["mounts"]["network"]):
            found.append(v2)
    return found


async def history(stub: pods_pb2_grpc.PodControllerStub, name: str = "qwen") -> list[pods_pb2.HistoryEntry]:
    reply = await stub.GetPodHistory(pods_pb2.GetPodHistoryRequest(name=name, page_size=500), timeout=10)
    return list(reply.entries)


async def actions(stub: pods_pb2_grpc.PodControllerStub, name: str = "qwen") -> list[pods_pb2.PodAction]:
    """The billable-action log, oldest first."""
    return [e.action for e in reversed(await history(stub, name)) if e.WhichOneof("entry") == "action"]


async def wakes(stub: pods_pb2_grpc.PodControllerStub, name: str = "qwen") -> list[pods_pb2.WakeRecord]:
    """The wake history, oldest first."""
    return [e.wake for e in reversed(await history(stub, name)) if e.WhichOneof("entry") == "wake"]
