"""The Fly Machines backend against the Machines API simulator, machines running real workers."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest

from tests.integration.pool.conftest import MACHINE_TOKEN, healthy, spec
from thermostat.dev.simulators.fly import FlySimulator
from thermostat.dev.simulators.serving import RecordedRequest
from thermostat.policy.pool.job_outcome import ReplyKind
from thermostat.policy.pool.machine_type import BackendKind, MachineType
from thermostat.providers.pool.backend import BackendError, MachineHandle
from thermostat.providers.pool.fly import FlyBackend
from thermostat.providers.pool.worker_client import WorkerClient

FLY_TOKEN = "fo1_POOLTOKEN_93b1a0"
APP = "tp-workers"


def fly_type(**fields: Any) -> MachineType:
    return MachineType(**{"name": "cpu-small", "image": "strata-worker:latest", "backend": BackendKind.FLY, **fields})


@pytest.fixture(scope="module")
def running_fly() -> Iterator[FlySimulator]:
    with FlySimulator(token=FLY_TOKEN, apps=[APP]) as simulator:
        yield simulator


@pytest.fixture
def fly(running_fly: FlySimulator) -> Iterator[FlySimulator]:
    running_fly.reset()
    yield running_fly
    running_fly.reset()


@pytest.fixture
async def backend(fly: FlySimulator, client: WorkerClient) -> AsyncIterator[FlyBackend]:
    pool_backend = FlyBackend(
        client, api_token=FLY_TOKEN, app=APP, region="sjc", base_url=fly.base_url,
        endpoint_template=fly.endpoint_template, name_prefix="tp", timeout_seconds=5.0,
    )  # fmt: skip
    yield pool_backend
    await pool_backend.aclose()


def created(fly: FlySimulator) -> RecordedRequest:
    (request,) = [r for r in fly.requests() if r.method == "POST"]
    return request


async def test_create_posts_the_seed_body(fly: FlySimulator, backend: FlyBackend) -> None:
    """One app and region, restart no, auto_destroy false, env plus the token, no guest when nothing is set."""
    machine = spec(fly_type(env={"CELL": "on"}))
    handle = await backend.start(machine)
    request = created(fly)
    assert (request.path, request.query) == (f"/v1/apps/{APP}/machines", "")
    assert request.headers["authorization"] == f"Bearer {FLY_TOKEN}"
    assert request.json_body == {
        "name": f"tp-cpu-small-{machine.machine_id}",
        "region": "sjc",
        "config": {
            "image": "strata-worker:latest",
            "env": {"CELL": "on", "STRATA_WORKER_TOKEN": MACHINE_TOKEN},
            "restart": {"policy": "no"},
            "auto_destroy": False,
        },
    }
    assert handle == MachineHandle(
        provider_id=handle.provider_id, endpoint=f"{fly.url}/vm/{handle.provider_id}", region="sjc"
    )


async def test_guest_carries_only_what_the_type_sets(fly: FlySimulator, backend: FlyBackend) -> None:
    """cpus round up to whole CPUs, memory_mb up to Fly's 256 MB step, gpu_type is Fly's gpu_kind."""
    await backend.start(spec(fly_type(cpus=1.5, memory_mb=1000, gpu_type="a100-pcie-40gb", gpu_count=2)))
    assert created(fly).json_body["config"]["guest"] == {  # type: ignore[index]
        "cpus": 2, "memory_mb": 1024, "gpu_kind": "a100-pcie-40gb", "gpus": 2,
    }  # fmt: skip


async def test_guest_with_memory_only(fly: FlySimulator, backend: FlyBackend) -> None:
    """An unset cpus or gpu_type is absent from guest, never sent as 0."""
    await backend.start(spec(fly_type(memory_mb=2048)))
    assert created(fly).json_body["config"]["guest"] == {"memory_mb": 2048}  # type: ignore[index]


def test_default_endpoint_is_the_private_network_address(client: WorkerClient) -> None:
    """Without an override the endpoint is http://{id}.vm.{app}.internal:{port}."""
    fly_backend = FlyBackend(client, api_token="t", app="workers", region="sjc", worker_port=8080)
    assert fly_backend.endpoint("3d8d9e1b") == "http://3d8d9e1b.vm.workers.internal:8080"


