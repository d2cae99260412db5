"""The RunPod backend through RunPodV2Client against the RunPod simulator, pods running real workers."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest

from tests.integration.pool.conftest import MACHINE_TOKEN, healthy, spec
from thermostat.dev.simulators.machines import REFERENCE_WORKER
from thermostat.dev.simulators.runpod.catalog import default_catalogue
from thermostat.dev.simulators.runpod.server import RunPodSimulator
from thermostat.dev.simulators.serving import RecordedRequest
from thermostat.policy.pool.job_outcome import ReplyKind
from thermostat.policy.pool.machine_type import BackendKind, MachineType
from thermostat.providers.pool.backend import BackendError, MachineSpec
from thermostat.providers.pool.runpod import RunPodBackend, create_body
from thermostat.providers.pool.worker_client import WorkerClient

API_KEY = "rpa_POOLKEY_41c9d2e7"
GPU = "NVIDIA A100 80GB PCIe"


def runpod_type(**fields: Any) -> MachineType:
    return MachineType(**{
        "name": "cpu-small", "image": "strata-worker:latest", "backend": BackendKind.RUNPOD,
        "job_timeout_seconds": 90.0, **fields,
    })  # fmt: skip


@pytest.fixture(scope="module")
def running_runpod() -> Iterator[RunPodSimulator]:
    with RunPodSimulator(api_key=API_KEY, machine_command=REFERENCE_WORKER) as simulator:
        yield simulator


@pytest.fixture
def runpod(running_runpod: RunPodSimulator) -> Iterator[RunPodSimulator]:
    running_runpod.reset()
    yield running_runpod
    running_runpod.reset()


@pytest.fixture
async def backend(runpod: RunPodSimulator, client: WorkerClient) -> AsyncIterator[RunPodBackend]:
    pool_backend = RunPodBackend(
        client, api_key=API_KEY, base_url=runpod.base_url, proxy_url_template=runpod.proxy_url_template,
        name_prefix="tp", timeout_seconds=5.0,
    )  # fmt: skip
    yield pool_backend
    await pool_backend.aclose()


def created(runpod: RunPodSimulator) -> RecordedRequest:
    (request,) = [r for r in runpod.requests() if (r.method, r.path) == ("POST", "/v2/pods")]
    return request


def billing(runpod: RunPodSimulator) -> list[str]:
    return [str(pod["id"]) for pod in (state["v2"] for state in runpod.pods()) if pod["status"] != "TERMINATED"]


def body_for(machine_type: MachineType) -> dict[str, Any]:
    machine = MachineSpec(machine_id="m1", tenant_id="acme", machine_type=machine_type, worker_token="tok")
    return create_body(machine, name_prefix="tp", worker_port=8080)


async def test_cpu_type_posts_the_seed_body(runpod: RunPodSimulator, backend: RunPodBackend) -> None:
    """A type without gpu_type sends cpu {cpu3g, vcpuCount}, the image, the port and env plus the token."""
    machine = spec(runpod_type(cpus=3, env={"CELL": "on"}))
    handle = await backend.start(machine)
    request = created(runpod)
    assert request.headers["authorization"] == f"Bearer {API_KEY}"
    assert request.json_body == {
        "name": f"tp-cpu-small-{machine.machine_id}",
        "image": "strata-worker:latest",
        "ports": ["8080/http"],
        "env": {"CELL": "on", "STRATA_WORKER_TOKEN": MACHINE_TOKEN},
        "cpu": {"id": "cpu3g", "vcpuCount": 4},
    }
    assert handle.endpoint == runpod.proxy_url_template.replace("{podId}", handle.provider_id).replace("{port}", "8080")
    assert handle.region == runpod.pod(handle.provider_id)["dataCenterId"] is not None


async def test_gpu_type_posts_gpu_id_and_count_and_disk(runpod: RunPodSimulator, backend: RunPodBackend) -> None:
    """A type with gpu_type sends gpu {id, count} (never cpu) and disk_gb as disk."""
    await backend.start(spec(runpod_type(name="a100", gpu_type=GPU, gpu_count=2, disk_gb=40)))
    body = created(runpod).json_body
    assert isinstance(body, dict)
    assert body["gpu"] == {"id": GPU, "count": 2}
    assert "cpu" not in body
    assert body["disk"] == 40


@pytest.mark.parametrize(
    ("cpus", "vcpus"),
    [(None, 2), (0.5, 2), (2, 2), (2.1, 4), (5, 8), (16, 16), (17, 32), (32, 32)],
)
def test_cpus_round_up_to_the_power_of_two_runpod_accepts(cpus: float | None, vcpus: int) -> None:
    """cpus are rounded up to 2, 4, 8, 16 or 32; unset is the smallest."""
    assert body_for(runpod_type(cpus=cpus))["cpu"] == {"id": "cpu3g", "vcpuCount": vcpus}


def test_provider_options_merge_into_gpu_and_override_the_body() -> None:
    """provider_options merge into gpu (keeping id and count) and replace any other field."""
    body = body_for(runpod_type(gpu_type=GPU, provider_options={
        "gpu": {"minCudaVersion": "12.8"}, "cloud": "SECURE", "ports": ["8080/http", "22/tcp"],
    }))  # fmt: skip
    assert body["gpu"] == {"id": GPU, "count": 1, "minCudaVersion": "12.8"}
    assert body["cloud"] == "SECURE"
    assert body["ports"] == ["8080/http", "22/tcp"]


def test_provider_options_merge_into_cpu() -> None:
    """Another CPU flavor can be picked without restating the count."""
    body = body_for(runpod_type(cpus=8, provider_options={"cpu": {"id": "cpu5c"}}))
    assert body["cpu"] == {"id": "cpu5c", "vcpuCount": 8}


def test_provider_options_cannot_replace_the_worker_token() -> None:
    """An env override merges with the type's env, but the minted token is always put back."""
    body = body_for(runpod_type(env={"A": "1"}, provider_options={"env": {"B": "2", "STRATA_WORKER_TOKEN": "x"}}))
    assert body["env"] == {"A": "1", "B": "2", "STRATA_WORKER_TOKEN": "tok"}


