"""The worker hop's connections: kept alive and reused, never reused once the worker has closed them, a request
never sent twice, every way an answer may end (length, chunks, the connection's clean end; not a reset), the
bounds on an answer's head, and TLS with verification.

The workers here are blocking sockets in threads, scripted per connection: what they read and write, and when
they close, does not depend on this test's event loop, so a test can hold the loop still while a worker acts.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import struct
import subprocess
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest
from aiohttp import web

from thermostat.chassis.ports import free_port
from thermostat.policy.pool.job_outcome import ReplyKind
from thermostat.providers.pool.worker_client import WorkerClient

TOKEN = "secret-machine-token"
OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"

Script = Callable[[socket.socket, int], None]


def read_request(connection: socket.socket) -> bytes | None:
    """One request's head and body as the worker reads it; None when the client closed the connection."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = connection.recv(65536)
        if not chunk:
            return None
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        (int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")), 0
    )
    while len(body) < length:
        body += connection.recv(65536)
    return head + b"\r\n\r\n" + body


class ScriptedWorker:
    """A worker on a loopback port running `script(connection, n)` for its n-th connection (from 0)."""

    def __init__(self, script: Script) -> None:
        self._script = script
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self.requests: list[tuple[int, bytes]] = []  # (connection, request line) for each request read
        self._threads: list[threading.Thread] = []
        self._connections: list[socket.socket] = []

    def read(self, connection: socket.socket, n: int) -> bytes | None:
        request = read_request(connection)
        if request is not None:
            self.requests.append((n, request.split(b"\r\n", 1)[0]))
        return request

    def _accept(self) -> None:
        n = 0
        while True:
            try:
                connection, _ = self._listener.accept()
            except OSError:
                return  # the listener closed: the test is over
            self._connections.append(connection)
            thread = threading.Thread(target=self._run, args=(connection, n), daemon=True)
            self._threads.append(thread)
            thread.start()
            n += 1

    def _run(self, connection: socket.socket, n: int) -> None:
        with contextlib.suppress(OSError):
            self._script(connection, n)

    @property
    def connections(self) -> list[int]:
        return [n for n, _ in self.requests]

    def __enter__(self) -> ScriptedWorker:
        thread = threading.Thread(target=self._accept, daemon=True)
        self._threads.append(thread)
        thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        for connection in self._connections:
            connection.close()
        for thread in self._threads:
            thread.join(5)


def keep_answering(worker: ScriptedWorker, answer: bytes = OK) -> Script:
    def script(connection: socket.socket, n: int) -> None:
        while worker.read(connection, n) is not None:
            connection.sendall(answer)

    return script


async def call(client: WorkerClient, worker: ScriptedWorker) -> tuple[ReplyKind, int | None, bytes, str]:
    reply = await client.execute(worker.url, TOKEN, b"{}", deadline_seconds=5)
    return reply.kind, reply.status, reply.body, reply.error


async def test_calls_one_after_another_share_one_kept_alive_connection() -> None:
    worker = ScriptedWorker(lambda connection, n: keep_answering(worker)(connection, n))
    with worker:
        async with WorkerClient() as client:
            replies = [await call(client, worker) for _ in range(3)]
    assert replies == [(ReplyKind.ANSWERED, 200, b"ok", "")] * 3
    assert worker.connections == [0, 0, 0]


async def test_a_connection_the_worker_closed_while_idle_is_not_reused_even_before_the_loop_has_seen_it() -> None:
    """A worker with a keep-alive shorter than the pool's closes an idle connection; its FIN sits unread in the
    socket (the loop is held still here) when the next job comes: the job goes on a new connection, answered."""
    release, closed = threading.Event(), threading.Event()

    def script(connection: socket.socket, n: int) -> None:
        worker.read(connection, n)
        connection.sendall(OK)
        if n == 0:
            release.wait(5)
            connection.close()  # the worker's keep-alive ran out
            closed.set()
        else:
            keep_answering(worker)(connection, n)

    worker = ScriptedWorker(script)
    with worker:
        async with WorkerClient() as client:
            first = await call(client, worker)
            release.set()
            assert closed.wait(5)  # blocks the loop: the connection's end is not read by it, only by the kernel
            second = await call(client, worker)
    assert first == second == (ReplyKind.ANSWERED, 200, b"ok", "")
    assert worker.connections == [0, 1]  # the first connection carried one request only


