"""Safe catalogue defaults (issue 23, item 5) through the service: an entry without `backend` runs on the deployment's
POOL_DEFAULT_BACKEND (docker unless set, the seed's default), and `local`, which runs `image` as a command on the
dispatcher's host, only where POOL_ENABLED_BACKENDS lists it. A PUT naming a backend not enabled is a 400 naming the
field and the setting; a catalogue at start naming one stops the start; a bad setting stops it naming the variable.
Plus the usage duration's clock: the monotonic one, whatever the wall clock does."""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import grpc
import pytest
from pydantic import ValidationError

from tests.fixtures.clock import FakeClock
from tests.integration.pool_dispatcher.conftest import ADMIN, RunningPool, local_type, pool_env, start_pool
from tests.integration.pool_dispatcher.seams import wrap_before
from thermostat.dev.simulators.docker import DEFAULT_IMAGE, DockerSimulator, ImageSpec
from thermostat.pool.v1 import pool_pb2
from thermostat.pool_dispatcher.__main__ import assemble
from thermostat.pool_dispatcher.dispatcher import Dispatcher
from thermostat.pool_dispatcher.settings import PoolDispatcherSettings
from thermostat.store.db import Store

SEED_EXAMPLE = [{"name": "cpu-4x", "image": "strata-worker:latest", "cpus": 4, "memory_mb": 8192, "max_workers": 5}]
"""The worker-pool seed's own example PUT body: no backend."""
NO_DOCKER = "/nonexistent/thermostat/docker.sock"


@pytest.fixture(scope="module")
def docker_daemon() -> Iterator[DockerSimulator]:
    folder = tempfile.mkdtemp(prefix="dflt", dir="/tmp")  # AF_UNIX paths are short
    try:
        with DockerSimulator(f"{folder}/docker.sock", images={DEFAULT_IMAGE: ImageSpec()}) as simulator:
            yield simulator
    finally:
        shutil.rmtree(folder, ignore_errors=True)


async def put(pool: RunningPool, types: list[dict[str, Any]]) -> list[dict[str, Any]]:
    request = pool_pb2.PutMachineTypesRequest()
    request.catalogue.data = json.dumps(types).encode()
    answer = await pool.stub.PutMachineTypes(request, metadata=ADMIN)
    stored: list[dict[str, Any]] = json.loads(answer.data)
    return stored


async def refused_put(pool: RunningPool, types: list[dict[str, Any]]) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await put(pool, types)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert dict(refused.value.trailing_metadata() or ()).get("x-http-code", "400") == "400"
    return refused.value


