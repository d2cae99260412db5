"""http1: a lean kept-alive HTTP/1.1 client, the pool's hop to its workers (worker_client.py says why).

One asyncio Protocol per connection, the answer parsed by httptools (llhttp, in C), and a pool of idle
connections per origin; a connection carries one request at a time.

Keep-alive, and the race it brings. A connection idle longer than `keepalive_seconds` (or than the server's
own `Keep-Alive: timeout=N` less a second, when it says one) is closed, not reused, so a worker that keeps idle
connections open longer than that never closes one the pool is about to use. Before a reuse, a connection is
checked twice: the loop has not seen it end, and a zero-timeout poll of its socket finds nothing pending (a
FIN the server sent that the loop has not read yet: a worker with a shorter keep-alive than ours closed it).
Either way it is closed and the next idle one (or a new one) is used: that request was never sent.
A request is written once, never again: if the connection then ends before any byte of the answer, the
server may have read the request and run it (a worker that crashed mid-job looks exactly the same), so it is
`Broken`, saying the connection was reused and how long it had been idle (aiohttp, the reference, does the
same for a POST: ServerDisconnectedError, no retry). Only a GET (a health probe) is retried, once, on a new
connection, as RFC 9112 section 9.3.1 allows for an idempotent request and aiohttp does.

A connection is kept only if its request went out whole: a worker may answer early (a 401 before it reads a large
payload) with keep-alive while the rest of the payload still waits in the transport's buffer; a request sent
next would follow those bytes, so such a connection is aborted, not kept.

Bounds: the caller's `limit` bounds an answer's body; its head (status line and headers, every interim answer's
too) may take HEAD_BYTES and HEAD_FIELDS, past which it is `Broken` and the connection closed. llhttp sets no
limit of its own and httptools grows a header by concatenation across reads: a worker sending an endless header
would otherwise take the dispatcher's memory and its one loop's CPU until the job's deadline.

Errors: `Unreachable` for no connection (refused, no route, unknown name, connect timeout, a TLS handshake or
certificate refused), with the OS error text; `Broken` for a connection lost, a head too large, or an answer
that is not HTTP (one delimited by the connection's end is complete only on a clean end, never on a reset).
Their texts never carry a request header (the caller's token).
"""

from __future__ import annotations

import asyncio
import errno
import os
import select
import socket
import ssl
import time
from dataclasses import dataclass
from typing import cast
from urllib.parse import urlsplit

import httptools

KEEPALIVE_MARGIN_SECONDS = 1.0
"""Below a server's advertised keep-alive: its timer, and the time our request takes to reach it."""
HEAD_BYTES = 64 * 1024
"""An answer's head may take this many bytes (aiohttp allowed 8,190 per line; a worker's head is a few hundred)."""
HEAD_FIELDS = 100
"""And this many fields (each is held as a pair of bytes until the answer is read; a worker sends a handful)."""
_ORIGINS_KEPT = 4096
_AGENT = "User-Agent: thermostat-pool\r\n"  # as aiohttp sent one: a provider's proxy (Cloudflare) may refuse none


class Unreachable(Exception):
    """No connection could be made; the text is the OS's (or the TLS library's) reason, `cause` its kind in a word
    (refused, connect_timeout, no_route, unknown_name, tls, network): no byte of a request was sent."""

    def __init__(self, reason: str, *, cause: str = "network") -> None:
        super().__init__(reason)
        self.cause = cause


class Broken(Exception):
    """The connection ended or the answer was not HTTP, after the request may have been sent."""

    def __init__(self, reason: str, *, before_answer: bool = False) -> None:
        super().__init__(reason)
        self.before_answer = before_answer


@dataclass(frozen=True, slots=True)
class Origin:
    """Origin is where an endpoint's requests go: its scheme, host and port, and the path it is under."""

    tls: bool
    host: str
    port: int
    netloc: str  # the Host header
    prefix: str  # an endpoint's own path, before /execute

    @classmethod
    def parse(cls, endpoint: str) -> Origin:
        parts = urlsplit(endpoint)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"endpoint must be an http or https URL, got scheme {parts.scheme!r}")
        tls = parts.scheme == "https"
        netloc = parts.netloc.rpartition("@")[2]
        return cls(tls, parts.hostname, parts.port or (443 if tls else 80), netloc, parts.path.rstrip("/"))

    def url(self, path: str) -> str:
        return f"{'https' if self.tls else 'http'}://{self.netloc}{self.prefix}{path}"


@dataclass(frozen=True, slots=True)
class Answer:
    """Answer is a complete HTTP answer; `too_large` when its body went over the limit (then `body` is empty)."""

    status: int
    body: bytes
    headers: list[tuple[bytes, bytes]]
    too_large: bool = False


