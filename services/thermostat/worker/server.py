"""The worker's HTTP/1.1 server: an asyncio Protocol over httptools' C parser (llhttp), no web framework.

Why not aiohttp's web server (what the worker ran on before): the pool drives each machine one request at
a time, so every job is a wake-up of its own, and aiohttp's per-request machinery (request and response
objects, the router and middleware chain, a handler task, its stream reader) dominated. Measured on this
2-core machine, worker CPU per request, one request at a time over one kept-alive connection (echo handler,
aiohttp client): aiohttp on asyncio's loop ~290 µs, aiohttp on uvloop ~270 µs (uvloop alone buys little),
this server on asyncio's loop ~128 µs, on uvloop ~75 µs (a bare protocol that parses nothing: ~47 µs, mostly
the kernel's). In bench/pool_throughput.py (2,000 jobs, four workers; four runs each, back to back with
the aiohttp worker, load average 1.3-10) the workers' CPU per job fell from 325-555 µs to 95-170 µs, gRPC
and REST alike; in bench/pool_dispatch_overhead.py a direct call went from 0.64 to 0.40 ms p50.

Theory of operation:
- One Connection per socket; the parser calls back as bytes arrive. A complete request is answered at once
  when its route needs no waiting (health, auth failures, echo, fail, cancel); a waiting handler (sleep)
  runs as a task and its answer is written from the task's done-callback. Requests pipelined behind a
  waiting one queue and are answered in order; reading pauses while the queue is long or the socket's
  write buffer is full, so a client that never reads cannot grow either without bound.
- Reading continues while an execution waits, so a client that goes away is seen (EOF or reset) and its
  execution is cancelled: nobody would read the answer.
- Limits: the request head (request line and header fields) at most MAX_HEAD_BYTES and MAX_HEADERS fields
  (431 and close); the body at most the configured payload limit, refused with 413 as soon as a
  Content-Length says so, before any of it is read, or when a chunked body's bytes pass it; a request the
  parser rejects is 400 and close. A connection idle (or stuck in its head) for IDLE_SECONDS is closed.
- HTTP/1.1 keep-alive by default, `Connection: close` (and HTTP/1.0 without keep-alive) honoured after the
  answer; nothing after such a request is read (llhttp calls it an error, and it must not cost the answer).
- `Upgrade` is not spoken, and cannot be ignored either: llhttp decides it from the headers, and httptools then
  ends the request at its head and never reads its body, so the body would be parsed as the next request
  (request smuggling; `curl --http2` sends `Upgrade: h2c` on a POST). An Upgrade request that declares a
  body (Content-Length over 0, any Transfer-Encoding) is refused 400 and closed; one without is answered as
  plain HTTP/1.1 (as RFC 9110 allows) and is the connection's last, nothing after it read.
- `Expect: 100-continue` gets its interim answer once the head passed the size and Upgrade checks, and only
  when no answer is owed before it: a request whose head arrives behind a running one gets it when its turn
  comes (if its body has not begun by then), one behind a connection's last request never.
- Shutdown: stop listening, close idle connections, let executions in flight finish within the grace,
  then cancel what is left and drop its connection.
- Nothing is logged per request; a request's headers and body never reach a log or an error answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections import deque
from collections.abc import Callable
from email.utils import formatdate
from http import HTTPStatus
from typing import cast

import httptools

from .app import Execution, Request, Response, Worker, json_response

MAX_HEAD_BYTES = 64 * 1024
MAX_HEADERS = 100
IDLE_SECONDS = 75.0  # aiohttp's keep-alive timeout; the pool's client gives up an idle connection at 30 s
MAX_QUEUED = 16  # pipelined requests waiting behind a running one before reading pauses
SWEEP_SECONDS = 15.0
LINGER_SECONDS = 2.0  # how long a refused connection's late bytes are read and dropped before it closes


class _Rejected(Exception):
    """Raised inside a parser callback to stop parsing; the connection answers `response` and closes."""

    def __init__(self, response: Response) -> None:
        self.response = response


BAD_REQUEST = json_response(400, {"detail": "malformed HTTP request"})
UPGRADE_WITH_BODY = json_response(400, {"detail": "Upgrade is not supported on a request with a body"})
HEAD_TOO_LARGE = json_response(431, {"detail": "request head too large"})
INTERNAL_ERROR = json_response(500, {"detail": "the worker failed to answer"})


class Connection(asyncio.Protocol):
    """Connection parses one socket's requests and writes their answers, in order."""

    def __init__(self, server: WorkerServer) -> None:
        self._server = server
        self._worker = server.worker
        self._parser = httptools.HttpRequestParser(self)
        self._transport: asyncio.Transport | None = None
        self._queue: deque[tuple[Request, bool]] = deque()  # complete requests behind a running one
        self._running: Execution | None = None
        self._running_keep_alive = True
        self._running_head = False
        self._closing = False
        self._last_read = False  # the connection's last request (not kept alive, or Upgrade) is read: read no more
        self._reading = True
        self._writable = True
        self.last_seen = 0.0
        # the message being parsed
        self._url = b""
        self._headers: dict[bytes, bytes] = {}
        self._body: list[bytes] = []
        self._body_size = 0
        self._head_size = 0
        self._in_head = False
        self._upgrade = False
        self._continue_owed = False  # `Expect: 100-continue` not yet answered because answers are owed before it
        self._messages = 0

    # asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's transports do not subclass asyncio's
        self.last_seen = self._server.now()
        self._server.connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self._server.connections.discard(self)
        self._transport = None
        self._closing = True
        self._queue.clear()
        if self._running is not None:  # the client went away: nobody reads the answer, stop the work
            self._running.task.cancel()

    def eof_received(self) -> bool:
        return False  # a half-closed client is a departed one: close (connection_lost follows)

    def pause_writing(self) -> None:
        self._writable = False
        self._pause_reading()

    def resume_writing(self) -> None:
        self._writable = True
        self._resume_reading()

    def data_received(self, data: bytes) -> None:
        if self._closing or self._last_read:
            return
        self.last_seen = self._server.now()
        continuing = self._messages if self._in_head else -1  # a head that began in an earlier read
        try:
            self._feed(data)
        except httptools.HttpParserError as error:
            if self._last_read:  # llhttp refuses bytes after a `Connection: close` request: they are not read
                return
            rejected = error.__context__
            self._refuse(rejected.response if isinstance(rejected, _Rejected) else BAD_REQUEST)
            return
        if self._in_head and self._messages == continuing:
            # httptools buffers a header field until it ends: bound what an unending head can hold
            self._head_size += len(data)
            if self._head_size > MAX_HEAD_BYTES:
                self._refuse(HEAD_TOO_LARGE)

    def _feed(self, data: bytes) -> None:
        with contextlib.suppress(httptools.HttpParserUpgrade):
            # a bodyless Upgrade request is complete and is the connection's last: what follows is not read
            self._parser.feed_data(data)

    # httptools callbacks

    def on_message_begin(self) -> None:
        self._messages += 1
        self._in_head = True
        self._url = b""
        self._headers = {}
        self._body = []
        self._body_size = 0
        self._head_size = 0
        self._upgrade = False
        self._continue_owed = False

    def on_url(self, url: bytes) -> None:
        self._url += url
        self._grow_head(len(url))

    def on_header(self, name: bytes, value: bytes) -> None:
        self._grow_head(len(name) + len(value) + 4)
        if len(self._headers) >= MAX_HEADERS:
            raise _Rejected(HEAD_TOO_LARGE)
        self._headers.setdefault(name.lower(), value)

    def on_headers_complete(self) -> None:
        self._in_head = False
        length = self._headers.get(b"content-length")
        if length is not None and int(length) > self._server.max_body:  # llhttp checked it is a number
            raise _Rejected(_too_large(self._server.max_body))
        if self._parser.should_upgrade():
            # httptools skips an Upgrade request's body: the body must be refused, or it is read as a request
            if (length is not None and int(length) > 0) or b"transfer-encoding" in self._headers:
                raise _Rejected(UPGRADE_WITH_BODY)
            self._upgrade = True
        expect = self._headers.get(b"expect")
        if expect is not None and expect.lower() == b"100-continue" and self._parser.get_http_version() == "1.1":
            self._continue_owed = True
            self._send_continue()

    def on_body(self, body: bytes) -> None:
        self._continue_owed = False  # the client stopped waiting for it
        self._body_size += len(body)
        if self._body_size > self._server.max_body:
            raise _Rejected(_too_large(self._server.max_body))
        self._body.append(body)

    def on_message_complete(self) -> None:
        if self._closing:  # pipelined behind a `Connection: close`: never answered
            return
        url = self._url
        if url[:1] != b"/":  # absolute-form or `*`: take the path of a URL, refuse anything else
            try:
                url = httptools.parse_url(url).path or b""
            except httptools.HttpParserInvalidURLError:
                raise _Rejected(BAD_REQUEST) from None
        query = url.find(b"?")
        path = url if query < 0 else url[:query]
        body = self._body[0] if len(self._body) == 1 else b"".join(self._body)
        request = Request(self._parser.get_method(), path, self._headers, body)
        self._body = []
        self._continue_owed = False
        keep_alive = self._parser.should_keep_alive() and not self._upgrade
        self._last_read = not keep_alive
        if self._running is not None or self._queue:
            self._queue.append((request, keep_alive))
            if len(self._queue) >= MAX_QUEUED:
                self._pause_reading()
        else:
            self._handle(request, keep_alive)

    # answering

    def _handle(self, request: Request, keep_alive: bool) -> None:
        try:
            answer = self._worker.respond(request)
        except Exception as error:  # a journal that cannot be written, a handler that raised: this request's 500
            print(f"thermostat.worker: {type(error).__name__} answering {request.method.decode()}", file=sys.stderr)
            answer = INTERNAL_ERROR
        head = request.method == b"HEAD"
        if isinstance(answer, Response):
            self._send(answer, keep_alive=keep_alive, head=head)
            return
        self._running, self._running_keep_alive, self._running_head = answer, keep_alive, head
        answer.task.add_done_callback(self._finished)

    def _finished(self, _: object) -> None:
        execution, self._running = self._running, None
        assert execution is not None
        response = self._worker.finish(execution)
        if self._transport is None:
            return
        self._send(response, keep_alive=self._running_keep_alive, head=self._running_head)
        while self._queue and self._running is None and not self._closing:
            self._handle(*self._queue.popleft())
        self._send_continue()
        self._resume_reading()

    def _send(self, response: Response, *, keep_alive: bool, head: bool) -> None:
        transport = self._transport
        if transport is None or self._closing:
            return
        keep_alive = keep_alive and not self._server.stopping
        head_bytes = _head(response, keep_alive, self._server.date())
        body = response.body
        if head or not body:
            transport.write(head_bytes)
        elif len(body) < 64 * 1024:
            transport.write(head_bytes + body)
        else:
            transport.writelines((head_bytes, body))
        self.last_seen = self._server.now()
        if not keep_alive:
            self._close()

    def _refuse(self, response: Response) -> None:
        """Answer a request that cannot be read to its end, then close: the stream is out of step."""
        if self._running is not None or self._queue:
            self._close()  # answers owed before it cannot be put out of order
            return
        transport = self._transport
        if transport is None or self._closing:
            return
        transport.write(_head(response, False, self._server.date()) + response.body)
        # Lingering close: closing with unread bytes would reset the connection, and a reset can destroy
        # the answer before the client reads it; so half-close, and discard what still comes for a moment.
        self._closing = True
        if transport.can_write_eof():
            transport.write_eof()
        self._server.later(LINGER_SECONDS, transport.close)

    def _send_continue(self) -> None:
        """Send an owed `100 Continue` once no answer is owed before it: written earlier, the client would read it
        as the interim answer of the request ahead and take that request's final answer as its own."""
        if not self._continue_owed or self._running is not None or self._queue or self._closing:
            return
        self._continue_owed = False
        if self._transport is not None:
            self._transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def _grow_head(self, size: int) -> None:
        self._head_size += size
        if self._head_size > MAX_HEAD_BYTES:
            raise _Rejected(HEAD_TOO_LARGE)

    def _pause_reading(self) -> None:
        if self._reading and self._transport is not None:
            self._reading = False
            self._transport.pause_reading()

    def _resume_reading(self) -> None:
        if (
            not self._reading
            and self._writable
            and len(self._queue) < MAX_QUEUED
            and not self._closing
            and self._transport is not None
        ):
            self._reading = True
            self._transport.resume_reading()

    def _close(self) -> None:
        self._closing = True
        if self._transport is not None:
            self._transport.close()  # after what is buffered is written

    # the server's housekeeping

    @property
    def idle(self) -> bool:
        return self._running is None and not self._queue

    def close_if_idle(self, *, older_than: float | None = None) -> None:
        if self.idle and (older_than is None or self.last_seen < older_than):
            self._close()

    def drop(self) -> None:
        """Close now, cancelling an execution in flight (its answer is not written)."""
        if self._closing and self._running is None:
            return  # already closing after its last answer: let that answer be flushed
        self._queue.clear()
        self._closing = True
        if self._transport is not None:
            self._transport.abort()
        if self._running is not None:
            self._running.task.cancel()