@pytest.mark.parametrize(
    ("options", "message"),
    [
        pytest.param({"env": ["A=1"]}, "provider_options.env cannot hold the worker token", id="env-list"),
        pytest.param({"env": None}, "provider_options.env cannot hold the worker token", id="env-null"),
        pytest.param({"env": {"A": 1}}, "provider_options.env values must be strings", id="env-number"),
        pytest.param({"gpu": {"id": GPU}}, "provider_options.gpu given for a type that sends cpu", id="gpu-on-cpu"),
    ],
)
async def test_options_that_cannot_be_merged_are_refused_before_any_request(
    runpod: RunPodSimulator, backend: RunPodBackend, options: dict[str, Any], message: str
) -> None:
    """Options that would drop the token or send both gpu and cpu fail the start without calling RunPod."""
    with pytest.raises(BackendError, match=message):
        await backend.start(spec(runpod_type(provider_options=options)))
    assert runpod.requests() == []


async def test_region_is_none_until_the_pod_is_placed(runpod: RunPodSimulator, backend: RunPodBackend) -> None:
    """A create answered before placement has no dataCenterId: the handle's region is None."""
    runpod.inject("POST", "/v2/pods", status=201, body="json", json_body={"id": "podunplaced1", "dataCenterId": None})
    handle = await backend.start(spec(runpod_type()))
    assert (handle.provider_id, handle.region) == ("podunplaced1", None)


