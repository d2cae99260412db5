"""A docker type's `runtime` (issue 36): a catalogue PUT naming a runtime the daemon does not list in GET /info is a
400 naming the field and the runtimes it has; one it lists is stored, and its machines are created on it. The
service, real gRPC, the Docker Engine simulator on a UNIX socket."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from tests.integration.pool_dispatcher.conftest import ADMIN, local_type, pool_env, start_pool
from thermostat.dev.simulators.docker import DEFAULT_IMAGE, DockerSimulator, ImageSpec
from thermostat.pool.v1 import pool_pb2
from thermostat.store.db import Store


@pytest.fixture
def daemon() -> Iterator[DockerSimulator]:
    folder = tempfile.mkdtemp(prefix="drt", dir="/tmp")  # AF_UNIX paths are short
    runtimes = ("io.containerd.runc.v2", "runc", "runsc")
    try:
        with DockerSimulator(f"{folder}/docker.sock", images={DEFAULT_IMAGE: ImageSpec()}, runtimes=runtimes) as sim:
            yield sim
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def on_runtime(runtime: str) -> dict[str, Any]:
    return {"name": "sandboxed", "image": DEFAULT_IMAGE, "backend": "docker", "runtime": runtime}


def put_request(types: list[dict[str, Any]]) -> pool_pb2.PutMachineTypesRequest:
    request = pool_pb2.PutMachineTypesRequest()
    request.catalogue.data = json.dumps(types).encode()
    return request


async def test_a_runtime_the_daemon_does_not_list_is_a_400_naming_the_field_and_its_runtimes(
    pool_store: Store, daemon: DockerSimulator
) -> None:
    """kata-runtime is not among the daemon's runtimes: refused, nothing stored; runsc is, and is stored."""
    async with start_pool(pool_store, pool_env([local_type()], POOL_DOCKER_SOCKET=daemon.socket_path)) as pool:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await pool.stub.PutMachineTypes(put_request([on_runtime("kata-runtime")]), metadata=ADMIN)
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert (refused.value.details() or "").endswith(
            "machine_types[0] ('sandboxed').runtime: the Docker daemon has no runtime 'kata-runtime'; it has: "
            "io.containerd.runc.v2, runc, runsc"
        )
        assert any(r.path.endswith("/info") for r in daemon.requests())
        await pool.stub.PutMachineTypes(put_request([on_runtime("runsc")]), metadata=ADMIN)
        got = await pool.stub.GetMachineTypes(pool_pb2.GetMachineTypesRequest(), metadata=ADMIN)
        assert [(t["name"], t["runtime"]) for t in json.loads(got.data)] == [("sandboxed", "runsc")]


async def test_a_catalogue_naming_no_runtime_does_not_ask_the_daemon(
    pool_store: Store, daemon: DockerSimulator
) -> None:
    """The daemon is read only when a type names a runtime: a PUT without one makes no GET /info."""
    async with start_pool(pool_store, pool_env([local_type()], POOL_DOCKER_SOCKET=daemon.socket_path)) as pool:
        plain = {"name": "plain", "image": DEFAULT_IMAGE, "backend": "docker"}
        await pool.stub.PutMachineTypes(put_request([plain]), metadata=ADMIN)
    assert not any(r.path.endswith("/info") for r in daemon.requests())