class Http1Pool:
    """Http1Pool keeps idle connections per origin and sends one request at a time on each."""

    def __init__(
        self,
        *,
        keepalive_seconds: float,
        connect_timeout_seconds: float,
        ssl_context: ssl.SSLContext | None = None,
        origins_kept: int = _ORIGINS_KEPT,
        poll_before_reuse: bool = True,
    ) -> None:
        self._origins_kept = origins_kept
        # False: a reuse trusts the loop to have seen the server's FIN (a syscall saved per request); a FIN still
        # unread then costs the request a Broken before any answer, which a GET is retried on (the monitor's scrapes)
        self._poll_before_reuse = poll_before_reuse
        self._keepalive = keepalive_seconds
        self._connect_timeout = connect_timeout_seconds
        self._ssl = ssl_context
        self._origins: dict[str, Origin] = {}
        self._idle: dict[str, list[_Connection]] = {}  # by endpoint
        self._busy: set[_Connection] = set()
        self._sweep: asyncio.TimerHandle | None = None

    def origin(self, endpoint: str) -> Origin:
        origin = self._origins.get(endpoint)
        if origin is None:
            if len(self._origins) >= self._origins_kept:
                self._origins.clear()  # machines come and go, each with its endpoint: the cache never grows past this
            origin = self._origins[endpoint] = Origin.parse(endpoint)
        return origin

    async def request(
        self, endpoint: str, method: str, path: str, fields: dict[str, str], body: bytes, *, limit: int
    ) -> Answer:
        """Send one request (the caller bounds it with its deadline) and read its answer up to `limit` bytes."""
        origin = self._origins.get(endpoint) or self.origin(endpoint)
        head = "".join([f"{name}: {value}\r\n" for name, value in fields.items()])
        length = f"Content-Length: {len(body)}\r\n" if body or method != "GET" else ""
        agent = "" if "User-Agent" in fields else _AGENT  # a caller's own (the monitor's browser-like one) wins
        request = (
            f"{method} {origin.prefix}{path} HTTP/1.1\r\nHost: {origin.netloc}\r\n{agent}{head}{length}\r\n".encode()
        )
        connection = self._reuse(endpoint)
        if connection is None:
            return await self._exchange(endpoint, await self._connect(origin), request, body, limit)
        idle = time.monotonic() - connection.idle_since
        try:
            return await self._exchange(endpoint, connection, request, body, limit)
        except Broken as error:
            if not error.before_answer:
                raise
            if method != "GET":  # sent once: the worker may have read it and run it
                raise Broken(f"{error} (a connection reused after {idle:.1f} s idle)", before_answer=True) from None
        return await self._exchange(endpoint, await self._connect(origin), request, body, limit)

    async def _exchange(
        self, endpoint: str, connection: _Connection, request: bytes, body: bytes, limit: int
    ) -> Answer:
        self._busy.add(connection)
        try:
            answer = await connection.send(request, body, limit)
        except BaseException:
            connection.close()  # a cancelled call (its deadline) leaves a half-read answer behind
            raise
        finally:
            self._busy.discard(connection)
        if connection.reusable:
            self._release(endpoint, connection)
        else:
            connection.close()
        return answer

    def _reuse(self, endpoint: str) -> _Connection | None:
        idle = self._idle.get(endpoint)
        if not idle:
            return None
        now = time.monotonic()
        while idle:
            connection = idle.pop()  # the most recently used: the others age out
            if connection.usable(now, poll=self._poll_before_reuse):
                return connection
            connection.close()
        return None

    def _release(self, endpoint: str, connection: _Connection) -> None:
        connection.idle_since = time.monotonic()  # the loop's clock
        idle = self._idle.get(endpoint)
        if idle is None:
            self._idle[endpoint] = [connection]
        else:
            idle.append(connection)
        if self._sweep is None:
            loop = asyncio.get_running_loop()
            self._sweep = loop.call_at(connection.idle_since + connection.keep_for, self._close_expired)

    def _close_expired(self) -> None:
        """Close the connections idle past their keep-alive (a retired machine's among them); re-arm if any is left."""
        self._sweep = None
        loop = asyncio.get_running_loop()
        now, earliest = time.monotonic(), None
        for endpoint, idle in list(self._idle.items()):
            kept = []
            for connection in idle:
                if connection.usable(now):
                    kept.append(connection)
                    expiry = connection.idle_since + connection.keep_for
                    earliest = expiry if earliest is None else min(earliest, expiry)
                else:
                    connection.close()
            if kept:
                self._idle[endpoint] = kept
            else:
                del self._idle[endpoint]
        if earliest is not None:
            self._sweep = loop.call_at(earliest, self._close_expired)

    async def _connect(self, origin: Origin) -> _Connection:
        loop = asyncio.get_running_loop()
        tls = self._tls() if origin.tls else None
        try:
            async with asyncio.timeout(self._connect_timeout):
                _, connection = await loop.create_connection(
                    lambda: _Connection(self._keepalive),
                    origin.host,
                    origin.port,
                    ssl=tls,
                    server_hostname=origin.host if tls is not None else None,
                )
        except TimeoutError:
            raise Unreachable(f"no connection within {self._connect_timeout:g} s", cause="connect_timeout") from None
        except OSError as error:  # refused, unreachable, unknown name; ssl.SSLError (a refused certificate) too
            raise Unreachable(_reason(error), cause=_cause(error)) from None
        return connection

    def _tls(self) -> ssl.SSLContext:
        if self._ssl is None:
            self._ssl = ssl.create_default_context()  # the system's CAs, hostname checked: as aiohttp's default
        return self._ssl

    def forget(self, endpoint: str) -> None:
        """Close the idle connections to `endpoint` (a pod that left): its requests in flight finish as they are."""
        for connection in self._idle.pop(endpoint, []):
            connection.close()
        self._origins.pop(endpoint, None)

    async def aclose(self) -> None:
        if self._sweep is not None:
            self._sweep.cancel()
            self._sweep = None
        for connection in [c for idle in self._idle.values() for c in idle] + list(self._busy):
            connection.close()
        self._idle.clear()
        await asyncio.sleep(0)  # the transports finish closing before the loop might


