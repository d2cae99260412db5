"""With OpenTelemetry installed, pool.queue, pool.boot and pool.execute spans under the caller's span (from
the job's traceparent / tracestate), read back from the SDK's in-memory exporter; without it, nothing."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from tests.fixtures.polling import eventually
from tests.integration.pool_dispatcher.conftest import caller, local_type, pool_env, start_pool
from thermostat.pool.v1 import pool_pb2
from thermostat.pool_dispatcher import tracing
from thermostat.pool_dispatcher.tracing import PoolTracing
from thermostat.store.db import Store

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{CALLER_SPAN}-01"


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    exported = InMemorySpanExporter()
    yield exported
    exported.clear()


def provider(exporter: InMemorySpanExporter) -> TracerProvider:
    traced = TracerProvider()
    traced.add_span_processor(SimpleSpanProcessor(exporter))
    return traced


def named(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name == name]


def under_the_caller(span: ReadableSpan) -> bool:
    return (
        span.parent is not None
        and format(span.parent.span_id, "016x") == CALLER_SPAN
        and format(span.context.trace_id, "032x") == TRACE_ID
    )


async def test_queue_boot_and_execute_spans_sit_under_the_callers_span(
    pool_store: Store, exporter: InMemorySpanExporter
) -> None:
    async with start_pool(pool_store, pool_env([local_type()]), tracing=PoolTracing(provider(exporter))) as pool:
        request = pool_pb2.SubmitJobSyncRequest(machine_type="local", wait_seconds="60")
        request.payload.data = b"traced"
        call = pool.stub.SubmitJobSync(request, metadata=caller(traceparent=TRACEPARENT, tracestate="k=v"))
        assert (await call).data == b"traced"

        async def three() -> bool | None:
            return True if all(named(exporter, n) for n in ("pool.queue", "pool.boot", "pool.execute")) else None

        await eventually(three, timeout=10)
        [queue], [boot], [execute] = (named(exporter, n) for n in ("pool.queue", "pool.boot", "pool.execute"))
        assert all(under_the_caller(s) for s in (queue, boot, execute))
        assert boot.status.status_code is StatusCode.UNSET
        job_id = execute.attributes["pool.job_id"]
        row = await pool_store.pool.fetchrow(
            "SELECT submitted_at, started_at, completed_at FROM pool_jobs WHERE id = $1::uuid", job_id
        )
        # pool.queue: from the submit (database clock) to the dispatch; pool.execute after it, around the call
        assert queue.start_time == int(row["submitted_at"].timestamp() * 1_000_000_000)
        assert queue.end_time <= execute.start_time <= execute.end_time
        assert boot.end_time <= queue.end_time  # the machine answered before the job was sent to it
        assert execute.context.trace_state.get("k") == "v"


async def test_a_failed_boot_is_an_error_span_under_the_job_first_in_line(
    pool_store: Store, exporter: InMemorySpanExporter
) -> None:
    traced = PoolTracing(provider(exporter))
    async with start_pool(pool_store, pool_env([local_type(image="no-such-worker-binary")]), tracing=traced) as pool:
        request = pool_pb2.SubmitJobRequest(machine_type="local")
        request.payload.data = b"x"
        await pool.stub.SubmitJob(request, metadata=caller(traceparent=TRACEPARENT))
        [boot] = await eventually(lambda: _some(named(exporter, "pool.boot")), timeout=10)
        assert under_the_caller(boot)
        assert boot.status.status_code is StatusCode.ERROR and "start failed" in (boot.status.description or "")
        assert named(exporter, "pool.execute") == []


async def _some(spans: list[ReadableSpan]) -> list[ReadableSpan] | None:
    return spans or None


def test_without_opentelemetry_every_call_is_a_no_op(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tracing, "otel", None)
    off = PoolTracing()
    span = off.start("pool.execute", {"traceparent": TRACEPARENT}, {})
    assert span is None
    assert off.forwarded(span, {"traceparent": TRACEPARENT}) == {"traceparent": TRACEPARENT}
    off.end(span, "ignored")
    off.queued({}, None, {})  # type: ignore[arg-type]  # returns before reading anything
