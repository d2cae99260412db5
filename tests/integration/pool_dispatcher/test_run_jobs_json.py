"""RunJobsJson (POST /v1/jobs/batch): a batch of sync jobs in one call, each job answered in the batch's order as
SubmitJobSync would have answered it.

Real gRPC over loopback, the test's own database, reference workers as child processes. The call checks the token
and the tenant header as the unary calls do, then reads the whole body before anything is queued; a job the submit
refuses, or one an unexpected error hits, is its own entry and the others run; a caller that goes away stops the
waits while the jobs run on.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

from tests.fixtures.polling import eventually
from tests.integration.pool_dispatcher.conftest import (
    ADMIN_TOKEN,
    API_TOKEN,
    JOB_FIELDS,
    RunningPool,
    caller,
    local_type,
    pool_env,
    sleepy_type,
    start_pool,
)
from tests.integration.pool_dispatcher.seams import before_execute
from tests.integration.pool_dispatcher.test_run_jobs import Held
from thermostat.chassis.server import ServiceHost, ServiceSpec
from thermostat.pool.v1 import pool_pb2, pool_pb2_grpc
from thermostat.pool_dispatcher.access import Tokens, auth_rules, tenant_rules
from thermostat.pool_dispatcher.servicer import PoolDispatcherServicer
from thermostat.store.db import Store

CATALOGUE = [
    local_type("local", max_workers=2),
    local_type("failing", env={"STRATA_WORKER_HANDLER": "fail", "STRATA_WORKER_FAIL_MESSAGE": "cell raised"}),
    sleepy_type("sleepy", max_workers=3),
]
BINARY = bytes(range(256)) * 4 + b"\x00\r\n\xff"
INTERNAL_ERROR = "internal error (logged by pool-dispatcher)"


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def batch_of(*jobs: dict[str, Any]) -> pool_pb2.RunJobsJsonRequest:
    return raw_batch(json.dumps({"jobs": list(jobs)}).encode())


def raw_batch(data: bytes) -> pool_pb2.RunJobsJsonRequest:
    request = pool_pb2.RunJobsJsonRequest()
    request.payload.data = data
    return request


async def run_batch(
    pool: RunningPool, *jobs: dict[str, Any], metadata: tuple[tuple[str, str], ...] = caller()
) -> list[dict[str, Any]]:
    answer = await pool.stub.RunJobsJson(batch_of(*jobs), metadata=metadata)
    assert answer.content_type == "application/json"
    entries: list[dict[str, Any]] = json.loads(answer.data)
    return entries


async def refused(
    pool: RunningPool, request: pool_pb2.RunJobsJsonRequest, metadata: tuple[tuple[str, str], ...]
) -> tuple[grpc.StatusCode, str, str | None]:
    """A refused call's code, detail and the HTTP status it names for the edge."""
    with pytest.raises(grpc.aio.AioRpcError) as error:
        await pool.stub.RunJobsJson(request, metadata=metadata)
    http = dict(error.value.initial_metadata() or ()).get("x-http-code")
    return error.value.code(), error.value.details() or "", http


@pytest.fixture
async def pool(pool_store: Store) -> AsyncIterator[RunningPool]:
    async with start_pool(pool_store, pool_env(CATALOGUE)) as running:
        yield running


async def job_rows(pool: RunningPool) -> int:
    return int(await pool.dispatcher.repo.pool.fetchval("SELECT count(*) FROM pool_jobs"))