def _reason(error: OSError) -> str:
    """The OS's words for a failed connect ("Connection refused"), not asyncio's wrapping of them."""
    if error.errno and not isinstance(error, (ssl.SSLError, socket.gaierror)):
        return os.strerror(error.errno)
    return error.strerror or str(error) or type(error).__name__


_NO_ROUTE = frozenset({errno.EHOSTUNREACH, errno.ENETUNREACH, errno.EHOSTDOWN, errno.ENETDOWN})


def _cause(error: OSError) -> str:
    """A failed connect's kind in a word, for a metric's label (the OS's text is the log's)."""
    if isinstance(error, ssl.SSLError):
        return "tls"
    if isinstance(error, socket.gaierror):
        return "unknown_name"
    if isinstance(error, ConnectionRefusedError):
        return "refused"
    if error.errno in _NO_ROUTE:
        return "no_route"
    return "network"


class _Connection(asyncio.Protocol):
    """One HTTP/1.1 connection: a request written whole, its answer parsed as it arrives."""

    def __init__(self, keepalive_seconds: float) -> None:
        self._parser = httptools.HttpResponseParser(self)
        self._transport: asyncio.Transport | None = None
        self._poll = select.poll()
        self._waiter: asyncio.Future[Answer] | None = None
        self.reusable = False
        self.idle_since = 0.0
        self.keep_for = keepalive_seconds
        self._head_bytes = 0
        self._fields = 0
        self._start(None, 0)

    def _start(self, waiter: asyncio.Future[Answer] | None, limit: int) -> None:
        self._waiter = waiter
        self._limit = limit
        self._headers: list[tuple[bytes, bytes]] = []
        self._chunks: list[bytes] = []
        self._size = 0
        self._length: int | None = None
        self._chunked = False
        self._headers_done = False
        self._answered = False  # any byte of the answer arrived

    def usable(self, now: float, *, poll: bool = True) -> bool:
        """Still open, not idle too long, its last request written whole, and nothing pending on its socket:
        neither the server's FIN nor bytes nobody asked for (either one means it must not carry a request)."""
        transport = self._transport
        return (
            self.reusable
            and transport is not None
            and not transport.is_closing()
            and now - self.idle_since < self.keep_for
            and not transport.get_write_buffer_size()
            and not (poll and self._poll.poll(0))
        )

    def send(self, request: bytes, body: bytes, limit: int) -> asyncio.Future[Answer]:
        assert self._transport is not None
        waiter = asyncio.get_running_loop().create_future()
        self._start(waiter, limit)
        self._head_bytes = self._fields = 0  # for the whole exchange: interim answers' heads count too
        self.reusable = False  # until this answer ends cleanly with keep-alive
        if len(body) <= 64 * 1024:
            self._transport.write(request + body)
        else:
            self._transport.write(request)
            self._transport.write(body)
        return waiter

    def close(self) -> None:
        self.reusable = False
        if self._transport is not None:
            if self._transport.get_write_buffer_size():
                self._transport.abort()  # the rest of a request whose answer is in (or given up): not worth sending
            else:
                self._transport.close()

    # ------------------------------------------------------------------------------------ asyncio callbacks

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's transports do not subclass asyncio's
        self._poll.register(self._transport.get_extra_info("socket").fileno(), select.POLLIN)

    def data_received(self, data: bytes) -> None:
        if self._waiter is None or self._waiter.done():
            self.close()  # bytes while idle, or after the answer: this connection is out of step
            return
        self._answered = True
        try:
            self._feed(data)
        except httptools.HttpParserError as error:
            self._fail(Broken(f"malformed answer: {error}"))
        if self._waiter.done() and not self.reusable:
            self.close()

    def _feed(self, data: bytes) -> None:
        """Parse what arrived, the head's bytes counted as they go in: a head past HEAD_BYTES fails the answer."""
        assert self._waiter is not None
        while data and not self._headers_done:
            room = HEAD_BYTES - self._head_bytes
            piece, data = data[:room], data[room:]
            self._head_bytes += len(piece)  # at most the head's size: a piece may end past it
            self._parser.feed_data(piece)
            if self._waiter.done():
                return
            if self._head_bytes >= HEAD_BYTES and not self._headers_done:
                self._fail(Broken("answer head too large"))
                return
        if data:
            self._parser.feed_data(data)

    def eof_received(self) -> bool:
        self._ended("connection closed", clean=True)
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.reusable = False
        reason = (getattr(exc, "strerror", None) or type(exc).__name__) if exc is not None else ""
        self._ended(f"connection lost: {reason}" if reason else "connection lost", clean=exc is None)

    def _ended(self, how: str, *, clean: bool) -> None:
        self.reusable = False
        if self._waiter is None or self._waiter.done():
            return
        if clean and self._headers_done and self._length is None and not self._chunked:
            self._complete()  # an answer delimited by the end of the connection (a reset cuts it: not complete)
        elif not self._answered:
            self._fail(Broken(f"{how} before any answer", before_answer=True))
        else:
            self._fail(Broken(f"{how} mid-answer"))

    def _fail(self, error: Exception) -> None:
        self.reusable = False
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_exception(error)

    def _complete(self, *, too_large: bool = False) -> None:
        assert self._waiter is not None
        body = b"" if too_large else b"".join(self._chunks)
        self._chunks = []
        status = self._parser.get_status_code()
        self._waiter.set_result(Answer(status, body, self._headers, too_large))

    # ------------------------------------------------------------------------------------ httptools callbacks

    def on_message_begin(self) -> None:
        if self._waiter is None or self._waiter.done():
            self.reusable = False  # a second answer to one request

    def on_header(self, name: bytes, value: bytes) -> None:
        if self._waiter is None or self._waiter.done():
            return
        self._fields += 1
        if self._fields > HEAD_FIELDS:
            self._fail(Broken("answer head too large"))
            return
        self._headers.append((name, value))
        lowered = name.lower()
        if lowered == b"content-length":
            self._length = int(value)
        elif lowered == b"transfer-encoding":
            self._chunked = b"chunked" in value.lower()
        elif lowered == b"keep-alive":
            for part in value.split(b","):
                key, _, seconds = part.strip().partition(b"=")
                if key.lower() == b"timeout" and seconds.strip().isdigit():
                    self.keep_for = min(self.keep_for, int(seconds) - KEEPALIVE_MARGIN_SECONDS)

    def on_headers_complete(self) -> None:
        self._headers_done = True
        if self._waiter is None or self._waiter.done():
            return
        if self._length is not None and self._length > self._limit:
            self._complete(too_large=True)  # refused before a byte of it is held

    def on_body(self, body: bytes) -> None:
        if self._waiter is None or self._waiter.done():
            return
        self._size += len(body)
        if self._size > self._limit:
            self._complete(too_large=True)
        else:
            self._chunks.append(body)

    def on_message_complete(self) -> None:
        if self._waiter is None or self._waiter.done():
            return
        status = self._parser.get_status_code()
        if 100 <= status < 200:  # an interim answer (100 Continue, 103 Early Hints): the real one follows
            self._start(self._waiter, self._limit)
            return
        # An answer may come before its request is written whole (a worker refusing a payload unread): the rest
        # still in the buffer would precede the next request, so such a connection is not kept.
        transport = self._transport
        self.reusable = (
            self._parser.should_keep_alive() and transport is not None and not transport.get_write_buffer_size()
        )
        self._complete()
