"""WorkerClient: the pool's hop to its machines (`POST /execute`, build cancel, `GET /health`) on aiohttp.

aiohttp, not httpx: on this machine aiohttp's client keeps ~3,000 requests/s to a trivial worker where
httpx's async client manages 230-500 and slows as concurrency grows (issue 10, Measures), and the worker hop
is on every job's path. One ClientSession holds one connection pool for every machine (no per-host or total
cap: a scaler pass probes every warm machine at once), created lazily inside the running loop.

Theory of operation:
- `execute` has one wall-clock deadline for the whole call, connect to last byte: the job's timeout. A
  per-read timeout would let a worker trickling a byte a minute hold a job forever. It reports a typed
  `WorkerReply` that the job-outcome policy maps; it never raises for what the worker did.
- The payload goes out verbatim with no Content-Type (worker-pool seed: "the pool forwards it verbatim and sets no
  content type"); W3C `traceparent` / `tracestate` given with the job are forwarded (inside a recorded trace,
  the hop's own span replaces them with its context: chassis/tracing.py's aiohttp trace config).
- The result is read up to `max_result_bytes`; a larger one is `TOO_LARGE` (the worker worked; the pool
  refuses the bytes rather than hold them in memory).
- The machine's token lives only in the Authorization header. Errors carry an exception's class or the OS
  error text, never a header or a request repr.
"""

from __future__ import annotations

import asyncio
import io
from collections.abc import Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Self
from urllib.parse import quote

import aiohttp

from thermostat.chassis.tracing import aiohttp_trace_configs
from thermostat.policy.pool.job_outcome import ReplyKind, WorkerReply

DEFAULT_CONNECT_TIMEOUT_SECONDS = 5.0
DEFAULT_PROBE_TIMEOUT_SECONDS = 2.0
DEFAULT_CANCEL_TIMEOUT_SECONDS = 5.0
DEFAULT_MAX_RESULT_BYTES = 64 * 1024 * 1024
TRACE_HEADERS = ("traceparent", "tracestate")
_RAW_BODY_LIMIT = 1024 * 1024  # aiohttp warns (ResourceWarning) when sending raw bytes above 1 MiB


@dataclass(frozen=True, slots=True, kw_only=True)
class CancelReply:
    """CancelReply is the machine's answer to a build cancel: its status, or None when unreachable."""

    status: int | None
    error: str = ""

    @property
    def accepted(self) -> bool:
        return self.status is not None and 200 <= self.status < 300


class WorkerClient:
    """WorkerClient talks to every machine's worker over one kept-alive connection pool."""

    def __init__(
        self,
        *,
        connect_timeout_seconds: float = DEFAULT_CONNECT_TIMEOUT_SECONDS,
        probe_timeout_seconds: float = DEFAULT_PROBE_TIMEOUT_SECONDS,
        cancel_timeout_seconds: float = DEFAULT_CANCEL_TIMEOUT_SECONDS,
        max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES,
    ) -> None:
        self._connect_timeout = connect_timeout_seconds
        self._probe_timeout = probe_timeout_seconds
        self._cancel_timeout = cancel_timeout_seconds
        self._max_result_bytes = max_result_bytes
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(limit=0, limit_per_host=0, keepalive_timeout=30)
            self._session = aiohttp.ClientSession(
                connector=connector, auto_decompress=False, trace_configs=aiohttp_trace_configs()
            )
        return self._session

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

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
        headers = {"Authorization": f"Bearer {token}"}
        headers.update({name: value for name, value in (trace or {}).items() if name in TRACE_HEADERS and value})
        data: bytes | io.BytesIO = payload if len(payload) <= _RAW_BODY_LIMIT else io.BytesIO(payload)
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=self._connect_timeout)
        deadline = asyncio.timeout(deadline_seconds)
        try:
            async with (
                deadline,
                self._client().post(
                    f"{endpoint}/execute",
                    data=data,
                    headers=headers,
                    timeout=timeout,
                    skip_auto_headers=("Content-Type",),
                ) as response,
            ):
                return await self._read(response)
        except aiohttp.ClientConnectorError as error:
            return WorkerReply(kind=ReplyKind.UNREACHABLE, error=error.os_error.strerror or type(error).__name__)
        except aiohttp.ConnectionTimeoutError as error:
            return WorkerReply(kind=ReplyKind.UNREACHABLE, error=type(error).__name__)
        except TimeoutError as error:
            if deadline.expired():
                return WorkerReply(kind=ReplyKind.DEADLINE)
            return WorkerReply(kind=ReplyKind.BROKEN, error=type(error).__name__)
        except (aiohttp.ClientError, OSError, ValueError) as error:
            return WorkerReply(kind=ReplyKind.BROKEN, error=type(error).__name__)

    async def _read(self, response: aiohttp.ClientResponse) -> WorkerReply:
        limit = self._max_result_bytes
        too_large = WorkerReply(
            kind=ReplyKind.TOO_LARGE, status=response.status, error=f"result over the pool's limit of {limit} bytes"
        )
        if response.content_length is not None and response.content_length > limit:
            return too_large
        chunks: list[bytes] = []
        size = 0
        async for chunk in response.content.iter_chunked(256 * 1024):
            size += len(chunk)
            if size > limit:
                return too_large
            chunks.append(chunk)
        return WorkerReply(kind=ReplyKind.ANSWERED, status=response.status, body=b"".join(chunks))

    async def cancel(self, endpoint: str, token: str, build_id: str) -> CancelReply:
        """POST `/v1/executions/{build_id}/cancel` with the machine's token (the build id is validated already)."""
        try:
            async with self._client().post(
                f"{endpoint}/v1/executions/{quote(build_id, safe='')}/cancel",
                headers={"Authorization": f"Bearer {token}"},
                timeout=aiohttp.ClientTimeout(total=self._cancel_timeout),
                skip_auto_headers=("Content-Type",),
            ) as response:
                await response.read()
                return CancelReply(status=response.status)
        except (aiohttp.ClientError, OSError, TimeoutError) as error:
            return CancelReply(status=None, error=type(error).__name__)

    async def health(self, endpoint: str, *, timeout_seconds: float | None = None) -> bool:
        """GET `{endpoint}/health` with a short timeout: True only for a 200."""
        try:
            async with self._client().get(
                f"{endpoint}/health", timeout=aiohttp.ClientTimeout(total=timeout_seconds or self._probe_timeout)
            ) as response:
                await response.read()
                return response.status == 200
        except (aiohttp.ClientError, OSError, TimeoutError):
            return False
