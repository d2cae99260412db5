"""Auth and tenancy as the worker-pool seed's README states, checked in its order: token, tenant, parameters."""

from __future__ import annotations

import json

import grpc
import pytest

from tests.integration.pool_dispatcher.conftest import (
    ADMIN,
    ADMIN_TOKEN,
    RunningPool,
    caller,
    local_type,
    pool_env,
    start_pool,
)
from thermostat.pool.v1 import pool_pb2
from thermostat.store.db import Store


@pytest.fixture
async def pool(pool_store: Store) -> RunningPool:
    secret_type = local_type(env={"STRATA_WORKER_SLEEP_SECONDS": "0"}, provider_options={"cloud": "SECURE"})
    async with start_pool(pool_store, pool_env([secret_type])) as running:
        yield running


def submit_request(**fields: str) -> pool_pb2.SubmitJobRequest:
    request = pool_pb2.SubmitJobRequest(**fields)
    request.payload.data = b"x"
    return request


async def refused(call: object) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.aio.AioRpcError) as error:
        await call  # type: ignore[misc]
    return error.value.code(), dict(error.value.initial_metadata()).get("x-http-code", "")


async def test_no_token_is_401_before_a_missing_tenant_and_bad_parameters(pool: RunningPool) -> None:
    call = pool.stub.SubmitJob(submit_request(priority="x"), metadata=caller(tenant=None, token=None))
    assert await refused(call) == (grpc.StatusCode.UNAUTHENTICATED, "401")


async def test_a_wrong_token_is_401(pool: RunningPool) -> None:
    call = pool.stub.GetJob(pool_pb2.GetJobRequest(id="x"), metadata=caller(token="not-the-token"))
    assert await refused(call) == (grpc.StatusCode.UNAUTHENTICATED, "401")


async def test_a_missing_tenant_is_400_before_bad_parameters(pool: RunningPool) -> None:
    call = pool.stub.SubmitJob(submit_request(priority="x"), metadata=caller(tenant=None))
    assert await refused(call) == (grpc.StatusCode.INVALID_ARGUMENT, "400")


async def test_reads_need_the_tenant_too(pool: RunningPool) -> None:
    job = await pool.submit(b"x")
    call = pool.stub.GetJob(pool_pb2.GetJobRequest(id=job.id), metadata=caller(tenant=None))
    assert await refused(call) == (grpc.StatusCode.INVALID_ARGUMENT, "400")


@pytest.mark.parametrize(
    "fields",
    [
        {"priority": "1.5", "machine_type": "local"},
        {"priority": "99999999999999999999", "machine_type": "local"},
        {"timeout_seconds": "0", "machine_type": "local"},
        {"timeout_seconds": "inf", "machine_type": "local"},
        {"timeout_seconds": "nan", "machine_type": "local"},
        {"machine_type": ""},
    ],
)
async def test_bad_parameters_are_422_and_nothing_is_queued(
    pool: RunningPool, pool_store: Store, fields: dict[str, str]
) -> None:
    assert await refused(pool.stub.SubmitJob(submit_request(**fields), metadata=caller())) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "422",
    )
    assert await pool_store.pool.fetchval("SELECT count(*) FROM pool_jobs") == 0


async def test_an_unknown_machine_type_is_the_originals_400_and_nothing_is_queued(
    pool: RunningPool, pool_store: Store
) -> None:
    """The strata-pool package's answer, which its clients match on: 400 `unknown machine type: '<name>'`."""
    with pytest.raises(grpc.aio.AioRpcError) as error:
        await pool.stub.SubmitJob(submit_request(machine_type="no-such-type"), metadata=caller())
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert dict(error.value.initial_metadata()).get("x-http-code") == "400"
    assert error.value.details() == "unknown machine type: 'no-such-type'"
    assert await pool_store.pool.fetchval("SELECT count(*) FROM pool_jobs") == 0


async def test_the_admin_token_is_accepted_wherever_the_api_token_is(pool: RunningPool) -> None:
    job = await pool.stub.SubmitJob(submit_request(machine_type="local"), metadata=caller(token=ADMIN_TOKEN))
    assert job.state in ("queued", "running")  # a warm claim at submit is the send: running at once


async def test_another_tenants_job_is_not_found(pool: RunningPool) -> None:
    job = await pool.submit(b"x", tenant="acme")
    for call in (
        pool.stub.GetJob(pool_pb2.GetJobRequest(id=job.id), metadata=caller("globex")),
        pool.stub.GetJobResult(pool_pb2.GetJobResultRequest(id=job.id), metadata=caller("globex")),
        pool.stub.CancelJob(pool_pb2.CancelJobRequest(id=job.id, build_id="b1"), metadata=caller("globex")),
    ):
        assert await refused(call) == (grpc.StatusCode.NOT_FOUND, "404")


