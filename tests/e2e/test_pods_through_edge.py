"""The pod-control seed's REST surface for real: the simulator, the pod controller and Envoy as processes (the dev
stack's Stack), spoken to over HTTP — status codes, problem+json and lowerCamelCase bodies as the cockpit reads them —
plus two pod-controller processes on one database woken at the same moment."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.fixtures.polling import eventually
from thermostat.chassis.ports import free_port
from thermostat.chassis.registry import POD_CONTROLLER
from thermostat.dev.stack.supervisor import Stack, StackConfig
from thermostat.pods.v1 import pods_pb2, pods_pb2_grpc

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
OPERATOR_TOKEN = "e2e-operator-token"
WAKE_TOKEN = "e2e-wake-token"
OPERATOR = {"X-Rig-Operator-Token": OPERATOR_TOKEN}
A100 = "NVIDIA A100 80GB PCIe"
ZERO_DELAYS = ("--provisioning-seconds", "0", "--starting-seconds", "0", "--model-ready-seconds", "0")
FAST = {
    "RIG_OPERATOR_TOKEN": OPERATOR_TOKEN,
    "RIG_WAKE_TOKEN": WAKE_TOKEN,
    # `spare` inherits qwen's volume, which qwen owns: it is the stack's unconfigured pod (503 / configured false)
    "RUNPOD_PODS": "qwen,spare",
    "RUNPOD_WAKE_POLL_SECONDS": "0.05",
    "RUNPOD_WAKE_MAX_POLLS": "20",
    "RUNPOD_WAKE_MAX_RETRY_AFTER_SECONDS": "0.05",
    "WAKE_LEASE_SECONDS": "3",
    "RUNPOD_TIMEOUT_SECONDS": "1",
    "HEALTH_PROBE_SECONDS": "0.5",
    "SHUTDOWN_GRACE_SECONDS": "2",
    "LOG_LEVEL": "WARNING",
}


@pytest.fixture(scope="module")
async def stack(module_database_url: str, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Stack]:
    """Simulator, pod controller and Envoy as child processes on free ports."""
    running = Stack(
        StackConfig(
            data_dir=tmp_path_factory.mktemp("stack"),
            database_url=module_database_url,
            edge_port=0,
            admin_port=0,
            simulator_port=0,
            service_ports={},
            services=(POD_CONTROLLER,),
            relay_logs=False,
            extra_env=FAST,
            simulator_args=ZERO_DELAYS,
        )
    )
    await running.start()
    try:
        yield running
    finally:
        await running.stop()


@pytest.fixture
async def edge(stack: Stack) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=stack.edge_url, timeout=20) as client:
        yield client


@pytest.fixture
async def sim(stack: Stack) -> AsyncIterator[httpx.AsyncClient]:
    """The simulator's /_sim control API, reset (pods, faults, log, settings) before each test."""
    assert stack.simulator_url is not None
    async with httpx.AsyncClient(base_url=f"{stack.simulator_url}/_sim", timeout=10) as client:
        (await client.post("/reset")).raise_for_status()
        yield client


async def _api_calls(sim: httpx.AsyncClient) -> list[tuple[str, str]]:
    requests = (await sim.get("/requests", params={"prefix": "/v2/"})).json()
    return [(r["method"], r["path"]) for r in requests]


async def _only_cards(sim: httpx.AsyncClient, *gpu_ids: str) -> None:
    catalogue = (await sim.get("/catalog")).json()["gpus"]
    kept = [row for row in catalogue if row["id"] in gpu_ids]
    (await sim.put("/catalog", json={"gpus": kept})).raise_for_status()


async def _seed_pod(sim: httpx.AsyncClient, status: str) -> str:
    response = await sim.post("/pods", json={"status": status, "volumeId": "bjn7d94ej9"})
    response.raise_for_status()
    return str(response.json()["id"])