async def test_each_job_is_answered_in_the_batchs_order_as_the_sync_submit_would_answer_it(pool: RunningPool) -> None:
    """Every outcome in one batch: results (the slowest first, so the order is the batch's, not the finishing
    order), refusals that queued nothing, a failed and a timed-out job, one still running when its wait ran out."""
    entries = await run_batch(
        pool,
        {"machine_type": "sleepy", "payload": b64(b'{"seconds": 0.5}')},
        {"machine_type": "local", "payload": b64(BINARY), "priority": 2**62 + 1, "session_id": "nb-1"},
        {"machine_type": "no-such-type", "payload": b64(b"x")},
        {"machine_type": "local", "wait_seconds": -1},
        {"machine_type": "failing", "payload": b64(b"x")},
        {"machine_type": "sleepy", "payload": b64(b'{"seconds": 5}'), "timeout_seconds": 0.3},
        {"machine_type": "sleepy", "payload": b64(b'{"seconds": 1}'), "wait_seconds": 0.1},
        {"machine_type": "local"},
    )
    assert [e["status"] for e in entries] == [200, 200, 400, 422, 502, 504, 202, 200]
    slept, binary, unknown, bad_wait, failed, timed_out, running, empty = entries
    assert base64.b64decode(slept["result"]) == b"slept 0.5" and set(slept) == {"status", "job_id", "result"}
    assert base64.b64decode(binary["result"]) == BINARY
    assert base64.b64decode(empty["result"]) == b""
    assert unknown == {"status": 400, "job_id": None, "detail": "unknown machine type: 'no-such-type'"}
    assert bad_wait["job_id"] is None and bad_wait["detail"].startswith("wait_seconds: must be a positive finite")
    for entry, state in ((failed, "failed"), (timed_out, "timed_out")):
        assert set(entry) == {"status", "job_id", "job"} and set(entry["job"]) == JOB_FIELDS
        assert (entry["job_id"], entry["job"]["state"]) == (entry["job"]["id"], state)
    assert "cell raised" in failed["job"]["error"]
    assert running["job"]["state"] in ("queued", "dispatched", "running")
    assert (await pool.finished(running["job_id"])).state == "completed"
    job_ids = [e["job_id"] for e in entries if e["job_id"] is not None]
    assert len(set(job_ids)) == 6 == await job_rows(pool)  # the two refusals queued nothing
    stored = await pool.job(binary["job_id"])
    assert (stored.priority, stored.session_id, stored.tenant_id) == (2**62 + 1, "nb-1", "acme")


async def test_a_payload_over_the_limit_is_its_jobs_413_and_the_other_jobs_run(pool_store: Store) -> None:
    """The limit at the seed's 16 MiB floor, so one payload over it fits a batch's message as base64."""
    limit = 16 * 1024 * 1024
    async with start_pool(pool_store, pool_env(CATALOGUE, POOL_MAX_PAYLOAD_BYTES=str(limit))) as pool:
        entries = await run_batch(
            pool,
            {"machine_type": "local", "payload": b64(b"\x00" * (limit + 1))},
            {"machine_type": "local", "payload": b64(b"small")},
        )
        assert entries[0] == {
            "status": 413,
            "job_id": None,
            "detail": f"payload of {limit + 1} bytes is over the limit of {limit}",
        }
        assert (entries[1]["status"], base64.b64decode(entries[1]["result"])) == (200, b"small")
        assert await job_rows(pool) == 1


@pytest.mark.parametrize(
    ("body", "detail"),
    [
        pytest.param(b"", "body: empty; a JSON object is expected", id="empty"),
        pytest.param(b'{"jobs": []}', "body.jobs: empty; a batch holds at least one job", id="no-jobs"),
        pytest.param(b'{"job": []}', "body.job: unknown field; known: jobs", id="misspelt"),
        pytest.param(
            b'{"jobs": [{"machine_type": "local"}, {"machine_type": "local"}, {"machine_type": "local", "bogus": 1}]}',
            "body.jobs[2].bogus: unknown field; known: machine_type, payload, priority, session_id, timeout_seconds, "
            "wait_seconds",
            id="a-later-job-wrong",
        ),
        pytest.param(
            b'{"jobs": [{"machine_type": "local"}, {"machine_type": "local", "payload": "aGk"}]}',
            "body.jobs[1].payload: must be base64 (RFC 4648, standard alphabet, padded)",
            id="bad-base64",
        ),
        pytest.param(
            b'{"jobs": [' + b'{"machine_type": "local"}, ' * 64 + b'{"machine_type": "local"}]}',
            "body.jobs: 65 jobs is over the limit of 64 per batch",
            id="over-the-job-limit",
        ),
    ],
)
async def test_a_body_error_is_400_naming_it_and_no_job_of_the_batch_is_queued(
    pool: RunningPool, body: bytes, detail: str
) -> None:
    assert await refused(pool, raw_batch(body), caller()) == (grpc.StatusCode.INVALID_ARGUMENT, detail, "400")
    assert await job_rows(pool) == 0


