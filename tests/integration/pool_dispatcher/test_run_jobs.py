"""RunJobs: many sync jobs over one gRPC stream, each answered once by its tag as SubmitJobSync would answer it.

Real gRPC over loopback, the test's own database, reference workers as child processes. The stream checks auth
once, as the unary calls do; a refused request is answered and the stream goes on; at most its cap of requests
is in flight; a half-close drains; a cancelled stream stops its waits while its jobs run on.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

import grpc
import pytest

from tests.fixtures.polling import eventually
from tests.integration.pool_dispatcher.conftest import (
    ADMIN_TOKEN,
    API_TOKEN,
    RunningPool,
    caller,
    local_type,
    pool_env,
    sleepy_type,
    start_pool,
)
from tests.integration.pool_dispatcher.seams import before_execute
from thermostat.chassis.server import ServiceHost, ServiceSpec
from thermostat.pool.v1 import pool_pb2, pool_pb2_grpc
from thermostat.pool_dispatcher.access import Tokens, auth_rules, tenant_rules
from thermostat.pool_dispatcher.servicer import PoolDispatcherServicer
from thermostat.pool_dispatcher.settings import MAX_PAYLOAD_BYTES
from thermostat.store.db import Store

RUN_JOBS = "/thermostat.pool.v1.PoolDispatcher/RunJobs"
CATALOGUE = [
    local_type("local", max_workers=2),
    local_type("failing", env={"STRATA_WORKER_HANDLER": "fail", "STRATA_WORKER_FAIL_MESSAGE": "cell raised"}),
    sleepy_type("sleepy", max_workers=2),
]


def job(tag: int, payload: bytes = b"x", machine_type: str = "local", **options: str) -> pool_pb2.RunJobsRequest:
    request = pool_pb2.RunJobsRequest(
        tag=tag, job=pool_pb2.SubmitJobSyncRequest(machine_type=machine_type, **{"wait_seconds": "60", **options})
    )
    request.job.payload.data = payload
    return request


@pytest.fixture
async def pool(pool_store: Store) -> AsyncIterator[RunningPool]:
    async with start_pool(pool_store, pool_env(CATALOGUE)) as running:
        yield running


async def job_rows(pool: RunningPool) -> int:
    return int(await pool.dispatcher.repo.pool.fetchval("SELECT count(*) FROM pool_jobs"))


async def test_many_jobs_over_one_stream_complete_exactly_once_each_with_its_own_payload(pool: RunningPool) -> None:
    payloads = {tag: f'{{"job": {tag}}}'.encode() for tag in range(1, 41)}
    call = pool.stub.RunJobs(iter([job(tag, data) for tag, data in payloads.items()]), metadata=caller())
    answers = [response async for response in call]
    assert sorted(a.tag for a in answers) == sorted(payloads)  # each tag answered once
    assert all(a.WhichOneof("outcome") == "result" and a.result == payloads[a.tag] for a in answers)
    assert len({a.job_id for a in answers}) == len(payloads)
    assert await call.code() == grpc.StatusCode.OK
    usage = await pool.usage()
    assert sorted(e.job_id for e in usage) == sorted(a.job_id for a in answers)
    assert {e.terminal_state for e in usage} == {"completed"}


async def test_mixed_outcomes_on_one_stream_are_each_answered_and_the_stream_goes_on(pool: RunningPool) -> None:
    """One request at a time, each answered before the next is written: the stream survives every refusal."""
    call = pool.stub.RunJobs(metadata=caller())

    async def ask(request: pool_pb2.RunJobsRequest) -> pool_pb2.RunJobsResponse:
        await call.write(request)
        response: pool_pb2.RunJobsResponse = await call.read()
        assert response.tag == request.tag
        return response

    bad_priority = await ask(job(1, priority="soon"))
    assert (
        bad_priority.error.code == grpc.StatusCode.INVALID_ARGUMENT.value[0] and "priority" in bad_priority.error.detail
    )
    assert not bad_priority.job_id
    unknown = await ask(job(2, machine_type="no-such-type"))
    assert unknown.error.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert unknown.error.detail == "unknown machine type: 'no-such-type'"
    oversized = await ask(job(3, b"x" * (MAX_PAYLOAD_BYTES + 1)))
    assert oversized.error.code == grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]
    assert str(MAX_PAYLOAD_BYTES) in oversized.error.detail
    failed = await ask(job(4, machine_type="failing"))
    assert failed.job.state == "failed" and "cell raised" in failed.job.error and failed.job_id == failed.job.id
    timed_out = await ask(job(5, b'{"seconds": 5}', machine_type="sleepy", timeout_seconds="0.3"))
    assert timed_out.job.state == "timed_out" and timed_out.job_id == timed_out.job.id
    running = await ask(job(6, b'{"seconds": 1}', machine_type="sleepy", wait_seconds="0.1"))
    assert running.job.state in ("queued", "dispatched", "running") and running.job_id == running.job.id
    ok = await ask(job(7, b"still here"))
    assert ok.result == b"still here" and ok.job_id
    await call.done_writing()
    assert await call.read() == grpc.aio.EOF
    assert await call.code() == grpc.StatusCode.OK
    assert (await pool.finished(running.job_id)).state == "completed"
    assert await job_rows(pool) == 4  # the refused requests queued nothing


SECRET = "postgres://pool:hunter2@db"  # what an unexpected error's text may hold


@pytest.mark.parametrize("step", ["submit", "wait_finished"])
async def test_an_unexpected_error_answers_its_own_tag_with_no_detail_and_the_stream_goes_on(
    pool: RunningPool, step: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The dispatcher fails one job's submit (nothing queued: no job id) or its wait (queued: the answer names the
    job, to follow with GetJob): that message is answered by its tag, UNKNOWN as the unary call ends, saying only
    that the pool logged an internal error; the log has the job's id and the error; the next message runs."""
    d = pool.dispatcher
    part = d if step == "submit" else d.waits  # the facade's submit, the waits' wait_finished
    real = getattr(part, step)
    failures: list[str] = []

    async def fails_once(*args: object, **kwargs: object) -> object:
        if not failures:
            failures.append(step)
            if step == "wait_finished":
                await real(*args, **kwargs)  # the job ran: only the answer's way back fails
            raise RuntimeError(f"the store said no: {SECRET}")
        return await real(*args, **kwargs)

    monkeypatch.setattr(part, step, fails_once)
    call = pool.stub.RunJobs(metadata=caller())
    with caplog.at_level(logging.ERROR, logger="thermostat.pool_dispatcher.servicer"):
        await call.write(job(7, b"first"))
        failed: pool_pb2.RunJobsResponse = await call.read()
    assert (failed.tag, failed.error.code) == (7, grpc.StatusCode.UNKNOWN.value[0])
    assert failed.error.detail == "internal error (logged by pool-dispatcher)" and "hunter2" not in str(failed)
    rows = [r["id"] for r in await d.repo.pool.fetch("SELECT id::text AS id FROM pool_jobs")]
    if step == "submit":
        assert (failed.job_id, rows) == ("", [])
        assert "RunJobs: job (none queued) (tag 7) failed in the pool" in caplog.text
    else:
        assert [failed.job_id] == rows
        assert (await pool.finished(failed.job_id)).state == "completed"
        assert f"RunJobs: job {failed.job_id} (tag 7) failed in the pool" in caplog.text
    assert "hunter2" in caplog.text  # the error is the operator's to read, in the pool's log
    await call.write(job(8, b"second"))
    after: pool_pb2.RunJobsResponse = await call.read()
    assert (after.tag, after.result) == (8, b"second")
    await call.done_writing()
    assert await call.code() == grpc.StatusCode.OK