async def test_machine_boots_runs_a_job_through_the_proxy_and_is_terminated(
    runpod: RunPodSimulator, backend: RunPodBackend, client: WorkerClient
) -> None:
    """start → health → a real execute through the pod proxy → stop (terminated); a second stop is a no-op."""
    handle = await backend.start(spec(runpod_type(env={"STRATA_WORKER_HANDLER": "echo"})))
    await healthy(backend, handle)
    reply = await client.execute(handle.endpoint, MACHINE_TOKEN, b"\x00job\xff", deadline_seconds=10)
    assert (reply.kind, reply.status, reply.body) == (ReplyKind.ANSWERED, 200, b"\x00job\xff")
    runpod.clear_requests()
    await backend.stop(handle.provider_id)
    assert [(r.method, r.path) for r in runpod.requests()] == [("DELETE", f"/v2/pods/{handle.provider_id}")]
    assert billing(runpod) == []
    assert not await backend.health(handle)
    await backend.stop(handle.provider_id)  # RunPod's own 404: already gone


async def test_machine_that_dies_reads_unhealthy(runpod: RunPodSimulator, backend: RunPodBackend) -> None:
    """A pod whose worker died answers 502 through the proxy: unhealthy, though RunPod still says RUNNING."""
    handle = await backend.start(spec(runpod_type()))
    await healthy(backend, handle)
    runpod.kill_machine(handle.provider_id)
    assert not await backend.health(handle)
    assert runpod.pod(handle.provider_id)["status"] == "RUNNING"


async def test_no_capacity_fails_with_runpods_message_and_nothing_bills(
    runpod: RunPodSimulator, backend: RunPodBackend
) -> None:
    """A 400 for a GPU type with no stock fails the start with RunPod's detail; no pod exists."""
    runpod.set_catalogue([dataclasses.replace(gpu, datacenters=()) if gpu.id == GPU else gpu
                          for gpu in default_catalogue()])  # fmt: skip
    machine = spec(runpod_type(name="a100", gpu_type=GPU))
    with pytest.raises(BackendError) as refused:
        await backend.start(machine)
    message = str(refused.value)
    assert message.startswith(f"runpod: machine {machine.machine_id} (type a100): create HTTP 400: ")
    assert "There are no longer any instances available" in message
    assert billing(runpod) == []


async def test_refusal_never_carries_the_key_or_the_token(runpod: RunPodSimulator, backend: RunPodBackend) -> None:
    """A provider message echoing the key and the token, and very long, is scrubbed and bounded."""
    echoed = f"bad request from key {API_KEY} with env STRATA_WORKER_TOKEN={MACHINE_TOKEN} " + "y" * 3000
    runpod.inject("POST", "/v2/pods", status=400, body="json",
                  json_body={"title": "Bad Request", "status": 400, "detail": echoed})  # fmt: skip
    with pytest.raises(BackendError) as refused:
        await backend.start(spec(runpod_type()))
    message = str(refused.value)
    assert API_KEY not in message
    assert MACHINE_TOKEN not in message
    assert "key <redacted>" in message
    assert len(message) < 450


async def test_unconfigured_backend_refuses_without_a_request(runpod: RunPodSimulator, client: WorkerClient) -> None:
    """No key: the start says which setting is missing and RunPod is never called."""
    unconfigured = RunPodBackend(client, api_key=None, base_url=runpod.base_url)
    try:
        with pytest.raises(BackendError, match="POOL_RUNPOD_API_KEY or RUNPOD_API_KEY"):
            await unconfigured.start(spec(runpod_type()))
    finally:
        await unconfigured.aclose()
    assert runpod.requests() == []


async def test_stop_that_runpod_refuses_is_an_error(runpod: RunPodSimulator, backend: RunPodBackend) -> None:
    """A terminate answered 500 keeps the row: the error names the pod and carries RunPod's detail."""
    runpod.inject("DELETE", "/v2/pods/*", status=500, body="json",
                  json_body={"title": "Internal", "status": 500, "detail": "try again"})  # fmt: skip
    with pytest.raises(BackendError, match=r"runpod: pod p9: terminate HTTP 500: try again"):
        await backend.stop("p9")