BAD_BODY = raw_batch(b'{"jobs": [{"bogus": 1}]}')


@pytest.mark.parametrize(
    ("metadata", "code", "http", "detail"),
    [
        pytest.param(caller(tenant=None, token=None), grpc.StatusCode.UNAUTHENTICATED, "401", "bearer", id="no-token"),
        pytest.param(caller(token="wrong"), grpc.StatusCode.UNAUTHENTICATED, "401", "bearer", id="wrong-token"),
        pytest.param(caller(tenant=None), grpc.StatusCode.INVALID_ARGUMENT, "400", "X-Strata-Tenant", id="no-tenant"),
        pytest.param(caller(), grpc.StatusCode.INVALID_ARGUMENT, "400", "body.jobs[0].bogus", id="then-the-body"),
    ],
)
async def test_the_token_is_checked_before_the_tenant_header_before_the_body(
    pool: RunningPool, metadata: tuple[tuple[str, str], ...], code: grpc.StatusCode, http: str, detail: str
) -> None:
    answered = await refused(pool, BAD_BODY, metadata)
    assert (answered[0], answered[2]) == (code, http)
    assert detail in answered[1]
    assert await job_rows(pool) == 0


async def test_the_admin_token_is_accepted_as_the_api_token_and_the_tenant_header_is_still_required(
    pool: RunningPool,
) -> None:
    """As SubmitJobSync: the admin token runs a batch for the tenant the header names, and without the header it
    is the same 400."""
    no_tenant = await refused(pool, batch_of({"machine_type": "local"}), caller(tenant=None, token=ADMIN_TOKEN))
    assert no_tenant == (grpc.StatusCode.INVALID_ARGUMENT, "the X-Strata-Tenant header is required", "400")
    with pytest.raises(grpc.aio.AioRpcError) as unary:
        await pool.stub.SubmitJobSync(
            pool_pb2.SubmitJobSyncRequest(machine_type="local"), metadata=caller(tenant=None, token=ADMIN_TOKEN)
        )
    assert (unary.value.code(), unary.value.details()) == no_tenant[:2]
    [entry] = await run_batch(
        pool, {"machine_type": "local", "payload": b64(b"admin's")}, metadata=caller("globex", ADMIN_TOKEN)
    )
    assert base64.b64decode(entry["result"]) == b"admin's"
    assert (await pool.job(entry["job_id"], tenant="globex")).tenant_id == "globex"


SECRET = "postgres://pool:hunter2@db"  # what an unexpected error's text may hold