async def test_listings_are_the_callers_tenants_unless_admin(pool: RunningPool) -> None:
    await pool.run(b"a", tenant="acme")
    await pool.run(b"b", tenant="globex")
    mine = await pool.stub.ListWorkers(pool_pb2.ListWorkersRequest(tenant_id="globex"), metadata=caller("acme"))
    assert {w.tenant_id for w in mine.workers} == {"acme"}
    usage = await pool.stub.ListUsage(pool_pb2.ListUsageRequest(), metadata=caller("acme"))
    assert {e.tenant_id for e in usage.events} == {"acme"}
    everyone = await pool.stub.ListWorkers(pool_pb2.ListWorkersRequest(), metadata=ADMIN)
    assert {w.tenant_id for w in everyone.workers} == {"acme", "globex"}
    one = await pool.stub.ListUsage(pool_pb2.ListUsageRequest(tenant_id="globex"), metadata=ADMIN)
    assert {e.tenant_id for e in one.events} == {"globex"}
    call = pool.stub.ListWorkers(pool_pb2.ListWorkersRequest(), metadata=caller(tenant=None))
    assert await refused(call) == (grpc.StatusCode.INVALID_ARGUMENT, "400")


async def test_one_tenant_never_gets_another_tenants_warm_machine(pool: RunningPool) -> None:
    _, first = await pool.run(b"a", tenant="acme")
    _, second = await pool.run(b"b", tenant="globex")
    acme = await pool.job(first["x-pool-job-id"], "acme")
    globex = await pool.job(second["x-pool-job-id"], "globex")
    assert acme.worker_id != globex.worker_id
    workers = {w.id: w.tenant_id for w in await pool.workers()}
    assert workers[acme.worker_id] == "acme" and workers[globex.worker_id] == "globex"


async def test_usage_feed_resumes_after_a_position(pool: RunningPool) -> None:
    for i in range(3):
        await pool.run(str(i).encode())
    first = await pool.stub.ListUsage(pool_pb2.ListUsageRequest(page_size=2), metadata=caller())
    assert len(first.events) == 2
    rest = await pool.stub.ListUsage(pool_pb2.ListUsageRequest(after_position=first.next_position), metadata=caller())
    assert len(rest.events) == 1 and rest.events[0].position > first.next_position


async def test_env_and_provider_options_are_redacted_without_the_admin_token(pool: RunningPool) -> None:
    plain = json.loads((await pool.stub.GetMachineTypes(pool_pb2.GetMachineTypesRequest(), metadata=caller())).data)
    assert plain[0]["env"] == {"STRATA_WORKER_SLEEP_SECONDS": "<redacted>"}
    assert plain[0]["provider_options"] == {"cloud": "<redacted>"}
    admin = json.loads((await pool.stub.GetMachineTypes(pool_pb2.GetMachineTypesRequest(), metadata=ADMIN)).data)
    assert admin[0]["env"] == {"STRATA_WORKER_SLEEP_SECONDS": "0"}


async def test_a_catalogue_read_without_the_admin_token_and_written_back_keeps_its_values(
    pool: RunningPool, pool_store: Store
) -> None:
    """Issue 35: the redacted GET body PUT back with the admin token keeps the stored values, never the marker."""
    plain = (await pool.stub.GetMachineTypes(pool_pb2.GetMachineTypesRequest(), metadata=caller())).data
    request = pool_pb2.PutMachineTypesRequest()
    request.catalogue.data = plain
    answer = json.loads((await pool.stub.PutMachineTypes(request, metadata=ADMIN)).data)
    assert answer[0]["env"] == {"STRATA_WORKER_SLEEP_SECONDS": "0"}
    assert answer[0]["provider_options"] == {"cloud": "SECURE"}
    stored = await pool_store.pool.fetchval("SELECT types::text FROM pool_catalogue")
    assert "SECURE" in stored and "<redacted>" not in stored
    await pool.run(b"x")  # the type's machine still boots and answers


async def test_a_redacted_value_with_nothing_stored_is_400_naming_the_field_and_stores_nothing(
    pool: RunningPool, pool_store: Store
) -> None:
    """A `<redacted>` for a key the type never had stands for nothing: 400 naming `env.KEY` of the type."""
    request = pool_pb2.PutMachineTypesRequest()
    request.catalogue.data = json.dumps([local_type(env={"STRATA_WORKER_HANDLER": "<redacted>"})]).encode()
    with pytest.raises(grpc.aio.AioRpcError) as error:
        await pool.stub.PutMachineTypes(request, metadata=ADMIN)
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "machine_types[0] ('local').env.STRATA_WORKER_HANDLER" in error.value.details()
    assert await pool_store.pool.fetchval("SELECT count(*) FROM pool_catalogue") == 0


