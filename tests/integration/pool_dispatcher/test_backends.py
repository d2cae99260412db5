"""The pool over each provider backend: the service, real gRPC, and the Docker, Fly and RunPod simulators on real
sockets, each running the reference worker as its machine. Per backend: a job boots a machine, runs, is metered,
and the machine is destroyed at the provider after its cool-down; a machine that dies between jobs fails the
next job as unreachable and its row goes; a provider refusal fails the boot with the provider's message and
leaves nothing billing. Then the catalogue checks against the configured backends (PUT 400, submit 503, start)."""

from __future__ import annotations

import json
import logging
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import grpc
import pytest

from tests.fixtures.clock import FakeClock
from tests.fixtures.polling import eventually
from tests.integration.pool_dispatcher.conftest import (
    ADMIN,
    RunningPool,
    caller,
    local_type,
    pool_env,
    start_pool,
)
from thermostat.dev.simulators.docker import DEFAULT_IMAGE, DockerSimulator, ImageSpec
from thermostat.dev.simulators.fly import FlySimulator
from thermostat.dev.simulators.machines import REFERENCE_WORKER
from thermostat.dev.simulators.runpod.server import RunPodSimulator
from thermostat.policy.pool.docker_api import ApiRange, ApiVersion
from thermostat.pool.v1 import pool_pb2
from thermostat.store.db import Store

FLY_TOKEN = "fo1_SERVICETOKEN_5e2c"
FLY_APP = "tp-service"
RUNPOD_KEY = "rpa_SERVICEKEY_7f3a"
NAME = "remote"


@dataclass(frozen=True, slots=True, kw_only=True)
class Provider:
    """One simulated provider as the pool sees it: the settings that point a backend at it, a machine type on
    it, what it has running (billing), how to kill a machine, and how to make its next start refused."""

    kind: str
    env: dict[str, str]
    type_fields: dict[str, Any]
    running: Callable[[], list[str]]
    kill: Callable[[str], None]
    refuse: Callable[[], tuple[dict[str, Any], str]]  # type changes for a refused start, the provider's message
    # a dead machine's endpoint refuses the connection (Docker's published port): its job is handed to a new one
    # (issue 29); behind a provider's proxy (Fly, RunPod) the proxy answers 502, which the payload reached
    refuses_when_dead: bool = False

    def machine_type(self, **fields: Any) -> dict[str, Any]:
        return {"name": NAME, "backend": self.kind, "boot_timeout_seconds": 30, **self.type_fields, **fields}


@pytest.fixture(scope="module")
def docker_daemon() -> Iterator[DockerSimulator]:
    folder = tempfile.mkdtemp(prefix="dsvc", dir="/tmp")  # AF_UNIX paths are short
    try:
        with DockerSimulator(f"{folder}/docker.sock", images={DEFAULT_IMAGE: ImageSpec()}) as simulator:
            yield simulator
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def fly_api() -> Iterator[FlySimulator]:
    with FlySimulator(token=FLY_TOKEN, apps=[FLY_APP]) as simulator:
        yield simulator


@pytest.fixture(scope="module")
def runpod_api() -> Iterator[RunPodSimulator]:
    with RunPodSimulator(api_key=RUNPOD_KEY, machine_command=REFERENCE_WORKER) as simulator:
        yield simulator


def docker_provider(daemon: DockerSimulator) -> Provider:
    return Provider(
        kind="docker",
        env={"POOL_DOCKER_SOCKET": daemon.socket_path},
        type_fields={"image": DEFAULT_IMAGE},
        running=lambda: [c.id for c in daemon.containers()],
        kill=daemon.kill_machine,
        refuse=lambda: ({"image": "strata-worker:not-pulled"}, "No such image: strata-worker:not-pulled"),
        refuses_when_dead=True,
    )


def fly_provider(fly: FlySimulator) -> Provider:
    def refuse() -> tuple[dict[str, Any], str]:
        fly.refuse_next_create(422, "insufficient resources to create new machine", "insufficient_capacity")
        return {}, "insufficient resources to create new machine"

    return Provider(
        kind="fly",
        env={
            "FLY_API_TOKEN": FLY_TOKEN,
            "POOL_FLY_APP": FLY_APP,
            "POOL_FLY_REGION": "sjc",
            "POOL_FLY_BASE_URL": fly.base_url,
            "POOL_FLY_ENDPOINT_TEMPLATE": fly.endpoint_template,
        },
        type_fields={"image": "strata-worker:latest"},
        running=lambda: [m.id for m in fly.live()],
        kill=fly.kill_machine,
        refuse=refuse,
    )