async def test_provider_options_override_the_config_but_not_the_token(fly: FlySimulator, backend: FlyBackend) -> None:
    """provider_options override config fields (guest merges), env merges, and the token is put back."""
    options = {
        "guest": {"cpu_kind": "performance"}, "env": {"B": "2", "STRATA_WORKER_TOKEN": "x"}, "auto_destroy": True,
    }  # fmt: skip
    await backend.start(spec(fly_type(cpus=2, env={"A": "1"}, provider_options=options)))
    config = created(fly).json_body["config"]  # type: ignore[index]
    assert config["guest"] == {"cpus": 2, "cpu_kind": "performance"}
    assert config["env"] == {"A": "1", "B": "2", "STRATA_WORKER_TOKEN": MACHINE_TOKEN}
    assert config["auto_destroy"] is True


@pytest.mark.parametrize("env", [["A=1"], None, "A=1", {"A": 1}], ids=["list", "null", "string", "number"])
async def test_env_override_that_cannot_hold_the_token_is_refused_before_any_request(
    fly: FlySimulator, backend: FlyBackend, env: object
) -> None:
    """An env override that is not an object of strings fails the start; Fly is never called."""
    with pytest.raises(BackendError, match=r"provider_options\.env cannot hold the worker token"):
        await backend.start(spec(fly_type(provider_options={"env": env})))
    assert fly.requests() == []


async def test_machine_boots_runs_a_job_and_is_destroyed(
    fly: FlySimulator, backend: FlyBackend, client: WorkerClient
) -> None:
    """start → health → a real execute on the private address → stop (destroyed); a second stop is a no-op."""
    handle = await backend.start(spec(fly_type()))
    await healthy(backend, handle)
    reply = await client.execute(handle.endpoint, MACHINE_TOKEN, b"\x00job\xff", deadline_seconds=10)
    assert (reply.kind, reply.status, reply.body) == (ReplyKind.ANSWERED, 200, b"\x00job\xff")
    fly.clear_requests()
    await backend.stop(handle.provider_id)
    assert [(r.method, r.path, r.query) for r in fly.requests()] == [
        ("DELETE", f"/v1/apps/{APP}/machines/{handle.provider_id}", "force=true")
    ]
    assert fly.live() == []
    assert not await backend.health(handle)
    await backend.stop(handle.provider_id)  # 404: already destroyed


async def test_health_needs_fly_to_report_started_before_probing(fly: FlySimulator, backend: FlyBackend) -> None:
    """A machine whose process died reads stopped; health is false without trusting the address."""
    handle = await backend.start(spec(fly_type()))
    await healthy(backend, handle)
    fly.kill_machine(handle.provider_id)
    fly.clear_requests()
    assert not await backend.health(handle)
    assert [(r.method, r.path) for r in fly.requests()] == [("GET", f"/v1/apps/{APP}/machines/{handle.provider_id}")]


async def test_refusal_fails_the_start_with_flys_message_and_nothing_runs(
    fly: FlySimulator, backend: FlyBackend
) -> None:
    """A 422 (no capacity in the region) fails the start with Fly's own error; no machine exists."""
    fly.refuse_next_create(422, "insufficient resources to create new machine", "insufficient_capacity")
    machine = spec(fly_type())
    with pytest.raises(BackendError) as refused:
        await backend.start(machine)
    assert str(refused.value) == (
        f"fly: machine {machine.machine_id} (type cpu-small): create HTTP 422: "
        "insufficient resources to create new machine"
    )
    assert fly.live() == []


async def test_missing_image_is_flys_422(fly: FlySimulator, backend: FlyBackend) -> None:
    """An image Fly cannot fetch is refused at create with Fly's message."""
    with pytest.raises(BackendError, match=r"create HTTP 422: failed to get manifest nope:1"):
        await backend.start(spec(fly_type(image="nope:1")))
    assert fly.live() == []


async def test_refusal_never_carries_the_api_token_or_the_worker_token(fly: FlySimulator, backend: FlyBackend) -> None:
    """Fly echoing the bearer and the env in a long error is scrubbed and bounded."""
    echoed = f"Authorization: Bearer {FLY_TOKEN} env STRATA_WORKER_TOKEN={MACHINE_TOKEN} "
    fly.refuse_next_create(400, echoed + "z" * 900)
    with pytest.raises(BackendError) as refused:
        await backend.start(spec(fly_type()))
    message = str(refused.value)
    assert FLY_TOKEN not in message
    assert MACHINE_TOKEN not in message
    assert "Bearer <redacted>" in message
    assert len(message) < 450