def refused_without_a_request(
    address: str, metadata: tuple[tuple[str, str], ...]
) -> tuple[grpc.StatusCode, dict[str, str]]:
    """A RunJobs call that writes nothing, nor half-closes, until it has ended: its status and the initial metadata
    the pool sent. Read with grpc's threaded client: grpc.aio's starts reading a stream's initial metadata only once
    its own headers are sent, and a status processed before that fills the metadata in as empty (call.pyx.pxi's
    `_set_status`), although the headers were on the wire; the threaded client asks for both at once and waits for
    the headers' own event."""
    ended = threading.Event()

    def nothing() -> Iterator[bytes]:
        ended.wait(30)
        yield from ()

    with grpc.insecure_channel(address) as channel:
        run_jobs = channel.stream_stream(
            RUN_JOBS, request_serializer=lambda data: data, response_deserializer=pool_pb2.RunJobsResponse.FromString
        )
        call = run_jobs(nothing(), metadata=metadata)
        try:
            return call.code(), {k: v for k, v in call.initial_metadata() or () if isinstance(v, str)}
        finally:
            ended.set()


@pytest.mark.parametrize(
    ("metadata", "code"),
    [
        pytest.param(caller(tenant=None, token=None), grpc.StatusCode.UNAUTHENTICATED, id="no-token-before-tenant"),
        pytest.param(caller(token="not-the-token"), grpc.StatusCode.UNAUTHENTICATED, id="wrong-token"),
        pytest.param(caller(tenant=None), grpc.StatusCode.INVALID_ARGUMENT, id="missing-tenant"),
    ],
)
async def test_auth_ends_the_stream_before_any_request_is_read_with_the_unary_codes(
    pool: RunningPool, metadata: tuple[tuple[str, str], ...], code: grpc.StatusCode
) -> None:
    ended, headers = await asyncio.to_thread(refused_without_a_request, pool.address, metadata)
    assert ended == code
    http = "401" if code is grpc.StatusCode.UNAUTHENTICATED else "400"
    assert headers.get("x-http-code") == http  # in the response's headers, as a unary refusal sends it
    with pytest.raises(grpc.aio.AioRpcError) as unary:
        await pool.stub.SubmitJobSync(pool_pb2.SubmitJobSyncRequest(machine_type="local"), metadata=metadata)
    assert unary.value.code() == code


