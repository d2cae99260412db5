"""The pool's typed gRPC contract through the real edge (issue 38): bytes or text in, int64 priority, Durations,
the JobState enum and Timestamps out, a typed sync submit and a typed catalogue; the deprecated RPCs and the
seed's REST routes answer as before."""

from __future__ import annotations

from datetime import timedelta

import grpc
import httpx
import pytest
from google.protobuf import duration_pb2

from tests.e2e.cli.conftest import fresh_tenant
from tests.e2e.cli.stack import CATALOGUE, CliStack
from tests.integration.pool_dispatcher.conftest import ADMIN_TOKEN, API_TOKEN
from thermostat.pool.v1 import pool_pb2, pool_pb2_grpc

pytestmark = pytest.mark.e2e


def _seconds(seconds: float) -> duration_pb2.Duration:
    duration = duration_pb2.Duration()
    duration.FromTimedelta(timedelta(seconds=seconds))
    return duration


@pytest.fixture
def pool(edge: grpc.aio.Channel) -> pool_pb2_grpc.PoolDispatcherStub:
    return pool_pb2_grpc.PoolDispatcherStub(edge)


def _as(tenant: str, token: str = API_TOKEN) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"), ("x-strata-tenant", tenant))


async def test_run_job_answers_the_typed_job_and_its_result_bytes(pool: pool_pb2_grpc.PoolDispatcherStub) -> None:
    """Bytes in, bytes out; the job COMPLETED with its Timestamps in order, the priority and timeout as given."""
    tenant = fresh_tenant()
    payload = bytes(range(256))
    request = pool_pb2.RunJobRequest(
        machine_type="local", payload=payload, priority=2**40, timeout=_seconds(20), wait=_seconds(30)
    )
    answer = await pool.RunJob(request, metadata=_as(tenant), timeout=60)
    job = answer.job
    assert (answer.result, job.job_state, job.tenant_id, job.priority) == (
        payload,
        pool_pb2.JOB_STATE_COMPLETED,
        tenant,
        2**40,
    )
    assert job.timeout.ToTimedelta() == timedelta(seconds=20)
    assert job.submit_time.ToDatetime() <= job.start_time.ToDatetime() <= job.complete_time.ToDatetime()


async def test_run_job_takes_text_as_an_operator_types_it(pool: pool_pb2_grpc.PoolDispatcherStub) -> None:
    answer = await pool.RunJob(
        pool_pb2.RunJobRequest(machine_type="local", text="héllo"), metadata=_as("t"), timeout=60
    )
    assert answer.result == "héllo".encode()


async def test_a_job_that_fails_is_an_answer_with_its_state_not_a_grpc_error(
    pool: pool_pb2_grpc.PoolDispatcherStub,
) -> None:
    answer = await pool.RunJob(
        pool_pb2.RunJobRequest(machine_type="failing", text="x"), metadata=_as(fresh_tenant()), timeout=60
    )
    assert (answer.job.job_state, answer.result) == (pool_pb2.JOB_STATE_FAILED, b"")
    assert "cell raised" in answer.job.error


async def test_create_job_queues_a_typed_job_that_get_job_reads_back(pool: pool_pb2_grpc.PoolDispatcherStub) -> None:
    tenant = fresh_tenant()
    created = await pool.CreateJob(
        pool_pb2.CreateJobRequest(machine_type="sleepy", text="1", priority=-3), metadata=_as(tenant), timeout=30
    )
    assert created.job_state in (pool_pb2.JOB_STATE_QUEUED, pool_pb2.JOB_STATE_DISPATCHED, pool_pb2.JOB_STATE_RUNNING)
    assert created.priority == -3 and created.HasField("submit_time") and not created.HasField("complete_time")
    read = await pool.GetJob(pool_pb2.GetJobRequest(id=created.id), metadata=_as(tenant), timeout=30)
    assert read.submit_time == created.submit_time and read.state == pool_pb2.JobState.Name(read.job_state)[10:].lower()


@pytest.mark.parametrize(
    ("request_", "detail"),
    [
        (pool_pb2.CreateJobRequest(machine_type="local", timeout=_seconds(-1)), "timeout: "),
        (pool_pb2.CreateJobRequest(machine_type="nope"), "unknown machine type: 'nope'"),
    ],
    ids=["negative-timeout", "unknown-type"],
)
async def test_a_bad_typed_submit_is_refused_naming_the_typed_field(
    pool: pool_pb2_grpc.PoolDispatcherStub, request_: pool_pb2.CreateJobRequest, detail: str
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await pool.CreateJob(request_, metadata=_as(fresh_tenant()), timeout=30)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert detail in (refused.value.details() or "")


async def test_list_machine_types_is_the_typed_catalogue_redacted_without_the_admin_token(
    pool: pool_pb2_grpc.PoolDispatcherStub,
) -> None:
    answer = await pool.ListMachineTypes(pool_pb2.ListMachineTypesRequest(), metadata=_as("t"), timeout=30)
    assert [t.name for t in answer.machine_types] == [t["name"] for t in CATALOGUE]
    failing = next(t for t in answer.machine_types if t.name == "failing")
    assert set(failing.env.values()) == {"<redacted>"} and failing.job_timeout.ToTimedelta() > timedelta(0)
    admin = await pool.ListMachineTypes(pool_pb2.ListMachineTypesRequest(), metadata=_as("t", ADMIN_TOKEN), timeout=30)
    assert next(t for t in admin.machine_types if t.name == "failing").env["STRATA_WORKER_HANDLER"] == "fail"


async def test_the_seeds_rest_routes_keep_their_json(stack: CliStack) -> None:
    """POST /v1/jobs/sync still answers the raw bytes; a submit's 202 job JSON has the seed's fields only."""
    headers = {"Authorization": f"Bearer {API_TOKEN}", "X-Strata-Tenant": fresh_tenant()}
    async with httpx.AsyncClient(base_url=f"http://{stack.edge}", headers=headers, timeout=60) as http:
        sync = await http.post("/v1/jobs/sync?machine_type=local&priority=5", content=b"raw")
        assert (sync.status_code, sync.content) == (200, b"raw")
        queued = await http.post("/v1/jobs?machine_type=local&priority=5", content=b"x")
        catalogue = await http.get("/v1/machine-types")
    assert queued.status_code == 202 and queued.json()["priority"] == 5 and isinstance(queued.json()["state"], str)
    assert not {"job_state", "submit_time", "timeout"} & set(queued.json())
    assert [t["name"] for t in catalogue.json()] == [t["name"] for t in CATALOGUE]


async def test_run_jobs_takes_typed_jobs_over_one_stream(pool: pool_pb2_grpc.PoolDispatcherStub) -> None:
    """RunJobs' `run` is RunJob's typed request; a refusal names the typed field, the other job still runs."""
    good = pool_pb2.RunJobsRequest(tag=1, run=pool_pb2.RunJobRequest(machine_type="local", text="one"))
    bad = pool_pb2.RunJobsRequest(tag=2, run=pool_pb2.RunJobRequest(machine_type="local", wait=_seconds(-1)))
    call = pool.RunJobs(iter([good, bad]), metadata=_as(fresh_tenant()), timeout=60)
    answers = {response.tag: response async for response in call}
    assert answers[1].result == b"one"
    assert answers[2].error.detail.startswith("wait: ")