def runpod_provider(runpod: RunPodSimulator) -> Provider:
    def refuse() -> tuple[dict[str, Any], str]:
        detail = "There are no longer any instances available with the requested specifications."
        runpod.inject("POST", "/v2/pods", status=400, body="json",
                      json_body={"title": "Bad Request", "status": 400, "detail": detail})  # fmt: skip
        return {}, detail

    def billing() -> list[str]:
        return [str(pod["id"]) for pod in (state["v2"] for state in runpod.pods()) if pod["status"] != "TERMINATED"]

    return Provider(
        kind="runpod",
        env={
            "POOL_RUNPOD_API_KEY": RUNPOD_KEY,
            "RUNPOD_V2_BASE_URL": runpod.base_url,
            "RUNPOD_PROXY_URL_TEMPLATE": runpod.proxy_url_template,
        },
        type_fields={"image": "strata-worker:latest", "job_timeout_seconds": 90},
        running=billing,
        kill=runpod.kill_machine,
        refuse=refuse,
    )


@pytest.fixture(params=["docker", "fly", "runpod"])
def provider(
    request: pytest.FixtureRequest, docker_daemon: DockerSimulator, fly_api: FlySimulator, runpod_api: RunPodSimulator
) -> Iterator[Provider]:
    simulators = {"docker": docker_daemon, "fly": fly_api, "runpod": runpod_api}
    simulator = simulators[request.param]
    simulator.reset()
    builders: dict[str, Callable[[Any], Provider]] = {
        "docker": docker_provider,
        "fly": fly_provider,
        "runpod": runpod_provider,
    }
    yield builders[request.param](simulator)
    simulator.reset()


async def provider_id(store: Store) -> str:
    (row,) = await store.pool.fetch("SELECT provider_id FROM pool_machines")
    return str(row["provider_id"])


async def machine_rows(store: Store) -> int:
    count: int = await store.pool.fetchval("SELECT count(*) FROM pool_machines")
    return count


async def test_a_job_boots_a_machine_runs_is_metered_and_the_machine_is_destroyed_after_cool_down(
    pool_store: Store, provider: Provider
) -> None:
    clock = FakeClock()
    env = pool_env([provider.machine_type(cool_down_seconds=60)], **provider.env)
    async with start_pool(pool_store, env, clock=clock) as pool:
        job = await pool.submit(b"\x00payload\xff", machine_type=NAME)
        assert (await pool.finished(job.id)).state == "completed"
        result = await pool.stub.GetJobResult(pool_pb2.GetJobResultRequest(id=job.id), metadata=caller())
        assert result.data == b"\x00payload\xff"
        (event,) = await pool.usage()
        assert (event.job_id, event.machine_type, event.terminal_state) == (job.id, NAME, "completed")
        (worker,) = await pool.workers()
        assert (worker.backend, worker.state) == (provider.kind, "warm")
        assert provider.running() == [await provider_id(pool_store)]
        clock.advance(59)
        await pool.dispatcher.scaler.reap()
        assert len(provider.running()) == 1
        clock.advance(1)
        await pool.dispatcher.scaler.reap()
        assert await pool.workers() == []
        assert provider.running() == []


async def test_a_machine_that_dies_between_jobs_hands_the_next_job_on_or_fails_it_behind_a_proxy(
    pool_store: Store, provider: Provider
) -> None:
    """The warm machine dies between jobs. Where its endpoint refuses the connection, the next job was never sent
    and runs on a new machine (issue 29); behind a provider's proxy, which took the payload and answered 502, it
    fails as unreachable. Either way the dead machine's row goes and nothing of it bills."""
    async with start_pool(pool_store, pool_env([provider.machine_type()], **provider.env)) as pool:
        first = await pool.submit(b"first", machine_type=NAME)
        assert (await pool.finished(first.id)).state == "completed"
        dead = await provider_id(pool_store)
        provider.kill(dead)
        second = await pool.submit(b"second", machine_type=NAME)
        ended = await pool.finished(second.id)
        events = {e.job_id: e.terminal_state for e in await pool.usage()}
        if provider.refuses_when_dead:
            assert (ended.state, ended.handed_to_machines) == ("completed", 2)
            assert events == {first.id: "completed", second.id: "completed"}

            async def replaced() -> bool | None:
                rows = await pool_store.pool.fetch("SELECT provider_id FROM pool_machines")
                return True if [r["provider_id"] for r in rows] == provider.running() != [dead] else None

            await eventually(replaced, timeout=10, every=0.05)
            return
        assert (ended.state, ended.handed_to_machines) == ("failed", 1)
        assert "unreachable" in ended.error

        async def gone() -> bool | None:
            return True if await machine_rows(pool_store) == 0 else None

        await eventually(gone, timeout=10, every=0.05)
        assert provider.running() == []
        assert events == {first.id: "completed", second.id: "failed"}