class WorkerServer:
    """WorkerServer owns the listening socket, its connections and the shutdown."""

    def __init__(self, worker: Worker, *, max_body: int) -> None:
        self.worker = worker
        self.max_body = max_body
        self.connections: set[Connection] = set()
        self.stopping = False
        self._loop = asyncio.get_running_loop()
        self._server: asyncio.Server | None = None
        self._sweep: asyncio.TimerHandle | None = None
        self._date_second = -1
        self._date = b""

    def now(self) -> float:
        return self._loop.time()

    def later(self, delay: float, callback: Callable[[], object]) -> None:
        self._loop.call_later(delay, callback)

    def date(self) -> bytes:
        second = int(time.time())
        if second != self._date_second:
            self._date_second, self._date = second, formatdate(second, usegmt=True).encode()
        return self._date

    async def start(self, host: str, port: int) -> None:
        self._server = await self._loop.create_server(lambda: Connection(self), host, port)
        self._schedule_sweep()

    async def stop(self, grace_seconds: float) -> None:
        self.stopping = True
        if self._sweep is not None:
            self._sweep.cancel()
        if self._server is not None:
            self._server.close()
        for connection in list(self.connections):
            connection.close_if_idle()
        if self.worker.active:
            await asyncio.wait(list(self.worker.active), timeout=grace_seconds)
        for connection in list(self.connections):
            connection.drop()
        await asyncio.sleep(0)  # let the transports' close callbacks run

    def _schedule_sweep(self) -> None:
        self._sweep = self._loop.call_later(SWEEP_SECONDS, self._sweep_idle)

    def _sweep_idle(self) -> None:
        horizon = self.now() - IDLE_SECONDS
        for connection in list(self.connections):
            connection.close_if_idle(older_than=horizon)
        self._schedule_sweep()