async def test_stop_that_fly_refuses_is_an_error(fly: FlySimulator, client: WorkerClient) -> None:
    """A destroy refused (here: a wrong token) names the machine and carries Fly's message, never the token."""
    wrong = FlyBackend(client, api_token="fo1_WRONG", app=APP, region="sjc", base_url=fly.base_url)
    try:
        with pytest.raises(BackendError, match=r"fly: machine m1: destroy HTTP 401: You must be authenticated"):
            await wrong.stop("m1")
    finally:
        await wrong.aclose()


async def test_create_answered_5xx_after_commit_destroys_the_machine_it_made(
    fly: FlySimulator, backend: FlyBackend
) -> None:
    """A gateway 502 after Fly made the machine: found by name in the app, destroyed, nothing left."""
    fly.refuse_next_create(502, "bad gateway", after_commit=True)
    with pytest.raises(BackendError, match=r"create HTTP 502: bad gateway; destroyed machine \w+ it had created"):
        await backend.start(spec(fly_type()))
    assert fly.live() == []


@pytest.mark.parametrize("status", [201, 202])
async def test_an_off_spec_2xx_with_a_machine_id_is_a_machine_the_pool_owns(
    fly: FlySimulator, backend: FlyBackend, status: int
) -> None:
    """Fly documents 200; a 201 or 202 carrying the id made a machine all the same: it boots, and stops."""
    fly.answer_next_create(status)
    handle = await backend.start(spec(fly_type()))
    (machine,) = fly.live()
    assert handle.provider_id == machine.id
    await healthy(backend, handle)
    await backend.stop(handle.provider_id)
    assert fly.live() == []


@pytest.mark.parametrize("status", [200, 202])
async def test_a_2xx_without_a_machine_id_fails_at_warning_and_destroys_the_machine_it_made(
    fly: FlySimulator, backend: FlyBackend, status: int, caplog: pytest.LogCaptureFixture
) -> None:
    """A 2xx is a create Fly acted on: with no id the start fails, the machine is found by name and destroyed,
    and a warning names it for the orphan sweep."""
    fly.answer_next_create(status, with_id=False)
    machine = spec(fly_type())
    with (
        caplog.at_level(logging.WARNING, logger="thermostat.providers.pool.fly"),
        pytest.raises(
            BackendError, match=rf"create HTTP {status} answered without a machine id; destroyed machine \w+ it had"
        ),
    ):
        await backend.start(machine)
    assert fly.live() == []
    (warned,) = [r for r in caplog.records if "without a machine id" in r.getMessage()]
    assert warned.levelno == logging.WARNING
    assert f"the orphan sweep looks for tp-cpu-small-{machine.machine_id}" in warned.getMessage()