async def test_the_admin_token_is_accepted_as_the_api_token(pool: RunningPool) -> None:
    call = pool.stub.RunJobs(iter([job(9, b"admin's")]), metadata=caller(token=ADMIN_TOKEN))
    [answer] = [response async for response in call]
    assert (answer.tag, answer.result) == (9, b"admin's")


async def test_the_text_field_check_answers_each_bad_message_and_the_stream_goes_on(pool: RunningPool) -> None:
    """A NUL (parses, refused) and text that is not UTF-8 (does not parse: the rest of the message is read for
    its tag) are each answered naming the field; a message of which nothing parses ends the stream."""
    raw = pool.channel.stream_stream(
        RUN_JOBS, request_serializer=lambda data: data, response_deserializer=pool_pb2.RunJobsResponse.FromString
    )
    call = raw(metadata=caller())

    async def ask(data: bytes) -> pool_pb2.RunJobsResponse:
        await call.write(data)
        response: pool_pb2.RunJobsResponse = await call.read()
        return response

    nul = await ask(job(1, session_id="a\x00b").SerializeToString())
    assert (nul.tag, nul.error.code) == (1, grpc.StatusCode.INVALID_ARGUMENT.value[0])
    assert nul.error.detail == "job.session_id: must not contain a NUL character (U+0000)"
    marker = "mt-\u00e9"
    not_utf8 = job(2, machine_type=marker).SerializeToString().replace(marker.encode(), b"mt-\xff\xfe")
    bad = await ask(not_utf8)
    assert (bad.tag, bad.error.code) == (2, grpc.StatusCode.INVALID_ARGUMENT.value[0])
    assert bad.error.detail == "job.machine_type: is not valid UTF-8"
    good = await ask(job(3, b"after").SerializeToString())
    assert (good.tag, good.result) == (3, b"after")
    assert await job_rows(pool) == 1
    await call.write(b"\xff\xff\xff")  # not a RunJobsRequest at all: no tag to answer by
    assert await call.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "not a valid message" in await call.details()


async def test_a_half_close_drains_every_outstanding_job_then_ends_the_stream(pool: RunningPool) -> None:
    call = pool.stub.RunJobs(metadata=caller())
    for tag in range(1, 7):
        await call.write(job(tag, b'{"seconds": 0.2}', machine_type="sleepy"))
    await call.done_writing()  # before any answer came back
    answers = []
    while (response := await call.read()) != grpc.aio.EOF:
        answers.append(response)
    assert sorted(a.tag for a in answers) == list(range(1, 7))
    assert {a.WhichOneof("outcome") for a in answers} == {"result"}
    assert await call.code() == grpc.StatusCode.OK
    assert len(await pool.usage()) == 6