async def test_a_provider_refusal_fails_the_boot_with_the_providers_message_and_leaves_nothing_billing(
    pool_store: Store, provider: Provider
) -> None:
    changes, message = provider.refuse()
    async with start_pool(pool_store, pool_env([provider.machine_type(**changes)], **provider.env)) as pool:
        job = await pool.submit(b"x", machine_type=NAME)

        async def refused() -> pool_pb2.Job | None:
            seen = await pool.job(job.id)
            return seen if seen.HasField("error") and await machine_rows(pool_store) == 0 else None

        waiting = await eventually(refused, timeout=10, every=0.05)
        assert waiting.state == "queued"  # it waits for capacity again; the next pass retries the boot
        assert "failed to boot: start failed" in waiting.error
        assert message in waiting.error
        assert provider.running() == []
        assert await pool.usage() == []


async def test_a_container_that_exits_while_booting_fails_its_boot_at_once_with_its_exit_code_and_log_tail(
    pool_store: Store, docker_daemon: DockerSimulator
) -> None:
    """Issue 35: the container's own exit and last lines (State and GET /containers/{id}/logs), not the boot timeout
    (300 s here); the container is removed, and the job waits again carrying why."""
    docker_daemon.reset()
    script = "import sys; print('cannot import handler nope', file=sys.stderr, flush=True); sys.exit(3)"
    docker_daemon.add_image("dies:1", ImageSpec(command=(sys.executable, "-c", script)))
    dying = docker_provider(docker_daemon).machine_type(image="dies:1", boot_timeout_seconds=300)
    async with start_pool(pool_store, pool_env([dying], POOL_DOCKER_SOCKET=docker_daemon.socket_path)) as pool:
        job = await pool.submit(b"x", machine_type=NAME)

        async def failed_boot() -> str | None:
            error = (await pool.job(job.id)).error
            return error if "failed to boot" in error else None

        error = await eventually(failed_boot, timeout=20, every=0.05)
    assert "the machine exited with code 3 before answering its health check" in error
    assert error.endswith("its last output: cannot import handler nope")
    assert docker_daemon.containers() == []


# the catalogue against the configured backends


def unconfigured_env(types: list[dict[str, Any]], **overrides: str) -> dict[str, str]:
    """No provider settings at all, and a Docker socket that does not exist."""
    return pool_env(types, POOL_DOCKER_SOCKET="/nonexistent/thermostat/docker.sock", **overrides)


async def put(pool: RunningPool, types: list[dict[str, Any]]) -> grpc.aio.AioRpcError:
    request = pool_pb2.PutMachineTypesRequest()
    request.catalogue.data = json.dumps(types).encode()
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await pool.stub.PutMachineTypes(request, metadata=ADMIN)
    return refused.value


async def test_a_type_naming_an_unconfigured_backend_is_a_400_saying_which_setting_is_missing(
    pool_store: Store,
) -> None:
    async with start_pool(pool_store, unconfigured_env([local_type()])) as pool:
        fly = await put(pool, [local_type(), {"name": "a100", "image": "w:1", "backend": "fly"}])
        assert fly.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert dict(fly.trailing_metadata() or ()).get("x-http-code", "400") == "400"
        assert (
            "the fly backend is not configured: set FLY_API_TOKEN and STRATA_POOL_FLY_APP and STRATA_POOL_FLY_REGION"
            in (fly.details() or "")
        )
        docker = await put(pool, [{"name": "cpu", "image": "w:1", "backend": "docker"}])
        assert "POOL_DOCKER_SOCKET" in (docker.details() or "")
        assert "/nonexistent/thermostat/docker.sock" in (docker.details() or "")
        runpod = await put(pool, [{"name": "cpu", "image": "w:1", "backend": "runpod"}])
        assert "POOL_RUNPOD_API_KEY (or RUNPOD_API_KEY)" in (runpod.details() or "")
        got = await pool.stub.GetMachineTypes(pool_pb2.GetMachineTypesRequest(), metadata=ADMIN)
        assert [t["name"] for t in json.loads(got.data)] == ["local"]  # nothing of a refused PUT is stored


async def test_a_runpod_type_whose_job_timeout_exceeds_the_proxys_100_seconds_is_refused_with_the_reason(
    pool_store: Store,
) -> None:
    env = unconfigured_env([local_type()], POOL_RUNPOD_API_KEY=RUNPOD_KEY)
    async with start_pool(pool_store, env) as pool:
        slow = {"name": "cpu", "image": "w:1", "backend": "runpod", "job_timeout_seconds": 101}
        refused = await put(pool, [slow])
        assert refused.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "job_timeout_seconds" in (refused.details() or "")
        assert "RunPod's proxy ends any request after 100 s" in (refused.details() or "")
        request = pool_pb2.PutMachineTypesRequest()
        request.catalogue.data = json.dumps([{**slow, "job_timeout_seconds": 100}]).encode()
        await pool.stub.PutMachineTypes(request, metadata=ADMIN)  # at the limit: accepted


