"""A docker type's `egress_hosts` through the service (issue 36): a bad entry is a 400 naming the entry and the field,
nothing stored; a good list is stored and listed, in the catalogue's JSON and in the typed ListMachineTypes. The
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
from thermostat.dev.simulators.docker import DEFAULT_IMAGE, DockerSimulator
from thermostat.pool.v1 import pool_pb2
from thermostat.store.db import Store


@pytest.fixture
def daemon() -> Iterator[DockerSimulator]:
    folder = tempfile.mkdtemp(prefix="degc", dir="/tmp")  # AF_UNIX paths are short
    try:
        with DockerSimulator(f"{folder}/docker.sock") as sim:
            yield sim
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def put_request(types: list[dict[str, Any]]) -> pool_pb2.PutMachineTypesRequest:
    request = pool_pb2.PutMachineTypesRequest()
    request.catalogue.data = json.dumps(types).encode()
    return request


async def test_egress_hosts_are_validated_naming_the_field_then_stored_and_listed(
    pool_store: Store, daemon: DockerSimulator
) -> None:
    """A wildcard is refused naming `egress_hosts`, and so is a list on a local type; a good list is listed back."""
    web = {"name": "web", "image": DEFAULT_IMAGE, "backend": "docker"}
    async with start_pool(pool_store, pool_env([local_type()], POOL_DOCKER_SOCKET=daemon.socket_path)) as pool:
        for types, ending in (
            ([{**web, "egress_hosts": ["*.pypi.org"]}], "machine_types[0] ('web').egress_hosts: '*.pypi.org': must be "
             "host or host:port: a DNS name or IPv4 address (no scheme, path, user or wildcard)"),
            ([{**local_type(), "egress_hosts": ["pypi.org"]}], "egress_hosts: is applied by the docker backend only; "
             "a local machine does not read it"),
        ):  # fmt: skip
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await pool.stub.PutMachineTypes(put_request(types), metadata=ADMIN)
            assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert (refused.value.details() or "").endswith(ending), refused.value.details()
        await pool.stub.PutMachineTypes(put_request([{**web, "egress_hosts": ["pypi.org", "10.0.0.1:8080"]}, {
            **web, "name": "closed"}]), metadata=ADMIN)  # fmt: skip
        got = await pool.stub.GetMachineTypes(pool_pb2.GetMachineTypesRequest(), metadata=ADMIN)
        typed = await pool.stub.ListMachineTypes(pool_pb2.ListMachineTypesRequest(), metadata=ADMIN)
    assert [(t["name"], t["egress_hosts"]) for t in json.loads(got.data)] == [
        ("web", ["pypi.org", "10.0.0.1:8080"]), ("closed", [])
    ]  # fmt: skip
    assert [(t.name, list(t.egress_hosts)) for t in typed.machine_types] == [
        ("web", ["pypi.org", "10.0.0.1:8080"]), ("closed", [])
    ]  # fmt: skip
