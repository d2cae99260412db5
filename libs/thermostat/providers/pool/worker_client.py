"""WorkerClient: the pool's hop to its machines (`POST /execute`, build cancel, `GET /health`).

It speaks HTTP/1.1 itself (http1.py: an asyncio Protocol per kept-alive connection, answers parsed by
httptools' llhttp in C), because the hop is on every job's path and the dispatcher is CPU-bound. Measured on
this 2-core machine under load (bench/pool_calibration.py, 2,000 calls to one reference worker, this
process's CPU per call): aiohttp's client 285-303 µs at one call at a time and 161-180 µs at 32, this one
118-148 µs and 54-57 µs (a bare Protocol writing a canned request and waiting for its answer, the floor:
78-91 and 25-27 µs), for 1.2-1.5x and 1.9-2.1x the requests per second. In bench/pool_throughput.py
(2,000 jobs, main and this back to back, four pairs, load average 2-9) the dispatchers' CPU per job fell by
~250 µs: gRPC 1,615-1,750 → 1,350-1,540 µs, REST 1,685-1,940 → 1,445-1,590. httpx's async client was slower
still (1,400-3,300 µs per call). Health probes and build cancels take the same path: one client, one pool,
one span hook.

Theory of operation:
- `execute` has one wall-clock deadline for the whole call, connect to last byte: the job's timeout. A
  per-read timeout would let a worker trickling a byte a minute hold a job forever. It reports a typed
  `WorkerReply` that the job-outcome policy maps; it never raises for what the worker did: no connection
  (refused, connect timeout, a TLS certificate refused) is UNREACHABLE with the OS's reason and its kind in a word
  (`cause`: no byte of the request went out, so the dispatcher may hand the job to another machine), a connection lost
  or an answer that is not HTTP is BROKEN, the deadline is DEADLINE.
- The payload goes out verbatim with no Content-Type (worker-pool seed: "the pool forwards it verbatim and sets no
  content type"); W3C `traceparent` / `tracestate` given with the job are forwarded (inside a recorded trace,
  the hop's own CLIENT span replaces them with its context: chassis/tracing.py's `hop_spans`). A value that
  is not printable ASCII is dropped rather than let it start a header of its own.
- The result is read up to `max_result_bytes`, whether its length is declared, chunked or ends with the
  connection; a larger one is `TOO_LARGE` (the worker worked; the pool refuses the bytes rather than hold them
  in memory, and drops the connection).
- A request is sent once, never again: http1.py says how a connection the worker closed while idle is left
  out before reuse (aiohttp would send a job on it and see it BROKEN), and what happens when one ends before
  any answer (BROKEN, as with aiohttp; only a health probe, a GET, is asked again).
- https endpoints (RunPod's proxy, Fly) are spoken to over asyncio's TLS with the system's CAs and the host
  name checked (`ssl_context` replaces that, for a test's own CA).
- The machine's token lives only in the Authorization header. Errors carry fixed words or the OS error text,
  never a header or a request.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Self
from urllib.parse import quote

from thermostat.chassis import tracing
from thermostat.policy.pool.job_outcome import ReplyKind, WorkerReply
from thermostat.providers.pool.http1 import Answer, Broken, Http1Pool, Unreachable

DEFAULT_CONNECT_TIMEOUT_SECONDS = 5.0
DEFAULT_PROBE_TIMEOUT_SECONDS = 2.0
DEFAULT_CANCEL_TIMEOUT_SECONDS = 5.0
DEFAULT_KEEPALIVE_SECONDS = 30.0
"""Idle connections are closed after this (what the pool's aiohttp connector kept them): a worker must keep
an idle connection open longer (the reference worker keeps it IDLE_SECONDS in services/thermostat/worker/server.py),
or say its own shorter keep-alive in a `Keep-Alive: timeout=N` header (http1.py explains the race this avoids)."""
DEFAULT_MAX_RESULT_BYTES = 64 * 1024 * 1024
TRACE_HEADERS = ("traceparent", "tracestate")
_SMALL_ANSWER_BYTES = 64 * 1024  # a health or cancel answer: a status and a line of text


@dataclass(frozen=True, slots=True, kw_only=True)
class CancelReply:
    """CancelReply is the machine's answer to a build cancel: its status, or None when unreachable."""

    status: int | None
    error: str = ""

    @property
    def accepted(self) -> bool:
        return self.status is not None and 200 <= self.status < 300


def _header_value(value: str) -> bool:
    """Whether a value can go in a header as it is: printable ASCII, so no CR or LF can start a header of its own."""
    return value.isascii() and value.isprintable()


class WorkerClient:
    """WorkerClient talks to every machine's worker over one pool of kept-alive connections."""

    def __init__(
        self,
        *,
        connect_timeout_seconds: float = DEFAULT_CONNECT_TIMEOUT_SECONDS,
        probe_timeout_seconds: float = DEFAULT_PROBE_TIMEOUT_SECONDS,
        cancel_timeout_seconds: float = DEFAULT_CANCEL_TIMEOUT_SECONDS,
        max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES,
        keepalive_seconds: float = DEFAULT_KEEPALIVE_SECONDS,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self._probe_timeout = probe_timeout_seconds
        self._cancel_timeout = cancel_timeout_seconds
        self._max_result_bytes = max_result_bytes
        self._http = Http1Pool(
            keepalive_seconds=keepalive_seconds,
            connect_timeout_seconds=connect_timeout_seconds,
            ssl_context=ssl_context,
        )
        self._spans: tracing.HopSpans | None = None
        self._spans_decided = False

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def execute(
        self,
        endpoint: str,
        token: str,
        payload: bytes,
        *,
        deadline_seconds: float,
        trace: Mapping[str, str] | None = None,
    ) -> WorkerReply:
        """POST the payload to `{endpoint}/execute`, bounded by one wall-clock deadline for the whole call."""
        if not _header_value(token):
            return WorkerReply(kind=ReplyKind.BROKEN, error="the machine's token is not a valid header value")
        fields = {"Authorization": f"Bearer {token}"}
        if trace:
            fields.update({k: v for k, v in trace.items() if k in TRACE_HEADERS and v and _header_value(v)})
        deadline = asyncio.timeout(deadline_seconds)
        try:
            async with deadline:
                answer = await self._request(endpoint, "POST", "/execute", fields, payload, self._max_result_bytes)
        except TimeoutError as error:
            if deadline.expired():
                return WorkerReply(kind=ReplyKind.DEADLINE)
            return WorkerReply(kind=ReplyKind.BROKEN, error=type(error).__name__)
        except Unreachable as error:
            return WorkerReply(kind=ReplyKind.UNREACHABLE, error=str(error), cause=error.cause)
        except (Broken, ValueError) as error:
            return WorkerReply(kind=ReplyKind.BROKEN, error=str(error))
        if answer.too_large:
            limit = self._max_result_bytes
            return WorkerReply(
                kind=ReplyKind.TOO_LARGE, status=answer.status, error=f"result over the pool's limit of {limit} bytes"
            )
        return WorkerReply(kind=ReplyKind.ANSWERED, status=answer.status, body=answer.body)

    async def cancel(self, endpoint: str, token: str, build_id: str) -> CancelReply:
        """POST `/v1/executions/{build_id}/cancel` with the machine's token (the build id is validated already)."""
        if not _header_value(token):
            return CancelReply(status=None, error="the machine's token is not a valid header value")
        path = f"/v1/executions/{quote(build_id, safe='')}/cancel"
        try:
            async with asyncio.timeout(self._cancel_timeout):
                answer = await self._request(
                    endpoint, "POST", path, {"Authorization": f"Bearer {token}"}, b"", _SMALL_ANSWER_BYTES
                )
        except TimeoutError:
            return CancelReply(status=None, error="no answer in time")
        except (Unreachable, Broken, ValueError) as error:
            return CancelReply(status=None, error=str(error))
        return CancelReply(status=answer.status)

    async def health(self, endpoint: str, *, timeout_seconds: float | None = None) -> bool:
        """GET `{endpoint}/health` with a short timeout: True only for a 200."""
        try:
            async with asyncio.timeout(timeout_seconds or self._probe_timeout):
                answer = await self._request(endpoint, "GET", "/health", {}, b"", _SMALL_ANSWER_BYTES)
        except (TimeoutError, Unreachable, Broken, ValueError):
            return False
        return answer.status == 200 and not answer.too_large

    async def _request(
        self, endpoint: str, method: str, path: str, fields: dict[str, str], body: bytes, limit: int
    ) -> Answer:
        """One request through the pool, under a CLIENT span of its own when it is made inside a recorded trace."""
        if not self._spans_decided:  # decided at the first request, as a tracer provider is set up at a start
            self._spans, self._spans_decided = tracing.hop_spans(), True
        if self._spans is None:
            return await self._http.request(endpoint, method, path, fields, body, limit=limit)
        origin = self._http.origin(endpoint)
        span = self._spans.start(method, origin.host, origin.url(path), fields)
        if span is None:
            return await self._http.request(endpoint, method, path, fields, body, limit=limit)
        try:
            answer = await self._http.request(endpoint, method, path, fields, body, limit=limit)
        except BaseException as error:
            tracing.HopSpans.failed(span, type(error).__name__)
            raise
        tracing.HopSpans.answered(span, answer.status)
        return answer