async def test_a_2xx_without_a_machine_id_it_cannot_list_leaves_the_machine_to_the_orphan_sweep(
    fly: FlySimulator, backend: FlyBackend, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The listing that should find the id-less machine fails: the error says where to look, the warning names it
    for the sweep, and the machine is still there for the sweep to find."""
    fly.answer_next_create(200, with_id=False)
    original = fly._handle

    def listing_fails(request: RecordedRequest) -> Any:
        if request.method == "GET" and request.path.endswith("/machines"):
            return (503, {"Content-Type": "application/json"}, b'{"error": "unavailable"}')
        return original(request)

    monkeypatch.setattr(fly, "_handle", listing_fails)
    with (
        caplog.at_level(logging.WARNING, logger="thermostat.providers.pool.fly"),
        pytest.raises(BackendError, match=r"could not list machines: look for one named"),
    ):
        await backend.start(spec(fly_type()))
    assert len(fly.live()) == 1
    assert any("the orphan sweep looks for" in r.getMessage() for r in caplog.records)


async def test_create_5xx_that_made_nothing_says_so(fly: FlySimulator, backend: FlyBackend) -> None:
    """A 503 before Fly acted: the error says no machine was created."""
    fly.refuse_next_create(503, "service unavailable")
    with pytest.raises(BackendError, match=r"create HTTP 503: service unavailable; no machine was created"):
        await backend.start(spec(fly_type()))


async def test_start_cancelled_after_fly_made_the_machine_destroys_it(
    fly: FlySimulator, backend: FlyBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pool gives up on a boot whose create Fly acted on but had not answered: the machine is destroyed."""
    loop = asyncio.get_running_loop()
    made = asyncio.Event()
    answered = threading.Event()
    original = fly._handle

    def create_then_wait(request: RecordedRequest) -> Any:
        """Fly acts on the create, then holds its answer until the test lets it go (the simulator's thread)."""
        result = original(request)
        if request.method == "POST":
            loop.call_soon_threadsafe(made.set)
            answered.wait(10)
        return result

    monkeypatch.setattr(fly, "_handle", create_then_wait)
    boot = asyncio.create_task(backend.start(spec(fly_type())))
    await made.wait()
    assert len(fly.live()) == 1
    boot.cancel()
    with pytest.raises(asyncio.CancelledError):
        await boot
    answered.set()
    assert fly.live() == []


async def test_list_machines_names_only_live_machines_with_the_pool_prefix(
    fly: FlySimulator, backend: FlyBackend
) -> None:
    """The orphan sweep's listing: machines named with the prefix, not another of the app, not a destroyed one."""
    ours = await backend.start(spec(fly_type()))
    gone = await backend.start(spec(fly_type()))
    await backend.stop(gone.provider_id)
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {FLY_TOKEN}"}) as http:
        other = await http.post(
            f"{fly.base_url}/apps/{APP}/machines", json={"name": "web-1", "config": {"image": fly_type().image}}
        )
    assert other.status_code == 200, other.text
    listed = await backend.list_machines()
    assert listed is not None
    assert [machine.provider_id for machine in listed] == [ours.provider_id]


# --- what a Fly machine exposes, and what stands between it and others (docs/containers.md) ----------------------


async def test_a_fly_machine_has_no_public_service_only_its_private_network_address(
    fly: FlySimulator, backend: FlyBackend
) -> None:
    """No `services` in the config: Fly gives the machine no public address or port; the pool reaches it on the
    organisation's private network (6PN), at `{id}.vm.{app}.internal`."""
    handle = await backend.start(spec(fly_type()))
    config = created(fly).json_body["config"]  # type: ignore[index]
    assert "services" not in config
    assert handle.provider_id in handle.endpoint  # the simulator's stand-in for the .internal name (see below)


async def test_whoever_reaches_a_fly_machine_needs_that_machines_own_token(
    fly: FlySimulator, backend: FlyBackend, client: WorkerClient
) -> None:
    """Every machine of the organisation reaches every other on 6PN: the per-machine token is what stands between
    them."""
    mine, theirs = spec(fly_type(), token="tenant-a-machine-token"), spec(fly_type(), token="tenant-b-machine-token")
    a, b = await backend.start(mine), await backend.start(theirs)
    await healthy(backend, a)
    await healthy(backend, b)
    with_b_token = await client.execute(a.endpoint, theirs.worker_token, b"cell", deadline_seconds=10)
    with_own = await client.execute(a.endpoint, mine.worker_token, b"cell", deadline_seconds=10)
    assert (with_b_token.kind, with_b_token.status) == (ReplyKind.ANSWERED, 401)
    assert (with_own.kind, with_own.status) == (ReplyKind.ANSWERED, 200)
    await backend.stop(a.provider_id)
    await backend.stop(b.provider_id)


async def test_the_fly_api_token_reads_every_machines_token(fly: FlySimulator, backend: FlyBackend) -> None:
    """A machine's `config.env` is part of Fly's Machine object: the API token reads the worker token."""
    machine = spec(fly_type(), token="held-as-closely-as-the-api-token")
    handle = await backend.start(machine)
    async with httpx.AsyncClient(base_url=fly.base_url, headers={"Authorization": f"Bearer {FLY_TOKEN}"}) as api:
        read = (await api.get(f"/apps/{APP}/machines/{handle.provider_id}")).json()
    assert read["config"]["env"]["STRATA_WORKER_TOKEN"] == machine.worker_token