async def test_a_stored_catalogue_naming_an_unconfigured_backend_starts_loudly_and_refuses_its_jobs(
    pool_store: Store, fly_api: FlySimulator, caplog: pytest.LogCaptureFixture
) -> None:
    """A catalogue PUT while Fly was configured, then a restart without FLY_API_TOKEN: the process starts (no
    crash loop; it can take the PUT that fixes it), logs an error naming the setting, and refuses the type's
    jobs with 503 without queueing them; the local type still runs."""
    fly = fly_provider(fly_api)
    types = [local_type(), fly.machine_type()]
    async with start_pool(pool_store, pool_env(types, **fly.env)) as pool:
        request = pool_pb2.PutMachineTypesRequest()
        request.catalogue.data = json.dumps(types).encode()
        await pool.stub.PutMachineTypes(request, metadata=ADMIN)
    without_fly = {k: v for k, v in fly.env.items() if k != "FLY_API_TOKEN"}
    with caplog.at_level(logging.ERROR, logger="thermostat.pool_dispatcher"):
        async with start_pool(pool_store, pool_env([local_type()], **without_fly)) as pool:
            assert NAME in pool.dispatcher.catalogues.catalogue.names
            assert any(
                "cannot be fully served" in r.getMessage() and "set FLY_API_TOKEN" in r.getMessage()
                for r in caplog.records
            )
            submit = pool_pb2.SubmitJobRequest(machine_type=NAME)
            submit.payload.data = b"x"
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await pool.stub.SubmitJob(submit, metadata=caller())
            assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
            assert "the fly backend is not configured: set FLY_API_TOKEN" in (refused.value.details() or "")
            hint = pool_pb2.SendHintRequest(machine_type=NAME)
            with pytest.raises(grpc.aio.AioRpcError) as hinted:
                await pool.stub.SendHint(hint, metadata=caller())
            assert hinted.value.code() == grpc.StatusCode.FAILED_PRECONDITION
            assert await pool_store.pool.fetchval("SELECT count(*) FROM pool_jobs") == 0
            body, _ = await pool.run(b"still served", machine_type="local")
            assert body == b"still served"
    assert fly_api.live() == []


async def test_several_backends_serve_one_pool_at_once(
    pool_store: Store, docker_daemon: DockerSimulator, fly_api: FlySimulator
) -> None:
    docker, fly = docker_provider(docker_daemon), fly_provider(fly_api)
    docker_daemon.reset()
    fly_api.reset()
    types = [local_type(), docker.machine_type(name="on-docker"), fly.machine_type(name="on-fly")]
    async with start_pool(pool_store, pool_env(types, **docker.env, **fly.env)) as pool:
        for name in ("local", "on-docker", "on-fly"):
            body, _ = await pool.run(name.encode(), machine_type=name)
            assert body == name.encode()
        assert sorted((w.machine_type, w.backend) for w in await pool.workers()) == [
            ("local", "local"),
            ("on-docker", "docker"),
            ("on-fly", "fly"),
        ]
        assert len(docker.running()) == 1
        assert len(fly.running()) == 1
    assert docker.running() == []
    assert fly.running() == []


async def test_a_docker_daemon_sharing_no_api_version_is_said_at_start_and_fails_its_boots_with_that_line(
    pool_store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    """A daemon whose Engine API range is past the pool's (1.53–1.58 against 1.41–1.52): the pool starts, logs one
    error naming both ranges, and each docker boot fails with it; nothing is created."""
    folder = tempfile.mkdtemp(prefix="dnew", dir="/tmp")
    too_new = ApiRange(lowest=ApiVersion(major=1, minor=53), highest=ApiVersion(major=1, minor=58))
    line = "the Docker daemon speaks Engine API 1.53–1.58 and this pool speaks 1.41–1.52: no version in common"
    try:
        with DockerSimulator(f"{folder}/docker.sock", api=too_new) as daemon:
            docker = docker_provider(daemon)
            with caplog.at_level(logging.ERROR, logger="thermostat.providers.pool.docker"):
                async with start_pool(pool_store, pool_env([docker.machine_type()], **docker.env)) as pool:
                    assert [r.getMessage() for r in caplog.records if line in r.getMessage()] == [
                        f"docker: daemon at {daemon.socket_path}: {line}"
                    ]
                    job = await pool.submit(b"x", machine_type=NAME)

                    async def refused() -> pool_pb2.Job | None:
                        seen = await pool.job(job.id)
                        return seen if seen.HasField("error") else None

                    assert line in (await eventually(refused, timeout=10, every=0.05)).error
            assert [r.path for r in daemon.requests()] == ["/version"]
            assert daemon.containers() == []
    finally:
        shutil.rmtree(folder, ignore_errors=True)