def _problem(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    body: dict[str, Any] = response.json()
    assert body["status"] == status
    return body


async def test_health_is_200_with_the_pod_controller_serving(edge) -> None:
    """GET /health is answered by Envoy from its upstream health checks."""
    assert (await edge.get("/health")).status_code == 200


async def test_the_stacks_envoy_runs_one_worker_thread_as_the_kubernetes_edge_does(stack: Stack) -> None:
    async with httpx.AsyncClient(timeout=10) as admin:
        info = (await admin.get(f"{stack.edge_admin_url}/server_info")).json()
    assert info["command_line_options"]["concurrency"] == 1


async def test_a_created_wake_is_200_with_gpu_and_price_and_a_rewake_prints_them_null(edge, sim) -> None:
    """Created: 200 with every field in camelCase incl. gpuId/pricePerHour; AlreadyRunning prints both null."""
    created = await edge.post("/api/pods/QWEN/start", headers=OPERATOR)
    assert created.status_code == 200, created.text
    assert created.headers["content-type"].startswith("application/json")
    body = created.json()
    assert set(body) == {"name", "outcome", "podId", "gpuId", "pricePerHour", "proxyUrl", "message"}
    assert (body["name"], body["outcome"], body["gpuId"], body["pricePerHour"]) == ("qwen", "Created", A100, 1.59)
    assert body["proxyUrl"].endswith(f"/proxy/{body['podId']}-8000")

    again = await edge.post("/api/pods/qwen/start", headers={"Authorization": f"Bearer {WAKE_TOKEN}"})
    assert again.status_code == 200, again.text
    rewake = again.json()
    assert (rewake["outcome"], rewake["podId"]) == ("AlreadyRunning", body["podId"])
    assert set(rewake) == set(body)
    assert (rewake["gpuId"], rewake["pricePerHour"]) == (None, None)


async def test_get_prints_the_running_pod_and_false_fields_of_an_unconfigured_one(edge, sim) -> None:
    """GET /api/pods/{name}: the pod-control seed's fields, camelCase; an unconfigured pod prints configured false."""
    pod = await _seed_pod(sim, "RUNNING")
    view = (await edge.get("/api/pods/qwen")).json()
    assert {
        k: view[k]
        for k in ("name", "configured", "status", "isRunning", "podId", "podsOnVolume", "datacenter", "lookup")
    } == {
        "name": "qwen",
        "configured": True,
        "status": "RUNNING",
        "isRunning": True,
        "podId": pod,
        "podsOnVolume": 1,
        "datacenter": "EU-RO-1",
        "lookup": "FOUND",
    }
    assert view["proxyUrl"].endswith(f"/proxy/{pod}-8000")

    spare = await edge.get("/api/pods/spare")
    assert spare.status_code == 200
    body = spare.json()
    assert (body["configured"], body["isRunning"], body["podsOnVolume"], body["lookup"], body["status"]) == (
        False,
        False,
        0,
        "UNCONFIGURED",
        "UNKNOWN",
    )
    assert (body["readySince"], body["lastWake"], body["etaSeconds"]) == (None, None, None)
    assert (body["podId"], body["proxyUrl"]) == (None, None), "no pod named: null, as the pod-control seed prints"
    assert "readySince" in view
    assert view["readySince"] is None, "isRunning true with readySince null: waking, not usable yet (seed)"


async def test_a_wake_still_in_flight_is_202_waiting(edge, sim) -> None:
    """The new pod is held PROVISIONING past the poll budget: 202 with outcome Waiting and its pod id."""
    (await sim.put("/settings", json={"provisioningSeconds": -1})).raise_for_status()
    response = await edge.post("/api/pods/qwen/start", headers=OPERATOR)
    assert response.status_code == 202, response.text
    body = response.json()
    assert body["outcome"] == "Waiting"
    assert body["podId"]


async def test_a_failed_wake_is_a_409_problem_whose_detail_says_why(edge, sim) -> None:
    """#2093 through the edge: the one card under the cap 400s, the rest is too dear — 409 naming both."""
    await _only_cards(sim, "NVIDIA RTX PRO 4500 Blackwell", "AMD Instinct MI300X OAM")
    problem = _problem(await edge.post("/api/pods/qwen/start", headers=OPERATOR), 409)
    assert problem["title"] == "Failed"
    assert "Exhausted" in problem["detail"]
    assert "AMD Instinct MI300X OAM: PriceAboveMaximum" in problem["detail"]


@pytest.mark.parametrize(
    ("method", "path", "headers", "status"),
    [
        pytest.param("POST", "/api/pods/spare/start", OPERATOR, 503, id="start-unconfigured"),
        pytest.param("POST", "/api/pods/spare/stop", OPERATOR, 503, id="stop-unconfigured"),
        pytest.param("POST", "/api/pods/llama/start", OPERATOR, 404, id="start-unknown-name"),
        pytest.param("GET", "/api/pods/llama", {}, 404, id="get-unknown-name"),
        pytest.param("GET", "/api/pods/llama/history", {}, 404, id="history-unknown-name"),
        pytest.param("POST", "/api/pods/qwen/stop", OPERATOR, 404, id="stop-no-pod"),
        pytest.param("POST", "/api/pods/qwen/start", {}, 401, id="start-no-token"),
        pytest.param("POST", "/api/pods/qwen/start", {"X-Rig-Operator-Token": "guess"}, 403, id="start-wrong"),
        pytest.param(
            "POST", "/api/pods/qwen/stop", {"X-Rig-Operator-Token": WAKE_TOKEN}, 403, id="stop-with-wake-token"
        ),
    ],
)
async def test_refusals_are_problem_json_with_the_seeds_status(edge, sim, method, path, headers, status) -> None:
    """503 unconfigured, 404 unknown name or no pod, 401/403 tokens — each problem+json, no RunPod call."""
    response = await edge.request(method, path, headers=headers)
    problem = _problem(response, status)
    assert problem["title"]
    assert problem["detail"]
    assert all(call == ("GET", "/v2/pods") for call in await _api_calls(sim))


@pytest.mark.parametrize(
    ("path", "detail"),
    [
        pytest.param("/api/pods/%ff%fe", "name: is not valid UTF-8", id="not-utf8"),
        pytest.param("/api/pods/qw%00en", "name: must not contain a NUL character (U+0000)", id="nul"),
        pytest.param("/api/pods/%c3%28/history", "name: is not valid UTF-8", id="history-not-utf8"),
    ],
)
async def test_a_path_segment_that_is_not_text_is_400_naming_the_field_not_a_500(edge, path, detail) -> None:
    """Found by the chaos fuzzing: the transcoder copies percent-decoded bytes into the string field unchecked,
    and the controller failed to parse its own request (UNKNOWN, a 500)."""
    assert _problem(await edge.get(path), 400)["detail"] == detail


async def test_stop_and_history_print_the_seeds_json(edge, sim) -> None:
    """Stop: {name, ok, pods:[{podId, ok}]}; history: newest first, the Stop then the wake's Start."""
    pod = await _seed_pod(sim, "EXITED")
    assert (await edge.post("/api/pods/qwen/start", headers=OPERATOR)).json()["outcome"] == "Started"
    stopped = await edge.post("/api/pods/qwen/stop", headers=OPERATOR)
    assert stopped.status_code == 200, stopped.text
    assert stopped.json() == {"name": "qwen", "ok": True, "pods": [{"podId": pod, "ok": True}]}

    page = (await edge.get("/api/pods/qwen/history", params={"pageSize": 3})).json()
    first, second, third = page["entries"]
    assert (first["action"]["action"], first["action"]["podId"], first["action"]["trigger"]) == ("Stop", pod, "manual")
    assert first["action"]["ok"] is True
    assert (second["action"]["action"], second["action"]["httpStatus"]) == ("Start", 200)
    assert (third["wake"]["outcome"], third["wake"]["wakeOutcome"]) == ("Succeeded", "Started")
    assert page["nextPageToken"]
    rest = (await edge.get("/api/pods/qwen/history", params={"pageToken": page["nextPageToken"]})).json()
    assert rest["entries"]
    bad = _problem(await edge.get("/api/pods/qwen/history", params={"pageToken": "nope"}), 400)
    assert "page_token" in bad["detail"]


@contextlib.asynccontextmanager
async def _second_controller(stack: Stack) -> AsyncIterator[str]:
    port = free_port()
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "thermostat.pod_controller",
        cwd=ROOT,
        # a second replica on this host: a port of its own for gRPC and for /metrics
        env={**os.environ, **stack.env, "POD_CONTROLLER_PORT": str(port), POD_CONTROLLER.metrics_port_env: "0"},
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    address = f"127.0.0.1:{port}"
    try:
        async with grpc.aio.insecure_channel(address) as channel:
            health = health_pb2_grpc.HealthStub(channel)

            async def serving() -> bool | None:
                with contextlib.suppress(grpc.aio.AioRpcError):
                    reply = await health.Check(health_pb2.HealthCheckRequest(), timeout=0.5)
                    return True if reply.status == health_pb2.HealthCheckResponse.SERVING else None
                return None

            await eventually(serving, timeout=20, every=0.1)
        yield address
    finally:
        process.terminate()
        try:
            await asyncio.wait_for(process.wait(), 10)
        except TimeoutError:
            process.kill()
            await process.wait()


async def test_two_controller_processes_woken_together_create_one_pod(stack, edge, sim) -> None:
    """One wake through the edge, one straight to a second process on the same database: one POST /v2/pods."""
    await _only_cards(sim, A100)
    (await sim.put("/settings", json={"provisioningSeconds": 0.5})).raise_for_status()
    async with _second_controller(stack) as address, grpc.aio.insecure_channel(address) as channel:
        stub = pods_pb2_grpc.PodControllerStub(channel)
        rest, native = await asyncio.gather(
            edge.post("/api/pods/qwen/start", headers=OPERATOR),
            stub.StartPod(
                pods_pb2.StartPodRequest(name="qwen"), metadata=(("x-rig-operator-token", OPERATOR_TOKEN),), timeout=20
            ),
        )
    assert rest.status_code == 200, rest.text
    assert (rest.json()["outcome"], native.outcome) == ("Created", "Created")
    assert rest.json()["podId"] == native.pod_id
    assert (await _api_calls(sim)).count(("POST", "/v2/pods")) == 1


async def test_orphans_are_listed_through_the_edge_for_the_operator_only(edge, sim) -> None:
    """GET /api/orphans: the controller's stamped pod on no configured volume, never the managed one."""
    managed = await _seed_pod(sim, "RUNNING")
    stray = (await sim.post("/pods", json={"status": "RUNNING", "name": "qwen-20261130T154501Z"})).json()["id"]
    _problem(await edge.get("/api/orphans"), 401)
    listed = await edge.get("/api/orphans", headers=OPERATOR)
    assert listed.status_code == 200, listed.text
    body = listed.json()
    assert [(o["podId"], o["owner"], o["status"]) for o in body["orphans"]] == [(stray, "qwen", "RUNNING")]
    assert body["sweep"] == "report"
    assert managed not in {o["podId"] for o in body["orphans"]}


async def test_a_pod_running_when_the_stack_restarts_is_still_there_after_it(
    module_database_url: str, tmp_path: Path
) -> None:
    """Issue 35: the simulator forgot a pod across a restart of the stack; it now keeps it in the data directory."""

    def config() -> StackConfig:
        return StackConfig(
            data_dir=tmp_path,
            database_url=module_database_url,
            edge_port=0,
            admin_port=0,
            stats_port=0,
            simulator_port=0,
            service_ports={},
            services=(POD_CONTROLLER,),
            relay_logs=False,
            extra_env={**FAST, "RUNPOD_PODS": "qwen"},
            simulator_args=ZERO_DELAYS,
        )

    first = Stack(config())
    await first.start()
    try:
        async with httpx.AsyncClient(base_url=first.edge_url, timeout=20) as edge:
            created = await edge.post("/api/pods/qwen/start", headers=OPERATOR)
            assert created.status_code == 200, created.text
            pod_id = created.json()["podId"]
    finally:
        await first.stop()
    assert (tmp_path / "runpod-simulator.json").exists()
    second = Stack(config())
    await second.start()
    try:
        async with httpx.AsyncClient(base_url=second.edge_url, timeout=20) as edge:
            view = (await edge.get("/api/pods/qwen")).json()
    finally:
        await second.stop()
    assert (view["podId"], view["status"], view["lookup"]) == (pod_id, "RUNNING", "FOUND")
