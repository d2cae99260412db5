"""With OpenTelemetry's SDK recording, a job's trace: the SubmitJob server span under the caller's, and under
it pool.queue, pool.boot (the provider's start and the health polls inside) and pool.execute, whose HTTP span
is the traceparent the worker receives."""

from __future__ import annotations

import sys
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode

from tests.fixtures.polling import eventually
from tests.fixtures.tracing import Spans, hex_id, names, parent_of
from tests.integration.pool_dispatcher.conftest import caller, local_type, pool_env, start_pool
from thermostat.pool.v1 import pool_pb2
from thermostat.providers.pool.http1 import Answer
from thermostat.providers.pool.worker_client import WorkerClient
from thermostat.store.db import Store

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{CALLER_SPAN}-01"
SUBMIT_SYNC = "thermostat.pool.v1.PoolDispatcher/SubmitJobSync"
SUBMIT = "thermostat.pool.v1.PoolDispatcher/SubmitJob"


def in_the_callers_trace(span: ReadableSpan) -> bool:
    return hex_id(span.context.trace_id, 32) == TRACE_ID


def under(span: ReadableSpan, parent: ReadableSpan) -> bool:
    return span.parent is not None and span.parent.span_id == parent.context.span_id


async def test_queue_boot_and_execute_sit_under_the_submit_and_the_worker_receives_the_hops_context(
    pool_store: Store, spans: Spans
) -> None:
    async with start_pool(pool_store, pool_env([local_type()])) as pool:
        echoed = _worker_echoes(pool.dispatcher.client)
        request = pool_pb2.SubmitJobSyncRequest(machine_type="local", wait_seconds="60")
        request.payload.data = b"traced"
        call = pool.stub.SubmitJobSync(request, metadata=caller(traceparent=TRACEPARENT, tracestate="k=v"))
        assert (await call).data == b"traced"
        submit, queue, boot, execute = await spans.wait_for(SUBMIT_SYNC, "pool.queue", "pool.boot", "pool.execute")
        everything = spans.all()
        assert all(in_the_callers_trace(s) for s in everything)
        assert submit.kind is SpanKind.SERVER and hex_id(submit.parent.span_id) == CALLER_SPAN
        assert all(under(s, submit) for s in (queue, boot, execute))
        assert boot.status.status_code is StatusCode.UNSET
        # the worker hop: one POST /execute under pool.execute, and its context is what the machine was sent
        [hop] = [s for s in everything if s.name == "POST" and under(s, execute)]
        assert hop.kind is SpanKind.CLIENT and hop.attributes["url.full"].endswith("/execute")
        assert hop.attributes["http.response.status_code"] == 200
        assert [names(e) for e in echoed] == [(hop.context.trace_id, hop.context.span_id)]
        # the boot's health polls are its children, not stray traces
        polls = [s for s in everything if s.name == "GET" and s.attributes["url.full"].endswith("/health")]
        assert polls and all(under(p, boot) for p in polls)
        job_id = execute.attributes["pool.job_id"]
        row = await pool_store.pool.fetchrow("SELECT submitted_at FROM pool_jobs WHERE id = $1::uuid", job_id)
        # pool.queue: from the submit (database clock) to the dispatch; pool.execute after it, around the call
        assert queue.start_time == int(row["submitted_at"].timestamp() * 1_000_000_000)
        assert queue.end_time <= execute.start_time <= hop.start_time <= hop.end_time <= execute.end_time
        assert boot.end_time <= queue.end_time  # the machine answered before the job was sent to it
        assert execute.context.trace_state.get("k") == "v"
        assert parent_of(submit, everything) is None  # the caller's own span is not this process's


def _worker_echoes(client: WorkerClient) -> list[str]:
    """The traceparent each /execute reached the worker with, as the reference worker echoes it back."""
    echoed: list[str] = []
    request = client._http.request

    async def requesting(endpoint: str, method: str, path: str, *args: Any, **kwargs: Any) -> Answer:
        answer = await request(endpoint, method, path, *args, **kwargs)
        if path == "/execute":
            headers = {name.lower(): value for name, value in answer.headers}
            echoed.append(headers.get(b"x-strata-received-traceparent", b"").decode())
        return answer

    client._http.request = requesting  # type: ignore[method-assign]
    return echoed