async def test_a_reused_connection_lost_before_any_answer_is_broken_and_the_job_is_never_sent_again() -> None:
    """The worker read the job and its connection ended with no answer: it may have run it (a worker that crashed
    looks the same), so the call is BROKEN, as aiohttp reports a POST then, and nothing is resent."""

    def script(connection: socket.socket, n: int) -> None:
        if n == 0:
            worker.read(connection, n)
            connection.sendall(OK)
            worker.read(connection, n)  # the second job arrives on the kept-alive connection…
            connection.close()  # …and the worker goes away without a word
        else:
            keep_answering(worker)(connection, n)

    worker = ScriptedWorker(script)
    with worker:
        async with WorkerClient() as client:
            assert (await call(client, worker))[0] is ReplyKind.ANSWERED
            kind, _, _, error = await call(client, worker)
            assert kind is ReplyKind.BROKEN
            assert "before any answer" in error and "reused" in error and TOKEN not in error
            assert worker.connections == [0, 0]  # sent once, never again
            assert (await call(client, worker))[0] is ReplyKind.ANSWERED  # the next job: a new connection
    assert worker.connections == [0, 0, 1]


async def test_a_health_probe_lost_on_a_reused_connection_is_retried_once_on_a_new_one() -> None:
    """A GET may be repeated (RFC 9112, 9.3.1): a probe on a connection the worker dropped asks again."""

    def script(connection: socket.socket, n: int) -> None:
        if n == 0:
            worker.read(connection, n)
            connection.sendall(OK)
            worker.read(connection, n)
            connection.close()
        else:
            keep_answering(worker)(connection, n)

    worker = ScriptedWorker(script)
    with worker:
        async with WorkerClient() as client:
            assert await client.health(worker.url)
            assert await client.health(worker.url)
    assert [line for _, line in worker.requests] == [b"GET /health HTTP/1.1"] * 3
    assert worker.connections == [0, 0, 1]


async def test_a_worker_announcing_a_short_keep_alive_gets_a_new_connection_after_it() -> None:
    """`Keep-Alive: timeout=1` leaves no time to reuse the connection safely (a second's margin): a new one."""
    worker = ScriptedWorker(
        lambda connection, n: keep_answering(
            worker, b"HTTP/1.1 200 OK\r\nKeep-Alive: timeout=1\r\nContent-Length: 2\r\n\r\nok"
        )(connection, n)
    )
    with worker:
        async with WorkerClient() as client:
            await call(client, worker)
            await call(client, worker)
    assert worker.connections == [0, 1]


async def test_an_answer_with_connection_close_is_the_connections_last() -> None:
    worker = ScriptedWorker(
        lambda connection, n: keep_answering(
            worker, b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok"
        )(connection, n)
    )
    with worker:
        async with WorkerClient() as client:
            replies = [await call(client, worker) for _ in range(2)]
    assert replies == [(ReplyKind.ANSWERED, 200, b"ok", "")] * 2
    assert worker.connections == [0, 1]


async def test_idle_connections_are_closed_after_the_keep_alive() -> None:
    ended = threading.Event()

    def script(connection: socket.socket, n: int) -> None:
        keep_answering(worker)(connection, n)
        ended.set()  # the client closed the connection

    worker = ScriptedWorker(script)
    with worker:
        async with WorkerClient(keepalive_seconds=0.2) as client:
            await call(client, worker)
            assert await asyncio.to_thread(ended.wait, 5)