class Held:
    """Holds every job at the worker call (the dispatcher's before_execute seam) until released."""

    def __init__(self) -> None:
        self.arrived = asyncio.Event()
        self.release = asyncio.Event()

    async def __call__(self, job_id: str) -> None:
        self.arrived.set()
        await self.release.wait()


@pytest.mark.parametrize("unary", [False, True], ids=["stream", "unary"])
async def test_a_cancelled_stream_stops_its_waits_and_its_jobs_run_on_as_a_gone_unary_callers_do(
    pool_store: Store, unary: bool
) -> None:
    """RunJobs beside the unary SubmitJobSync: a caller that goes away leaves its job running to its end (one usage
    event) and nothing of this process waiting for it."""
    held = Held()
    async with start_pool(pool_store, pool_env(CATALOGUE), seams=[before_execute(held)]) as pool:
        if unary:
            request = job(1).job
            call: grpc.aio.Call = pool.stub.SubmitJobSync(request, metadata=caller())
        else:
            stream = pool.stub.RunJobs(metadata=caller())
            await stream.write(job(1))
            call = stream
        await held.arrived.wait()
        assert len(pool.dispatcher.waits.waiters.waiting) == 1  # the call's wait
        call.cancel()

        async def waits_gone() -> bool | None:
            return True if not pool.dispatcher.waits.waiters.waiting else None

        await eventually(waits_gone, timeout=10, every=0.01)
        held.release.set()
        [row] = await pool.dispatcher.repo.pool.fetch("SELECT id::text AS id FROM pool_jobs")
        assert (await pool.finished(row["id"])).state == "completed"
        assert [e.job_id for e in await pool.usage()] == [row["id"]]


async def serve_capped(
    pool: RunningPool, cap: int, full: Callable[[], Awaitable[None]]
) -> tuple[ServiceHost, pool_pb2_grpc.PoolDispatcherStub, grpc.aio.Channel]:
    """A second server (the chassis's, with its interceptors) over the pool's dispatcher, its streams capped."""
    servicer = PoolDispatcherServicer(pool.dispatcher, stream_jobs=cap, stream_full=full)
    host = ServiceHost(
        ServiceSpec(
            name="pool-capped",
            service_names=[pool_pb2.DESCRIPTOR.services_by_name["PoolDispatcher"].full_name],
            register=lambda server: pool_pb2_grpc.add_PoolDispatcherServicer_to_server(servicer, server),
            auth_rules=auth_rules(Tokens(api=API_TOKEN, admin=ADMIN_TOKEN)),
            tenant_rules=tenant_rules(),
        )
    )
    port = await host.start("127.0.0.1", 0)
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    return host, pool_pb2_grpc.PoolDispatcherStub(channel), channel


async def test_the_in_flight_cap_holds_the_reading_of_requests_until_an_answer_goes_out(pool_store: Store) -> None:
    """Cap 3, every job held at its worker: the stream's reader stops at the cap with 3 jobs created, the other
    requests unread; released, every request is answered once."""
    held = Held()
    at_cap = asyncio.Event()
    times_full = 0

    async def full() -> None:
        nonlocal times_full
        times_full += 1
        at_cap.set()

    async with start_pool(pool_store, pool_env(CATALOGUE), seams=[before_execute(held)]) as pool:
        host, stub, channel = await serve_capped(pool, 3, full)
        try:
            call = stub.RunJobs(iter([job(tag, str(tag).encode()) for tag in range(1, 8)]), metadata=caller())
            answers = asyncio.ensure_future(_collect(call))
            await asyncio.wait_for(at_cap.wait(), 30)  # the reader holds 3 slots and waits for a fourth

            async def three_created() -> bool | None:
                return True if await job_rows(pool) == 3 else None

            await eventually(three_created, timeout=10, every=0.01)
            await held.arrived.wait()  # a job reached its worker and is held there: no answer can go out
            assert (await job_rows(pool), times_full, answers.done()) == (3, 1, False)
            held.release.set()
            answered = await answers
            assert sorted((a.tag, a.result) for a in answered) == [(t, str(t).encode()) for t in range(1, 8)]
            assert await job_rows(pool) == 7
        finally:
            await channel.close()
            await host.stop(1.0)


async def _collect(call: grpc.aio.StreamStreamCall) -> list[pool_pb2.RunJobsResponse]:
    return [response async for response in call]