def settings_from(env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> PoolDispatcherSettings:
    for key in PoolDispatcherSettings.model_fields:
        monkeypatch.delenv(key.upper(), raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return PoolDispatcherSettings()


async def test_the_seeds_example_put_means_docker(pool_store: Store, docker_daemon: DockerSimulator) -> None:
    """No `backend`: docker, the seed's default, on a deployment with a Docker socket; stored and shown as docker."""
    env = pool_env([local_type()], STRATA_POOL_DOCKER_SOCKET=docker_daemon.socket_path)
    async with start_pool(pool_store, env) as pool:
        stored = await put(pool, SEED_EXAMPLE)
        assert [(t["name"], t["backend"]) for t in stored] == [("cpu-4x", "docker")]
        shown = await pool.stub.GetMachineTypes(pool_pb2.GetMachineTypesRequest(), metadata=ADMIN)
        assert [t["backend"] for t in json.loads(shown.data)] == ["docker"]


async def test_the_seeds_example_put_without_a_docker_socket_is_a_400_saying_what_to_set(pool_store: Store) -> None:
    """Before, it was taken as a local command line, accepted, and every boot failed while its jobs waited."""
    async with start_pool(pool_store, pool_env([local_type()], STRATA_POOL_DOCKER_SOCKET=NO_DOCKER)) as pool:
        refused = await refused_put(pool, SEED_EXAMPLE)
        assert (refused.details() or "").startswith(
            "machine_types[0] ('cpu-4x').backend: the docker backend is not configured: set STRATA_POOL_DOCKER_SOCKET"
        )


async def test_a_put_naming_local_where_it_is_not_enabled_is_a_400_naming_the_field_and_the_setting(
    pool_store: Store,
) -> None:
    """The admin token alone cannot run a command on the pool host: nothing of the PUT is stored."""
    env = pool_env([], POOL_ENABLED_BACKENDS="docker,runpod,fly", STRATA_POOL_DOCKER_SOCKET=NO_DOCKER)
    async with start_pool(pool_store, env) as pool:
        refused = await refused_put(pool, [local_type("shell", image="sh -c 'id > /tmp/owned'")])
        assert refused.details() == (
            "machine_types[0] ('shell').backend: the local backend is not enabled in this deployment "
            "(POOL_ENABLED_BACKENDS: docker, fly, runpod); add it to POOL_ENABLED_BACKENDS to allow it"
        )
        assert "local" not in pool.dispatcher.backends
        shown = await pool.stub.GetMachineTypes(pool_pb2.GetMachineTypesRequest(), metadata=ADMIN)
        assert json.loads(shown.data) == []


async def test_a_default_backend_of_local_where_enabled_runs_an_entry_without_backend_locally(
    pool_store: Store,
) -> None:
    """A deployment may choose local as its default, once it enabled local: the entry's image is the command."""
    entry = {k: v for k, v in local_type().items() if k != "backend"}
    env = pool_env([entry], POOL_ENABLED_BACKENDS="local", POOL_DEFAULT_BACKEND="local")
    async with start_pool(pool_store, env) as pool:
        body, _ = await pool.run(b"echoed")
        assert body == b"echoed"
        assert [w.backend for w in await pool.workers()] == ["local"]


def test_a_catalogue_at_start_naming_a_backend_not_enabled_stops_the_start(
    pool_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """POOL_MACHINE_TYPES is the deployment's own file: asking for what the deployment refuses is a start-up error
    naming the entry, the field and the setting (a stored catalogue is logged and refused per job instead)."""
    settings = settings_from(pool_env([local_type()], POOL_ENABLED_BACKENDS="docker"), monkeypatch)
    with pytest.raises(SystemExit) as stopped:
        assemble(settings, pool_store, run_scaler=False)
    assert str(stopped.value) == (
        "POOL_MACHINE_TYPES: machine_types[0] ('local').backend: the local backend is not enabled in this deployment "
        "(POOL_ENABLED_BACKENDS: docker); add it to POOL_ENABLED_BACKENDS to allow it"
    )


def test_a_catalogue_at_start_without_backend_and_no_local_enabled_is_docker(
    pool_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The seed's entry in POOL_MACHINE_TYPES starts (docker is enabled by default) and is a docker type."""
    settings = settings_from(pool_env(SEED_EXAMPLE, POOL_ENABLED_BACKENDS=""), monkeypatch)
    service = assemble(settings, pool_store, run_scaler=False)
    assert [str(t.backend) for t in service.dispatcher.catalogues.catalogue.types] == ["docker"]
    assert "local" not in service.dispatcher.backends


@pytest.mark.parametrize(
    ("env", "named"),
    [
        pytest.param({"POOL_DEFAULT_BACKEND": "local"}, "POOL_DEFAULT_BACKEND", id="default-local-not-enabled"),
        pytest.param({"POOL_ENABLED_BACKENDS": "docker,k8s"}, "POOL_ENABLED_BACKENDS", id="unknown-backend"),
        pytest.param(
            {"STRATA_POOL_FLY_APP": "seed-app", "POOL_FLY_APP": "other-app"}, "STRATA_POOL_FLY_APP and POOL_FLY_APP",
            id="seed-name-and-alias-differ",
        ),
    ],
)  # fmt: skip
def test_a_bad_backend_setting_stops_the_start_naming_the_variable(
    env: dict[str, str], named: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(ValidationError, match=named):
        settings_from({**pool_env([]), "POOL_ENABLED_BACKENDS": "", **env}, monkeypatch)


class SteppedWall(FakeClock):
    """The tests' FakeClock whose wall reading can be stepped (NTP, a VM resumed) while the monotonic one runs on."""

    def __init__(self) -> None:
        super().__init__()
        self.wall_offset = timedelta()

    def now(self) -> datetime:
        return super().now() + self.wall_offset


async def test_usage_duration_stays_monotonic_across_a_wall_clock_step(pool_store: Store) -> None:
    """A job that ran 2.5 s on the monotonic clock while the wall clock stepped back an hour bills 2.5 s: 2500.0 ms,
    never a negative or an hour's duration (the seed: "one UsageEvent per terminal job ... with a monotonic
    duration")."""
    clock = SteppedWall()

    async def while_it_runs() -> None:
        # the worker call: after the runner read the job's start, before it reads its end
        clock.wall_offset = -timedelta(hours=1)
        clock.advance(2.5)

    def on_the_worker_call(d: Dispatcher) -> None:
        wrap_before(d.client, "execute", while_it_runs, None)

    async with start_pool(pool_store, pool_env(), clock=clock, seams=[on_the_worker_call]) as pool:
        job = await pool.submit(b"x")
        finished = await pool.finished(job.id)
        assert finished.state == "completed"
        (event,) = await pool.usage()
    assert event.job_id == job.id
    assert event.duration_seconds == 2.5
    assert event.duration_ms == 2500.0
    assert event.completed_at == event.ended_at


async def test_a_stored_catalogue_naming_local_after_local_was_disabled_starts_and_refuses_its_jobs(
    pool_store: Store, docker_daemon: DockerSimulator, caplog: pytest.LogCaptureFixture
) -> None:
    """A PUT stored a local type while local was enabled; the deployment then drops local. The process starts (it
    must, to take the PUT that fixes it), logs the type naming the setting, and refuses its jobs (503) naming
    POOL_ENABLED_BACKENDS, queueing nothing: no command runs on the host."""
    async with start_pool(pool_store, pool_env([local_type()])) as pool:
        await put(pool, [local_type()])
    env = pool_env([], POOL_ENABLED_BACKENDS="docker", STRATA_POOL_DOCKER_SOCKET=docker_daemon.socket_path)
    with caplog.at_level(logging.ERROR, logger="thermostat.pool_dispatcher"):
        async with start_pool(pool_store, env) as pool:
            await pool.dispatcher.catalogues.refresh()
            assert pool.dispatcher.catalogues.catalogue.names == ("local",)
            assert any(
                "cannot be fully served" in r.getMessage() and "POOL_ENABLED_BACKENDS" in r.getMessage()
                for r in caplog.records
            )
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await pool.submit(b"id > /tmp/owned")
            assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
            assert (
                refused.value.details()
                == "machine type local: the local backend is not enabled (POOL_ENABLED_BACKENDS)"
            )
            assert await pool_store.pool.fetchval("SELECT count(*) FROM pool_jobs") == 0