@pytest.mark.parametrize(
    ("answer", "body"),
    [
        pytest.param(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", b"hello", id="content-length"),
        pytest.param(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nhel\r\n2\r\nlo\r\n0\r\n\r\n",
            b"hello",
            id="chunked",
        ),
        pytest.param(b"HTTP/1.1 200 OK\r\n\r\nhello", b"hello", id="until-the-connection-ends"),
        pytest.param(b"HTTP/1.0 200 OK\r\n\r\nhello", b"hello", id="http-1.0"),
        pytest.param(
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", b"hello", id="1xx"
        ),
    ],
)
async def test_every_way_an_answer_may_be_delimited(answer: bytes, body: bytes) -> None:
    def script(connection: socket.socket, n: int) -> None:
        worker.read(connection, n)
        connection.sendall(answer)
        if b"Content-Length" not in answer and b"chunked" not in answer:
            connection.close()  # the end of the body is the end of the connection

    worker = ScriptedWorker(script)
    with worker:
        async with WorkerClient() as client:
            assert await call(client, worker) == (ReplyKind.ANSWERED, 200, body, "")


@pytest.mark.parametrize(
    "answer",
    [
        pytest.param(b"garbage\r\n\r\n", id="not-http"),
        pytest.param(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort", id="cut-short"),
        pytest.param(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel", id="chunks-cut-short"),
    ],
)
async def test_a_broken_answer_is_broken(answer: bytes) -> None:
    def script(connection: socket.socket, n: int) -> None:
        worker.read(connection, n)
        connection.sendall(answer)
        connection.close()

    worker = ScriptedWorker(script)
    with worker:
        async with WorkerClient() as client:
            kind, _, _, error = await call(client, worker)
    assert kind is ReplyKind.BROKEN and error and TOKEN not in error


async def test_a_close_delimited_answer_cut_by_a_reset_is_broken_not_complete() -> None:
    """Only a clean end of the connection ends such a body: a reset may have cut it anywhere."""

    def script(connection: socket.socket, n: int) -> None:
        worker.read(connection, n)
        connection.sendall(b"HTTP/1.1 200 OK\r\n\r\nhel")
        connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        connection.close()  # a linger of 0: the kernel resets the connection instead of ending it

    worker = ScriptedWorker(script)
    with worker:
        async with WorkerClient() as client:
            kind, _, body, error = await call(client, worker)
    assert (kind, body) == (ReplyKind.BROKEN, b"")
    assert "mid-answer" in error and TOKEN not in error


def endless_header(ended: threading.Event) -> Script:
    """A worker whose answer's head never ends: one header's value, sent until the client closes the connection."""

    def script(connection: socket.socket, n: int) -> None:
        read_request(connection)
        try:
            connection.sendall(b"HTTP/1.1 200 OK\r\nX-Big: ")
            while True:
                connection.sendall(b"x" * 65536)
        finally:
            ended.set()

    return script


def many_fields(count: int, size: int = 1) -> bytes:
    """An answer whose head has `count` fields, Content-Length the last of them."""
    fields = b"".join(b"X-Field-%d: %s\r\n" % (i, b"v" * size) for i in range(count - 1))
    return b"HTTP/1.1 200 OK\r\n" + fields + b"Content-Length: 2\r\n\r\nok"


async def test_an_answer_head_that_never_ends_is_broken_and_its_connection_closed() -> None:
    """llhttp bounds no head and httptools grows a header by concatenation: the client bounds it (64 KiB)."""
    ended = threading.Event()
    with ScriptedWorker(endless_header(ended)) as worker:
        async with WorkerClient() as client:
            reply = await client.execute(worker.url, TOKEN, b"{}", deadline_seconds=30)
            assert await asyncio.to_thread(ended.wait, 5)  # the client closed it: the worker's send failed
    assert (reply.kind, reply.error) == (ReplyKind.BROKEN, "answer head too large")


async def test_a_health_probe_and_a_cancel_meet_the_same_bound_on_an_answer_head() -> None:
    ended = threading.Event()
    with ScriptedWorker(endless_header(ended)) as worker:
        async with WorkerClient(probe_timeout_seconds=30, cancel_timeout_seconds=30) as client:
            healthy = await client.health(worker.url)
            cancel = await client.cancel(worker.url, TOKEN, "build-1")
    assert not healthy
    assert (cancel.status, cancel.error) == (None, "answer head too large")


async def test_an_answer_head_of_more_than_a_hundred_fields_is_broken() -> None:
    worker = ScriptedWorker(lambda connection, n: keep_answering(worker, many_fields(101))(connection, n))
    with worker:
        async with WorkerClient() as client:
            assert await call(client, worker) == (ReplyKind.BROKEN, None, b"", "answer head too large")


async def test_an_answer_head_within_both_bounds_is_answered() -> None:
    """A hundred fields, the head just under 64 KiB, split across reads as the worker sends it in pieces."""
    answer = many_fields(100, size=630)
    assert 60 * 1024 < answer.index(b"\r\n\r\n") < 64 * 1024

    def script(connection: socket.socket, n: int) -> None:
        while worker.read(connection, n) is not None:
            for start in range(0, len(answer), 7000):
                connection.sendall(answer[start : start + 7000])

    worker = ScriptedWorker(script)
    with worker:
        async with WorkerClient() as client:
            replies = [await call(client, worker) for _ in range(2)]
    assert replies == [(ReplyKind.ANSWERED, 200, b"ok", "")] * 2
    assert worker.connections == [0, 0]


async def test_a_connection_answered_before_its_payload_went_out_whole_is_not_reused() -> None:
    """A worker refuses a 64 MiB payload before reading it, with keep-alive: the rest of the payload still waits
    in the client's buffer, so a job sent next on that connection would follow it. The next job takes a new one."""
    payload = b"x" * (64 * 1024 * 1024)
    drain = threading.Event()

    def script(connection: socket.socket, n: int) -> None:
        if n > 0:
            keep_answering(worker)(connection, n)
            return
        head = b""
        while b"\r\n\r\n" not in head:
            head += connection.recv(65536)
        worker.requests.append((n, head.split(b"\r\n", 1)[0]))
        connection.sendall(b"HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\n\r\n")
        drain.wait(30)  # the client has its answer; only now does the worker read (and drop) the payload's rest
        left = len(payload) - len(head.partition(b"\r\n\r\n")[2])
        while left > 0 and (chunk := connection.recv(min(left, 1 << 20))):
            left -= len(chunk)
        if worker.read(connection, n) is not None:  # a job that came after the payload on this connection
            connection.sendall(b"HTTP/1.1 409 Conflict\r\nContent-Length: 0\r\n\r\n")

    worker = ScriptedWorker(script)
    with worker:
        async with WorkerClient() as client:
            refused = await client.execute(worker.url, TOKEN, payload, deadline_seconds=30)
            drain.set()
            second = await call(client, worker)
    assert (refused.kind, refused.status) == (ReplyKind.ANSWERED, 401)
    assert second == (ReplyKind.ANSWERED, 200, b"ok", "")
    assert worker.connections == [0, 1]


async def test_trace_values_that_could_start_a_header_of_their_own_are_not_forwarded() -> None:
    worker = ScriptedWorker(lambda connection, n: keep_answering(worker)(connection, n))
    with worker:
        async with WorkerClient() as client:
            trace = {"traceparent": "00-abc\r\nX-Injected: 1", "tracestate": "k=v"}
            reply = await client.execute(worker.url, TOKEN, b"{}", deadline_seconds=5, trace=trace)
    assert reply.kind is ReplyKind.ANSWERED
    [(_, line)] = worker.requests
    assert line == b"POST /execute HTTP/1.1"


async def test_an_endpoint_under_a_path_keeps_it() -> None:
    worker = ScriptedWorker(lambda connection, n: keep_answering(worker)(connection, n))
    with worker:
        async with WorkerClient() as client:
            reply = await client.execute(f"{worker.url}/machine-7/", TOKEN, b"{}", deadline_seconds=5)
    assert reply.kind is ReplyKind.ANSWERED
    assert worker.requests == [(0, b"POST /machine-7/execute HTTP/1.1")]


@contextlib.contextmanager
def black_hole() -> Iterator[str]:
    """A port whose accept queue is full: the kernel drops a new connection's SYN, so a connect just waits."""
    listener = socket.create_server(("127.0.0.1", 0), backlog=0)
    port = listener.getsockname()[1]
    waiting = [socket.socket() for _ in range(3)]
    try:
        for queued in waiting:
            queued.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                queued.connect(("127.0.0.1", port))
        yield f"http://127.0.0.1:{port}"
    finally:
        for queued in waiting:
            queued.close()
        listener.close()


async def test_no_connection_within_the_connect_timeout_is_unreachable_and_within_the_deadline_is_deadline() -> None:
    with black_hole() as url:
        async with WorkerClient(connect_timeout_seconds=0.3) as client:
            unreachable = await client.execute(url, TOKEN, b"{}", deadline_seconds=30)
            deadline = await client.execute(url, TOKEN, b"{}", deadline_seconds=0.1)  # the job's deadline first
    assert (unreachable.kind, unreachable.error) == (ReplyKind.UNREACHABLE, "no connection within 0.3 s")
    assert unreachable.cause == "connect_timeout"
    assert deadline.kind is ReplyKind.DEADLINE


# ------------------------------------------------------------------------------------------------------ TLS


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and its key."""
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
         "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True, timeout=30,
    )  # fmt: skip
    return cert, key


@contextlib.asynccontextmanager
async def tls_worker(certificate: tuple[Path, Path], connections: set[int] | None = None) -> AsyncIterator[str]:
    """An https worker echoing its payload; it notes each connection a request came on in `connections`."""

    async def execute(request: web.Request) -> web.Response:
        if connections is not None:
            connections.add(id(request.transport))
        return web.Response(body=await request.read())

    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(*certificate)
    app = web.Application()
    app.router.add_post("/execute", execute)
    runner = web.AppRunner(app, handle_signals=False)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port, ssl_context=context).start()
    try:
        yield f"https://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


async def test_an_https_worker_is_reached_over_verified_tls(certificate: tuple[Path, Path]) -> None:
    trusted = ssl.create_default_context(cafile=str(certificate[0]))
    connections: set[int] = set()
    async with tls_worker(certificate, connections) as url, WorkerClient(ssl_context=trusted) as client:
        replies = [await client.execute(url, TOKEN, b"payload", deadline_seconds=5) for _ in range(3)]
    assert [(r.kind, r.status, r.body) for r in replies] == [(ReplyKind.ANSWERED, 200, b"payload")] * 3
    assert len(connections) == 1  # kept alive: one handshake for the three


async def test_an_https_worker_whose_certificate_is_not_trusted_is_unreachable(certificate: tuple[Path, Path]) -> None:
    """The default context (the system's CAs) refuses a self-signed certificate: the payload never leaves."""
    async with tls_worker(certificate) as url, WorkerClient() as client:
        reply = await client.execute(url, TOKEN, b"payload", deadline_seconds=5)
    assert (reply.kind, reply.cause) == (ReplyKind.UNREACHABLE, "tls")
    assert "certificate verify failed" in reply.error and TOKEN not in reply.error