@pytest.mark.parametrize("step", ["submit", "wait_finished"])
async def test_an_unexpected_error_in_one_job_is_that_entrys_500_alone_and_the_others_run(
    pool: RunningPool, step: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The dispatcher fails the submit (nothing queued: job_id null) or the wait (queued: the entry names the job,
    which runs to its end) of the job whose payload is b"boom": its entry is 500 saying only that the pool logged
    an internal error; the log has its place in the batch, the job's id and the error; the other jobs ran."""
    d = pool.dispatcher
    real_submit, real_wait = d.submit, d.waits.wait_finished
    boom: list[str] = []

    async def submit(**kwargs: Any) -> Any:
        if kwargs["payload"] == b"boom" and step == "submit":
            raise RuntimeError(f"the store said no: {SECRET}")
        job = await real_submit(**kwargs)
        if kwargs["payload"] == b"boom":
            boom.append(job.id)
        return job

    async def wait_finished(job: Any, timeout: float) -> Any:
        finished = await real_wait(job, timeout)
        if job.id in boom:  # the job ran: only the answer's way back fails
            raise RuntimeError(f"the store said no: {SECRET}")
        return finished

    monkeypatch.setattr(d, "submit", submit)
    monkeypatch.setattr(d.waits, "wait_finished", wait_finished)
    with caplog.at_level(logging.ERROR, logger="thermostat.pool_dispatcher.servicer"):
        entries = await run_batch(
            pool,
            {"machine_type": "local", "payload": b64(b"first")},
            {"machine_type": "local", "payload": b64(b"boom")},
            {"machine_type": "local", "payload": b64(b"third")},
        )
    first, failed, third = entries
    assert [base64.b64decode(e["result"]) for e in (first, third)] == [b"first", b"third"]
    assert "hunter2" not in json.dumps(entries)
    if step == "submit":
        assert failed == {"status": 500, "job_id": None, "detail": INTERNAL_ERROR}
        assert "RunJobsJson: job (none queued) (jobs[1]) failed in the pool" in caplog.text
        assert await job_rows(pool) == 2
    else:
        assert failed == {"status": 500, "job_id": boom[0], "detail": INTERNAL_ERROR}
        assert (await pool.finished(boom[0])).state == "completed"
        assert f"RunJobsJson: job {boom[0]} (jobs[1]) failed in the pool" in caplog.text
        assert await job_rows(pool) == 3
    assert "hunter2" in caplog.text  # the error is the operator's to read, in the pool's log


async def test_a_caller_that_cancels_the_call_stops_its_waits_and_its_jobs_run_to_their_end(
    pool_store: Store,
) -> None:
    held = Held()
    async with start_pool(pool_store, pool_env(CATALOGUE), seams=[before_execute(held)]) as pool:
        call = pool.stub.RunJobsJson(
            batch_of({"machine_type": "local", "payload": b64(b"a")}, {"machine_type": "local", "payload": b64(b"b")}),
            metadata=caller(),
        )

        async def both_waiting() -> bool | None:
            return True if len(pool.dispatcher.waits.waiters.waiting) == 2 else None

        await eventually(both_waiting, timeout=30, every=0.01)
        call.cancel()

        async def waits_gone() -> bool | None:
            return True if not pool.dispatcher.waits.waiters.waiting else None

        await eventually(waits_gone, timeout=10, every=0.01)
        held.release.set()
        rows = [r["id"] for r in await pool.dispatcher.repo.pool.fetch("SELECT id::text AS id FROM pool_jobs")]
        assert len(rows) == 2
        for job_id in rows:
            assert (await pool.finished(job_id)).state == "completed"
        assert sorted(e.job_id for e in await pool.usage()) == sorted(rows)


@contextlib.asynccontextmanager
async def answers_of(pool: RunningPool, **limits: int) -> AsyncIterator[pool_pb2_grpc.PoolDispatcherStub]:
    """A stub of a second server over the pool's dispatcher whose servicer answers batches within `limits`."""
    servicer = PoolDispatcherServicer(pool.dispatcher, **limits)
    host = ServiceHost(
        ServiceSpec(
            name="pool-small-answers",
            service_names=[pool_pb2.DESCRIPTOR.services_by_name["PoolDispatcher"].full_name],
            register=lambda server: pool_pb2_grpc.add_PoolDispatcherServicer_to_server(servicer, server),
            auth_rules=auth_rules(Tokens(api=API_TOKEN, admin=ADMIN_TOKEN)),
            tenant_rules=tenant_rules(),
        )
    )
    port = await host.start("127.0.0.1", 0)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            yield pool_pb2_grpc.PoolDispatcherStub(channel)
    finally:
        await host.stop(1.0)


async def test_results_past_the_answers_budget_are_left_out_and_read_by_their_job_ids(pool: RunningPool) -> None:
    """The answer is one message however much the workers return. With a budget of 16 base64 bytes the first two
    results (8 each) fill it; the third is answered with its job and where to read its result; an empty one after
    it is still carried."""
    async with answers_of(pool, batch_result_bytes=16) as stub:
        answer = await stub.RunJobsJson(
            batch_of(*({"machine_type": "local", "payload": b64(p)} for p in (b"aaaa", b"bbbb", b"cccc", b""))),
            metadata=caller(),
        )
    first, second, left_out, empty = json.loads(answer.data)
    assert [base64.b64decode(e["result"]) for e in (first, second, empty)] == [b"aaaa", b"bbbb", b""]
    assert set(left_out) == {"status", "job_id", "job", "detail"} and left_out["status"] == 200
    assert (left_out["job"]["state"], left_out["job"]["has_result"], left_out["job_id"]) == (
        "completed",
        True,
        left_out["job"]["id"],
    )
    assert left_out["detail"] == (
        "result of 4 bytes left out: a batch's answer carries at most 16 bytes of base64 results; "
        f"read it with GET /v1/jobs/{left_out['job_id']}/result"
    )
    result = await pool.stub.GetJobResult(pool_pb2.GetJobResultRequest(id=left_out["job_id"]), metadata=caller())
    assert result.data == b"cccc"


async def test_an_answer_whose_other_fields_outgrow_their_share_carries_fewer_results_until_it_fits(
    pool: RunningPool,
) -> None:
    """The results' budget alone would carry all three 3,000-byte results (12,000 base64 bytes), but the answer may
    be at most 9,000 bytes: it carries the first two and answers the third with its job and where to read it."""
    payloads = [bytes([n]) * 3000 for n in (1, 2, 3)]
    async with answers_of(pool, batch_result_bytes=1_000_000, batch_answer_bytes=9000) as stub:
        answer = await stub.RunJobsJson(
            batch_of(*({"machine_type": "local", "payload": b64(p)} for p in payloads)), metadata=caller()
        )
    assert len(answer.data) <= 9000
    first, second, left_out = json.loads(answer.data)
    assert [base64.b64decode(e["result"]) for e in (first, second)] == payloads[:2]
    assert "result" not in left_out and left_out["detail"].startswith("result of 3000 bytes left out")
    result = await pool.stub.GetJobResult(pool_pb2.GetJobResultRequest(id=left_out["job_id"]), metadata=caller())
    assert result.data == payloads[2]


async def test_a_slow_last_read_still_answers_before_the_calls_deadline(
    pool: RunningPool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The wait cut short by the deadline reads its job once more before answering: on a loaded store that read
    takes a while (here 0.25 s, longer than the old 50 ms margin), and the 202 naming the job still arrives."""
    read = pool.dispatcher.repo.jobs.get_job_result

    async def slow_read(job_id: str, tenant_id: str) -> Any:
        await asyncio.sleep(0.25)
        return await read(job_id, tenant_id)

    monkeypatch.setattr(pool.dispatcher.repo.jobs, "get_job_result", slow_read)
    entries_answer = await pool.stub.RunJobsJson(
        batch_of({"machine_type": "sleepy", "payload": b64(b'{"seconds": 30}'), "wait_seconds": 60}),
        metadata=caller(),
        timeout=3,
    )
    (slow,) = json.loads(entries_answer.data)
    assert slow["status"] == 202 and slow["job"]["state"] in ("queued", "dispatched", "running")


async def test_the_calls_deadline_bounds_every_jobs_wait(pool: RunningPool) -> None:
    """A direct gRPC caller's deadline (here 3 s) cuts each job's wait short of its own wait_seconds: the call
    answers in time, the slow job's entry a 202 with the job still running, the quick one's (on a machine warmed
    first) its result."""
    assert [e["status"] for e in await run_batch(pool, {"machine_type": "local"})] == [200]
    entries_answer = await pool.stub.RunJobsJson(
        batch_of(
            {"machine_type": "sleepy", "payload": b64(b'{"seconds": 5}'), "wait_seconds": 60},
            {"machine_type": "local", "payload": b64(b"quick"), "wait_seconds": 60},
        ),
        metadata=caller(),
        timeout=3,
    )
    slow, quick = json.loads(entries_answer.data)
    assert slow["status"] == 202 and slow["job"]["state"] in ("queued", "dispatched", "running")
    assert (quick["status"], base64.b64decode(quick["result"])) == (200, b"quick")