async def test_create_answered_5xx_after_commit_terminates_the_pod_it_placed(
    runpod: RunPodSimulator, backend: RunPodBackend
) -> None:
    """A gateway 502 after RunPod placed the pod: the backend finds it by name and terminates it."""
    runpod.inject("POST", "/v2/pods", status=502, commit_then_fail=True)
    machine = spec(runpod_type())
    with pytest.raises(BackendError, match=r"create HTTP 502: .*; terminated pod \w+ it had created"):
        await backend.start(machine)
    assert billing(runpod) == []
    calls = [(r.method, r.path) for r in runpod.requests()]
    assert calls[:2] == [("POST", "/v2/pods"), ("GET", "/v2/pods")]
    assert calls[2][0] == "DELETE"


async def test_create_answered_2xx_without_a_pod_id_terminates_the_pod_it_placed(
    runpod: RunPodSimulator, backend: RunPodBackend
) -> None:
    """A 2xx is a create RunPod committed: with no id in the answer the backend still finds the pod and ends it."""
    runpod.inject("POST", "/v2/pods", status=201, body="json", json_body={}, commit_then_fail=True)
    with pytest.raises(BackendError, match=r"create: the answer carried no pod id; terminated pod \w+ it had created"):
        await backend.start(spec(runpod_type()))
    assert billing(runpod) == []


async def test_create_without_an_answer_terminates_the_pod_it_placed(
    runpod: RunPodSimulator, client: WorkerClient
) -> None:
    """A create that timed out after RunPod committed it leaves nothing billing either."""
    impatient = RunPodBackend(client, api_key=API_KEY, base_url=runpod.base_url, timeout_seconds=0.3)
    held = runpod.hold("POST", "/v2/pods", after_commit=True)
    try:
        expected = r"runpod: machine \w+ \(type cpu-small\): create: RunPod did not answer; terminated pod \w+ it had"
        with pytest.raises(BackendError, match=expected):
            await impatient.start(spec(runpod_type()))
    finally:
        held.release()
        await impatient.aclose()
    assert billing(runpod) == []


async def test_create_refused_5xx_before_anything_was_placed_says_so(
    runpod: RunPodSimulator, backend: RunPodBackend
) -> None:
    """A 503 that placed nothing: the error carries RunPod's detail and says no pod was created."""
    runpod.inject("POST", "/v2/pods", status=503, body="json",
                  json_body={"title": "Unavailable", "status": 503, "detail": "maintenance"})  # fmt: skip
    with pytest.raises(BackendError, match=r"create HTTP 503: maintenance; no pod was created"):
        await backend.start(spec(runpod_type()))


async def test_start_cancelled_while_the_create_is_in_flight_terminates_the_pod(
    runpod: RunPodSimulator, backend: RunPodBackend
) -> None:
    """The pool gives up on a boot after RunPod placed the pod but before it answered: the pod is terminated."""
    held = runpod.hold("POST", "/v2/pods", after_commit=True)
    boot = asyncio.create_task(backend.start(spec(runpod_type())))
    await held.reached()
    assert len(billing(runpod)) == 1
    boot.cancel()
    with pytest.raises(asyncio.CancelledError):
        await boot
    held.release()
    assert billing(runpod) == []


async def test_machine_can_be_killed_over_the_control_api(runpod: RunPodSimulator, backend: RunPodBackend) -> None:
    """POST /_sim/pods/{id}/kill-machine is the HTTP twin of kill_machine, for the demo and other processes."""
    handle = await backend.start(spec(runpod_type()))
    await healthy(backend, handle)
    async with httpx.AsyncClient() as http:
        answer = await http.post(f"{runpod.url}/_sim/pods/{handle.provider_id}/kill-machine", json={})
    assert answer.status_code == 200
    assert not await backend.health(handle)