async def test_a_failed_boot_is_an_error_span_under_the_submit_of_the_job_first_in_line(
    pool_store: Store, spans: Spans
) -> None:
    async with start_pool(pool_store, pool_env([local_type(image="no-such-worker-binary")])) as pool:
        request = pool_pb2.SubmitJobRequest(machine_type="local")
        request.payload.data = b"x"
        await pool.stub.SubmitJob(request, metadata=caller(traceparent=TRACEPARENT))
        submit, boot = await spans.wait_for(SUBMIT, "pool.boot")
        assert under(boot, submit) and in_the_callers_trace(boot)
        assert boot.status.status_code is StatusCode.ERROR and "start failed" in (boot.status.description or "")
        assert spans.named("pool.execute") == []


async def test_a_boot_timeout_is_an_error_span_naming_the_timeout_with_its_health_polls_under_it(
    pool_store: Store, spans: Spans
) -> None:
    """The machine starts and never answers its health check: pool.boot ends in error when the type's boot timeout
    passes, under the submit of the job first in line, with every poll inside it; the machine is stopped, nothing
    is executed and the job waits in the queue again."""
    mute = local_type(image=f'{sys.executable} -c "import time; time.sleep(120)"', boot_timeout_seconds=1)
    async with start_pool(pool_store, pool_env([mute])) as pool:
        request = pool_pb2.SubmitJobRequest(machine_type="local")
        request.payload.data = b"x"
        job = await pool.stub.SubmitJob(request, metadata=caller(traceparent=TRACEPARENT))
        submit, boot = await spans.wait_for(SUBMIT, "pool.boot", timeout=15)
        assert under(boot, submit) and in_the_callers_trace(boot)
        assert boot.status.status_code is StatusCode.ERROR
        assert boot.status.description == "no health answer within 1 s"
        assert boot.attributes["pool.machine_type"] == "local"
        assert (boot.end_time - boot.start_time) / 1e9 >= 1  # it lasted the whole boot timeout
        polls = [s for s in spans.all() if s.name == "GET" and s.attributes["url.full"].endswith("/health")]
        assert len(polls) > 1 and all(under(p, boot) for p in polls)
        assert spans.named("pool.execute") == []

        async def stopped_and_requeued() -> bool | None:
            machines = await pool_store.pool.fetchval("SELECT count(*) FROM pool_machines")
            idle = machines == 0 and pool.backend._children == {}
            return True if idle and (await pool.job(job.id)).state == "queued" else None

        await eventually(stopped_and_requeued, timeout=10)


async def test_without_a_recording_sdk_the_callers_context_is_kept_with_the_job_unchanged(
    pool_store: Store,
) -> None:
    """No `spans` fixture: the API alone (or a trace sampled out) records nothing and keeps the caller's headers."""
    async with start_pool(pool_store, pool_env([local_type()])) as pool:
        request = pool_pb2.SubmitJobRequest(machine_type="local")
        request.payload.data = b"x"
        job = await pool.stub.SubmitJob(request, metadata=caller(traceparent=TRACEPARENT, tracestate="k=v"))

        async def kept() -> tuple[str, str] | None:
            row = await pool_store.pool.fetchrow(
                "SELECT traceparent, tracestate FROM pool_jobs WHERE id = $1::uuid", job.id
            )
            return (row["traceparent"], row["tracestate"]) if row else None

        assert await eventually(kept) == (TRACEPARENT, "k=v")


async def test_each_job_of_a_run_jobs_stream_sits_under_the_streams_server_span(
    pool_store: Store, spans: Spans
) -> None:
    """The tracing interceptor spans a bidirectional stream once; every job's spans are under it."""
    async with start_pool(pool_store, pool_env([local_type()])) as pool:
        requests = []
        for tag in (1, 2):
            request = pool_pb2.RunJobsRequest(
                tag=tag, job=pool_pb2.SubmitJobSyncRequest(machine_type="local", wait_seconds="60")
            )
            request.job.payload.data = b"traced %d" % tag
            requests.append(request)
        call = pool.stub.RunJobs(iter(requests), metadata=caller(traceparent=TRACEPARENT))
        assert sorted([a.result async for a in call]) == [b"traced 1", b"traced 2"]
        [stream] = await spans.wait_for("thermostat.pool.v1.PoolDispatcher/RunJobs")

        async def both_executed() -> list[ReadableSpan] | None:
            executed = [s for s in spans.all() if s.name == "pool.execute"]
            return executed if len(executed) == 2 else None

        executed = await eventually(both_executed, timeout=10)
        assert stream.kind is SpanKind.SERVER and hex_id(stream.parent.span_id) == CALLER_SPAN
        assert all(under(e, stream) and in_the_callers_trace(e) for e in executed)
