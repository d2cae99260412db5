"""The worker client: typed replies for every way a call to a worker ends, one wall-clock deadline."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from opentelemetry import trace as otel
from opentelemetry.trace import SpanKind, StatusCode

from tests.fixtures.tracing import Spans, names
from tests.integration.pool.conftest import MACHINE_TOKEN, machine
from thermostat.chassis.ports import free_port
from thermostat.policy.pool.job_outcome import ReplyKind
from thermostat.providers.pool.local import LocalBackend
from thermostat.providers.pool.worker_client import WorkerClient

TRACE = {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "tracestate": "congo=t61rcWkgMzE"}


@contextlib.asynccontextmanager
async def misbehaving_worker(**routes: object) -> AsyncIterator[str]:
    """An in-process HTTP server on a loopback port whose /execute misbehaves as the test needs."""
    app = web.Application()
    for path, route in routes.items():
        app.router.add_post(f"/{path}", route)  # type: ignore[arg-type]
    runner = web.AppRunner(app, handle_signals=False)
    await runner.setup()
    port = free_port()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


async def test_payload_is_forwarded_verbatim_without_content_type_with_trace(
    backend: LocalBackend, client: WorkerClient
) -> None:
    """The payload goes out byte for byte, with no Content-Type, and the trace headers forwarded."""
    payload = bytes(range(256)) * 8192  # 2 MiB: above aiohttp's raw-bytes warning threshold
    async with machine(backend) as handle:
        reply = await client.execute(handle.endpoint, MACHINE_TOKEN, payload, deadline_seconds=30, trace=TRACE)
    assert (reply.kind, reply.status) == (ReplyKind.ANSWERED, 200)
    assert reply.body == payload


async def test_trace_and_content_type_seen_by_the_worker() -> None:
    """What the worker received: the trace headers, and no Content-Type at all."""
    seen: dict[str, str | None] = {}

    async def execute(request: web.Request) -> web.Response:
        seen.update({name: request.headers.get(name) for name in ("traceparent", "tracestate", "Content-Type")})
        return web.Response(body=await request.read())

    async with misbehaving_worker(execute=execute) as url, WorkerClient() as client:
        reply = await client.execute(url, "t", b"{}", deadline_seconds=5, trace={**TRACE, "x-other": "dropped"})
    assert reply.status == 200
    assert seen == {**TRACE, "Content-Type": None}


async def test_inside_a_recorded_trace_the_hop_is_a_client_span_whose_context_the_worker_receives(
    spans: Spans,
) -> None:
    """The hop's own span sits under the current one and replaces the job's traceparent on the wire."""
    seen: dict[str, str | None] = {}

    async def execute(request: web.Request) -> web.Response:
        seen.update({name: request.headers.get(name) for name in ("traceparent", "tracestate")})
        return web.Response(status=503)

    async with misbehaving_worker(execute=execute) as url, WorkerClient() as client:
        with otel.get_tracer("test").start_as_current_span("pool.execute") as job:
            reply = await client.execute(url, "t", b"{}", deadline_seconds=5, trace=TRACE)
        unreachable = await client.execute(f"http://127.0.0.1:{free_port()}", "t", b"", deadline_seconds=5)
    assert reply.status == 503
    assert unreachable.kind is ReplyKind.UNREACHABLE  # outside the trace: no span for it
    [hop] = spans.named("POST")
    assert (
        hop.kind is SpanKind.CLIENT and hop.parent is not None and hop.parent.span_id == job.get_span_context().span_id
    )
    assert hop.attributes == {
        "http.request.method": "POST",
        "server.address": "127.0.0.1",
        "url.full": f"{url}/execute",
        "http.response.status_code": 503,
    }
    assert hop.status.status_code is StatusCode.ERROR  # a 5xx, as an HTTP client span says it
    assert seen["traceparent"] is not None and names(seen["traceparent"]) == (hop.context.trace_id, hop.context.span_id)
    assert seen["traceparent"] != TRACE["traceparent"]


async def test_a_hop_that_fails_inside_a_trace_is_an_error_span_naming_the_failure(spans: Spans) -> None:
    async with WorkerClient() as client:
        with otel.get_tracer("test").start_as_current_span("pool.execute"):
            reply = await client.execute(f"http://127.0.0.1:{free_port()}", "t", b"", deadline_seconds=5)
    assert reply.kind is ReplyKind.UNREACHABLE
    [hop] = spans.named("POST")
    assert (hop.status.status_code, hop.status.description) == (StatusCode.ERROR, "Unreachable")


async def test_worker_error_status_is_an_answer(backend: LocalBackend, client: WorkerClient) -> None:
    """A worker's 500 comes back as an answer with its body (the policy keeps the machine)."""
    async with machine(backend, env={"STRATA_WORKER_HANDLER": "fail"}) as handle:
        reply = await client.execute(handle.endpoint, MACHINE_TOKEN, b"{}", deadline_seconds=10)
    assert (reply.kind, reply.status, reply.body) == (ReplyKind.ANSWERED, 500, b"handler failed")