async def test_job_longer_than_the_proxy_allows_is_cut_with_a_524(
    runpod: RunPodSimulator, backend: RunPodBackend, client: WorkerClient
) -> None:
    """Why the catalogue caps runpod jobs: the proxy ends a request past its limit (here shortened) with 524."""
    runpod.configure(proxy_timeout_seconds=0.3)
    env = {"STRATA_WORKER_HANDLER": "sleep", "STRATA_WORKER_SLEEP_SECONDS": "3"}
    handle = await backend.start(spec(runpod_type(env=env)))
    await healthy(backend, handle)
    reply = await client.execute(handle.endpoint, MACHINE_TOKEN, b"{}", deadline_seconds=10)
    assert (reply.kind, reply.status) == (ReplyKind.ANSWERED, 524)


async def test_list_machines_names_only_live_pods_with_the_pool_prefix(
    runpod: RunPodSimulator, backend: RunPodBackend
) -> None:
    """The orphan sweep's listing: pods named `tp-…`, not another pod of the account, not a terminated one."""
    ours = await backend.start(spec(runpod_type()))
    gone = await backend.start(spec(runpod_type()))
    await backend.stop(gone.provider_id)
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {API_KEY}"}) as http:
        other = await http.post(
            f"{runpod.base_url}/pods", json={"name": "llama-70b", "image": "x", "cpu": {"id": "cpu3g", "vcpuCount": 2}}
        )
    assert other.status_code in (200, 201), other.text
    listed = await backend.list_machines()
    assert listed is not None
    assert [machine.provider_id for machine in listed] == [ours.provider_id]
    assert listed[0].name.startswith("tp-cpu-small-")


# --- what a RunPod machine exposes, and what stands between it and others (docs/containers.md) -------------------


async def test_a_runpod_machine_publishes_only_the_worker_port_through_the_https_proxy(
    runpod: RunPodSimulator, backend: RunPodBackend
) -> None:
    """No `/tcp` port (no public address, no direct SSH): RunPod reaches the worker only through its HTTPS proxy, so the
    worker token never travels in plain text."""
    handle = await backend.start(spec(runpod_type()))
    assert created(runpod).json_body["ports"] == ["8080/http"]  # type: ignore[index]
    pod = runpod.pod(handle.provider_id)
    assert pod["ssh"]["direct"] is None  # type: ignore[index]
    assert handle.endpoint.startswith(runpod.proxy_url_template.split("{podId}")[0])


async def test_whoever_reaches_a_runpod_machine_through_the_proxy_needs_that_machines_own_token(
    runpod: RunPodSimulator, backend: RunPodBackend, client: WorkerClient
) -> None:
    """The proxy URL is on the internet: the per-machine token is what stands between a machine and any other caller,
    another machine of the pool (another tenant's) included."""
    echo = runpod_type(env={"STRATA_WORKER_HANDLER": "echo"})
    mine, theirs = spec(echo, token="tenant-a-machine-token"), spec(echo, token="tenant-b-machine-token")
    a, b = await backend.start(mine), await backend.start(theirs)
    await healthy(backend, a)
    await healthy(backend, b)
    with_b_token = await client.execute(a.endpoint, theirs.worker_token, b"cell", deadline_seconds=10)
    with_own = await client.execute(a.endpoint, mine.worker_token, b"cell", deadline_seconds=10)
    assert (with_b_token.kind, with_b_token.status) == (ReplyKind.ANSWERED, 401)
    assert (with_own.kind, with_own.status, with_own.body) == (ReplyKind.ANSWERED, 200, b"cell")
    await backend.stop(a.provider_id)
    await backend.stop(b.provider_id)


async def test_the_runpod_account_key_reads_every_machines_token(
    runpod: RunPodSimulator, backend: RunPodBackend
) -> None:
    """A pod's `env` is part of RunPod's Pod object: whoever holds the account's API key reads the worker token, so
    that key must be as closely held as the tokens it can read."""
    machine = spec(runpod_type(), token="held-as-closely-as-the-key")
    handle = await backend.start(machine)
    async with httpx.AsyncClient(base_url=runpod.base_url, headers={"Authorization": f"Bearer {API_KEY}"}) as api:
        pod = (await api.get(f"/pods/{handle.provider_id}")).json()
    assert pod["env"]["STRATA_WORKER_TOKEN"] == machine.worker_token