async def test_replacing_the_catalogue_needs_the_admin_token(pool: RunningPool) -> None:
    request = pool_pb2.PutMachineTypesRequest()
    request.catalogue.data = json.dumps([local_type()]).encode()
    assert await refused(pool.stub.PutMachineTypes(request, metadata=caller())) == (
        grpc.StatusCode.PERMISSION_DENIED,
        "403",
    )


async def test_without_an_admin_token_catalogue_writes_are_403(pool_store: Store) -> None:
    env = pool_env()
    del env["STRATA_POOL_ADMIN_TOKEN"]
    async with start_pool(pool_store, env) as pool:
        request = pool_pb2.PutMachineTypesRequest()
        request.catalogue.data = json.dumps([local_type()]).encode()
        assert await refused(pool.stub.PutMachineTypes(request, metadata=caller())) == (
            grpc.StatusCode.PERMISSION_DENIED,
            "403",
        )


@pytest.mark.parametrize(
    ("entry", "field"),
    [
        ({"max_workers": "5"}, "max_workers"),
        ({"max_workers": 0}, "max_workers"),
        ({"colour": "blue"}, "colour"),
        ({"cpus": 0}, "cpus"),
        ({"cool_down_seconds": -1}, "cool_down_seconds"),
    ],
)
async def test_a_bad_catalogue_is_400_naming_the_field_and_stores_nothing(
    pool: RunningPool, pool_store: Store, entry: dict[str, object], field: str
) -> None:
    request = pool_pb2.PutMachineTypesRequest()
    request.catalogue.data = json.dumps([local_type(**entry)]).encode()
    with pytest.raises(grpc.aio.AioRpcError) as error:
        await pool.stub.PutMachineTypes(request, metadata=ADMIN)
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert field in error.value.details()
    assert await pool_store.pool.fetchval("SELECT count(*) FROM pool_catalogue") == 0


async def test_pool_health_needs_no_token_and_counts_machines_by_state(pool: RunningPool) -> None:
    await pool.run(b"x")
    health = await pool.stub.GetPoolHealth(pool_pb2.GetPoolHealthRequest())
    assert list(health.machine_types) == ["local"]
    assert dict(health.machines) == {"warm": 1}


async def test_the_rest_listings_are_top_level_json_arrays_with_nulls(pool: RunningPool) -> None:
    await pool.run(b"x")
    workers = json.loads((await pool.stub.ListWorkersJson(pool_pb2.ListWorkersJsonRequest(), metadata=caller())).data)
    assert [w["state"] for w in workers] == ["warm"] and workers[0]["region"] is None and workers[0]["job_id"] is None
    assert "token" not in workers[0] and not any("token" in str(value) for value in workers[0].values())
    assert workers[0]["endpoint"] is not None and workers[0]["backend_id"] is not None
    usage = json.loads((await pool.stub.ListUsageJson(pool_pb2.ListUsageJsonRequest(), metadata=caller())).data)
    assert [e["terminal_state"] for e in usage] == ["completed"] and usage[0]["position"] >= 1


async def test_an_unknown_type_in_a_catalogue_of_hundreds_is_the_originals_400_naming_it(pool_store: Store) -> None:
    """The strata-pool package's 400, `unknown machine type: '<name>'`: the catalogue is not listed (400 types would
    outgrow the status trailer, 16 KiB, and the caller would get RESOURCE_EXHAUSTED "Stream removed" instead)."""
    types = [local_type(f"type-{i:03d}-" + "x" * 50) for i in range(400)]
    async with start_pool(pool_store, pool_env(types)) as big:
        with pytest.raises(grpc.aio.AioRpcError) as error:
            await big.stub.SubmitJob(submit_request(machine_type="nope"), metadata=caller())
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert dict(error.value.initial_metadata()).get("x-http-code") == "400"
    assert error.value.details() == "unknown machine type: 'nope'"


async def test_a_catalogue_of_thousands_of_bad_entries_is_still_400_and_stores_nothing(
    pool: RunningPool, pool_store: Store
) -> None:
    request = pool_pb2.PutMachineTypesRequest()
    request.catalogue.data = json.dumps([local_type(f"t{i}", bogus="x" * 100) for i in range(2000)]).encode()
    with pytest.raises(grpc.aio.AioRpcError) as error:
        await pool.stub.PutMachineTypes(request, metadata=ADMIN)
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.value.details().startswith("machine_types[0] ('t0').bogus: is not a machine type field; ")
    assert error.value.details().endswith("; … and 1980 more errors")
    assert await pool_store.pool.fetchval("SELECT count(*) FROM pool_catalogue") == 0