async def test_deadline_bounds_the_whole_call(backend: LocalBackend, client: WorkerClient) -> None:
    """A job longer than its deadline ends as DEADLINE at the deadline, not at the job's end."""
    async with machine(backend, env={"STRATA_WORKER_HANDLER": "sleep"}) as handle:
        reply = await client.execute(handle.endpoint, MACHINE_TOKEN, b'{"seconds": 30}', deadline_seconds=0.5)
        assert reply.kind is ReplyKind.DEADLINE  # had it waited for the job, it would read ANSWERED 200


async def test_deadline_is_wall_clock_not_per_read() -> None:
    """A worker trickling a byte every 50 ms never trips a per-read timeout; the job deadline still ends it."""

    async def trickle(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        await response.prepare(request)
        for _ in range(200):
            await response.write(b".")
            await asyncio.sleep(0.05)
        return response

    async with misbehaving_worker(execute=trickle) as url, WorkerClient() as client:
        reply = await client.execute(url, "t", b"", deadline_seconds=0.5)
    assert reply.kind is ReplyKind.DEADLINE  # the trickle lasts 10 s and would end ANSWERED 200


async def test_closed_port_is_unreachable_with_the_os_reason_and_never_the_token() -> None:
    """Nothing listening: UNREACHABLE, cause refused (the hand-back policy sends the job elsewhere)."""
    async with WorkerClient() as client:
        reply = await client.execute(f"http://127.0.0.1:{free_port()}", MACHINE_TOKEN, b"", deadline_seconds=5)
    assert (reply.kind, reply.error, reply.cause) == (ReplyKind.UNREACHABLE, "Connection refused", "refused")


async def test_connection_dropped_mid_reply_is_broken() -> None:
    """A worker that dies mid-reply: BROKEN (the policy retires the machine)."""

    async def drop(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Length": "1000"})
        await response.prepare(request)
        await response.write(b"partial")
        assert request.transport is not None
        request.transport.abort()
        return response

    async with misbehaving_worker(execute=drop) as url, WorkerClient() as client:
        reply = await client.execute(url, "t", b"", deadline_seconds=5)
    assert reply.kind is ReplyKind.BROKEN


@pytest.mark.parametrize("declared", [pytest.param(True, id="content-length"), pytest.param(False, id="chunked")])
async def test_result_over_the_limit_is_too_large(declared: bool) -> None:
    """A result over max_result_bytes is refused whether its size is declared or streamed."""

    async def big(request: web.Request) -> web.StreamResponse:
        if declared:
            return web.Response(body=b"x" * 5000)
        response = web.StreamResponse()
        await response.prepare(request)
        for _ in range(10):
            await response.write(b"x" * 500)
        return response

    async with misbehaving_worker(execute=big) as url, WorkerClient(max_result_bytes=4096) as client:
        reply = await client.execute(url, "t", b"", deadline_seconds=5)
    assert (reply.kind, reply.status) == (ReplyKind.TOO_LARGE, 200)


async def test_cancel_reaches_the_running_build(backend: LocalBackend, client: WorkerClient) -> None:
    """A build cancel with the machine's token ends the running execute, which answers 409."""
    async with machine(backend, env={"STRATA_WORKER_HANDLER": "sleep"}) as handle:
        payload = b'{"seconds": 30, "build_id": "build-7"}'
        execute = asyncio.create_task(client.execute(handle.endpoint, MACHINE_TOKEN, payload, deadline_seconds=30))
        for _ in range(500):
            cancel = await client.cancel(handle.endpoint, MACHINE_TOKEN, "build-7")
            if cancel.accepted:
                break
            await asyncio.sleep(0.01)  # the execute has not registered its build yet
        assert cancel.accepted
        reply = await asyncio.wait_for(execute, 5)
        assert (reply.kind, reply.status) == (ReplyKind.ANSWERED, 409)
        wrong = await client.cancel(handle.endpoint, "not-the-token", "build-7")
        assert wrong.status == 401


async def test_an_unknown_host_name_is_unreachable_with_its_cause() -> None:
    async with WorkerClient() as client:
        reply = await client.execute("http://no-such-host.invalid:8080", MACHINE_TOKEN, b"", deadline_seconds=5)
    assert (reply.kind, reply.cause) == (ReplyKind.UNREACHABLE, "unknown_name")


async def test_cancel_to_an_unreachable_machine_reports_no_status() -> None:
    """A cancel nobody answers is reported, never raised."""
    async with WorkerClient() as client:
        reply = await client.cancel(f"http://127.0.0.1:{free_port()}", "t", "b")
    assert (reply.status, reply.accepted) == (None, False)


async def test_health_probe_of_a_black_hole_ends_at_the_probe_timeout() -> None:
    """A worker that accepts and never answers reads unhealthy after the short probe timeout."""
    release = asyncio.Event()

    async def hang(request: web.Request) -> web.Response:
        await release.wait()
        return web.Response()

    app = web.Application()
    app.router.add_get("/health", hang)
    runner = web.AppRunner(app, handle_signals=False)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        async with WorkerClient(probe_timeout_seconds=0.3) as client:
            assert not await client.health(f"http://127.0.0.1:{port}")  # the handler never answers
    finally:
        release.set()
        await runner.cleanup()