_STATUS_LINES: dict[int, bytes] = {}


def _head(response: Response, keep_alive: bool, date: bytes) -> bytes:
    status = _STATUS_LINES.get(response.status)
    if status is None:
        status = _STATUS_LINES.setdefault(
            response.status, b"HTTP/1.1 %d %s\r\n" % (response.status, _phrase(response.status))
        )
    lines = [status, b"Date: ", date, b"\r\nContent-Length: %d\r\n" % len(response.body)]
    if response.content_type is not None:
        lines += (b"Content-Type: ", response.content_type, b"\r\n")
    for name, value in response.headers:
        lines += (name, b": ", value, b"\r\n")
    if not keep_alive:
        lines.append(b"Connection: close\r\n")
    lines.append(b"\r\n")
    return b"".join(lines)


def _phrase(status: int) -> bytes:
    try:
        return HTTPStatus(status).phrase.encode()
    except ValueError:
        return b""


def _too_large(limit: int) -> Response:
    return json_response(413, {"detail": f"payload over the worker's limit of {limit} bytes"})


async def serve(
    worker: Worker,
    *,
    host: str,
    port: int,
    max_body: int,
    stop: asyncio.Event,
    grace: float,
    ready: Callable[[], None] = lambda: None,
) -> None:
    """Serve until `stop` is set, then shut down within `grace` seconds for executions in flight."""
    server = WorkerServer(worker, max_body=max_body)
    await server.start(host, port)
    ready()
    try:
        await stop.wait()
    finally:
        with contextlib.suppress(Exception):
            await server.stop(grace)
