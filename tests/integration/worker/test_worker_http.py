"""The reference worker speaks HTTP/1.1 correctly on raw sockets: keep-alive, framing, limits, shutdown."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import signal
import sys
from pathlib import Path

import pytest

from tests.fixtures.polling import eventually
from tests.fixtures.workers import (
    WORKER_TOKEN,
    RunningWorker,
    answers_health,
    free_port,
    reference_worker,
    worker_env,
)

AUTH = f"Authorization: Bearer {WORKER_TOKEN}\r\n"


class Answer:
    def __init__(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.status, self.headers, self.body = status, headers, body


class Raw:
    """One TCP connection to a worker, written and read byte for byte."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, worker: RunningWorker) -> Raw:
        host, port = worker.url.removeprefix("http://").split(":")
        return cls(*await asyncio.open_connection(host, int(port)))

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def answer(self, *, head: bool = False) -> Answer:
        status_line = await asyncio.wait_for(self.reader.readline(), 10)
        assert status_line.startswith(b"HTTP/1.1 "), status_line
        headers: dict[str, str] = {}
        while (line := await self.reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        length = 0 if head else int(headers.get("content-length", "0"))
        body = await asyncio.wait_for(self.reader.readexactly(length), 10)
        return Answer(int(status_line.split()[1]), headers, body)

    async def closed_by_worker(self) -> bool:
        """True when the worker ends the stream (nothing more follows); the socket is closed here too."""
        try:
            return await asyncio.wait_for(self.reader.read(1), 10) == b""
        finally:
            await self.close()

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(ConnectionError):
            await self.writer.wait_closed()


def execute(payload: bytes, *extra: str) -> bytes:
    head = f"POST /execute HTTP/1.1\r\nHost: w\r\n{AUTH}Content-Length: {len(payload)}\r\n{''.join(extra)}\r\n"
    return head.encode() + payload


async def test_many_requests_share_one_kept_alive_connection() -> None:
    """Three executes, one after another, on one connection: each answered in turn, the connection stays."""
    async with reference_worker() as worker:
        raw = await Raw.open(worker)
        for n in range(3):
            await raw.send(execute(f"job-{n}".encode()))
            answer = await raw.answer()
            assert (answer.status, answer.body) == (200, f"job-{n}".encode())
            assert "connection" not in answer.headers
        await raw.close()


async def test_pipelined_requests_are_answered_in_order() -> None:
    """Requests written back to back in one write are answered in the order sent, each with its own body."""
    async with reference_worker() as worker:
        raw = await Raw.open(worker)
        await raw.send(execute(b"first") + b"GET /health HTTP/1.1\r\nHost: w\r\n\r\n" + execute(b"third"))
        answers = [await raw.answer() for _ in range(3)]
        assert [a.status for a in answers] == [200, 200, 200]
        assert answers[0].body == b"first"
        assert json.loads(answers[1].body)["status"] == "ok"
        assert answers[2].body == b"third"
        await raw.close()


async def test_requests_pipelined_behind_a_waiting_execution_wait_their_turn() -> None:
    """A health check sent behind a sleeping execute is answered after it, not before."""
    async with reference_worker(STRATA_WORKER_HANDLER="sleep") as worker:
        raw = await Raw.open(worker)
        await raw.send(execute(b'{"seconds": 0.2}') + b"GET /health HTTP/1.1\r\nHost: w\r\n\r\n")
        first, second = await raw.answer(), await raw.answer()
        assert (first.status, first.body) == (200, b"slept 0.2")
        assert second.status == 200
        await raw.close()


async def test_connection_close_is_honoured_after_the_answer() -> None:
    """`Connection: close` gets its answer, marked close, and then the worker closes the socket."""
    async with reference_worker() as worker:
        raw = await Raw.open(worker)
        await raw.send(execute(b"bye", "Connection: close\r\n"))
        answer = await raw.answer()
        assert (answer.status, answer.body, answer.headers["connection"]) == (200, b"bye", "close")
        assert await raw.closed_by_worker()


async def test_http_1_0_without_keep_alive_is_closed_after_the_answer() -> None:
    """An HTTP/1.0 request is answered and the connection closed (no keep-alive asked)."""
    async with reference_worker() as worker:
        raw = await Raw.open(worker)
        await raw.send(b"GET /health HTTP/1.0\r\n\r\n")
        assert (await raw.answer()).status == 200
        assert await raw.closed_by_worker()


async def test_a_chunked_request_body_is_the_payload() -> None:
    """A client may send the payload chunked: the worker reassembles it."""
    async with reference_worker() as worker:
        raw = await Raw.open(worker)
        chunks = b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"
        await raw.send(
            f"POST /execute HTTP/1.1\r\nHost: w\r\n{AUTH}Transfer-Encoding: chunked\r\n\r\n".encode() + chunks
        )
        answer = await raw.answer()
        assert (answer.status, answer.body) == (200, b"hello world")
        await raw.close()


async def test_expect_100_continue_gets_its_interim_answer() -> None:
    """A client that waits for `100 Continue` before its body gets it, then the answer."""
    async with reference_worker() as worker:
        raw = await Raw.open(worker)
        await raw.send(
            f"POST /execute HTTP/1.1\r\nHost: w\r\n{AUTH}Content-Length: 2\r\nExpect: 100-continue\r\n\r\n".encode()
        )
        assert await asyncio.wait_for(raw.reader.readuntil(b"\r\n\r\n"), 10) == b"HTTP/1.1 100 Continue\r\n\r\n"
        await raw.send(b"ok")
        answer = await raw.answer()
        assert (answer.status, answer.body) == (200, b"ok")
        await raw.close()


async def test_expect_100_continue_behind_a_running_request_waits_for_its_turn() -> None:
    """On a pipelined connection `100 Continue` belongs after the answers owed before it: a request whose head
    arrives while another runs gets its interim answer once that one is answered, then its own answer."""
    async with reference_worker(STRATA_WORKER_HANDLER="sleep") as worker:
        raw = await Raw.open(worker)
        expecting = f"POST /execute HTTP/1.1\r\nHost: w\r\n{AUTH}Content-Length: 17\r\nExpect: 100-continue\r\n\r\n"
        await raw.send(execute(b'{"seconds": 0.2}') + expecting.encode())
        first = await raw.answer()
        assert (first.status, first.body) == (200, b"slept 0.2")
        assert await asyncio.wait_for(raw.reader.readuntil(b"\r\n\r\n"), 10) == b"HTTP/1.1 100 Continue\r\n\r\n"
        await raw.send(b'{"seconds": 0.01}')
        second = await raw.answer()
        assert (second.status, second.body) == (200, b"slept 0.01")
        await raw.close()


async def test_a_request_pipelined_behind_connection_close_is_not_read_and_gets_no_100_continue() -> None:
    """Bytes behind a running `Connection: close` request are not read (llhttp calls them an error, which once
    dropped the connection and the running request's answer): that request is answered and the connection
    closed, with no interim answer for the head behind it."""
    async with reference_worker(STRATA_WORKER_HANDLER="sleep") as worker:
        raw = await Raw.open(worker)
        expecting = f"POST /execute HTTP/1.1\r\nHost: w\r\n{AUTH}Content-Length: 2\r\nExpect: 100-continue\r\n\r\n"
        await raw.send(execute(b'{"seconds": 0.2}', "Connection: close\r\n") + expecting.encode())
        answer = await raw.answer()
        assert (answer.status, answer.headers["connection"]) == (200, "close")
        assert await raw.closed_by_worker()


async def test_head_of_health_has_headers_and_no_body() -> None:
    """HEAD /health answers 200 with the GET's length and no body, and the connection stays in step."""
    async with reference_worker() as worker:
        raw = await Raw.open(worker)
        await raw.send(b"HEAD /health HTTP/1.1\r\nHost: w\r\n\r\n" + execute(b"after"))
        head = await raw.answer(head=True)
        assert head.status == 200 and int(head.headers["content-length"]) > 0
        assert (await raw.answer()).body == b"after"
        await raw.close()


@pytest.mark.parametrize(
    ("request_line", "status", "allow"),
    [
        pytest.param("GET /nowhere", 404, None, id="unknown-route"),
        pytest.param("HEAD /execute/more", 404, None, id="unknown-route-head"),
        pytest.param("GET /execute", 405, "POST", id="get-execute"),
        pytest.param("POST /health", 405, "GET, HEAD", id="post-health"),
        pytest.param("GET /v1/executions/b1/cancel", 405, "POST", id="get-cancel"),
        pytest.param("POST /v1/executions//cancel", 404, None, id="cancel-without-build"),
    ],
)
async def test_unknown_routes_are_404_and_wrong_methods_405(request_line: str, status: int, allow: str | None) -> None:
    """A route the contract does not have is 404; a known route with the wrong method is 405 naming the allowed."""
    async with reference_worker() as worker:
        raw = await Raw.open(worker)
        await raw.send(f"{request_line} HTTP/1.1\r\nHost: w\r\n{AUTH}Content-Length: 0\r\n\r\n".encode())
        answer = await raw.answer(head=request_line.startswith("HEAD"))
        assert answer.status == status
        assert answer.headers.get("allow") == allow
        await raw.send(execute(b"still in step"))
        assert (await raw.answer()).body == b"still in step"
        await raw.close()


@pytest.mark.parametrize(
    "garbage",
    [
        pytest.param(b"NOT HTTP AT ALL\r\n\r\n", id="not-http"),
        pytest.param(b"GET /health HTTP/1.1\r\nBad Header Name: x\r\n\r\n", id="space-in-field-name"),
        pytest.param(b"POST /execute HTTP/1.1\r\nContent-Length: ten\r\n\r\n", id="content-length-not-a-number"),
        pytest.param(b"POST /execute HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", id="bad-chunk-size"),
        pytest.param(b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com\r\n\r\n", id="connect"),
    ],
)
async def test_a_malformed_request_is_400_and_closed(garbage: bytes) -> None:
    """What the parser refuses is answered 400 and the connection closed; the worker serves the next one."""
    async with reference_worker() as worker:
        raw = await Raw.open(worker)
        await raw.send(garbage)
        answer = await raw.answer()
        assert (answer.status, answer.headers["connection"]) == (400, "close")
        assert await raw.closed_by_worker()
        assert await answers_health(worker.url)


async def test_an_upgrade_request_without_a_body_is_answered_as_http_1_1_and_closed(tmp_path: Path) -> None:
    """Upgrade is not spoken here: the request is answered as plain HTTP/1.1, marked close, and the bytes
    after it are never parsed as a request (nothing runs for them)."""
    journal = tmp_path / "journal"
    async with reference_worker(STRATA_WORKER_JOURNAL=str(journal)) as worker:
        raw = await Raw.open(worker)
        upgrade = b"GET /health HTTP/1.1\r\nHost: w\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n"
        await raw.send(upgrade + execute(b"after the upgrade"))
        answer = await raw.answer()
        assert (answer.status, answer.headers["connection"]) == (200, "close")
        assert await raw.closed_by_worker()
    assert _journalled(journal) == []


def smuggling(framing: str) -> bytes:
    """A curl-style `--http2` POST (Upgrade: h2c) whose body is a whole execute request of its own."""
    inner = execute(b"SMUGGLED")
    body = inner if framing == "content-length" else b"%x\r\n%s\r\n0\r\n\r\n" % (len(inner), inner)
    declared = f"Content-Length: {len(body)}" if framing == "content-length" else "Transfer-Encoding: chunked"
    head = (
        f"POST /execute HTTP/1.1\r\nHost: w\r\n{AUTH}Connection: Upgrade, HTTP2-Settings\r\n"
        f"Upgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n{declared}\r\n\r\n"
    )
    return head.encode() + body


@pytest.mark.parametrize("framing", ["content-length", "chunked"])
async def test_an_upgrade_request_with_a_body_is_refused_and_its_body_never_runs(tmp_path: Path, framing: str) -> None:
    """The parser would end an Upgrade request at its head and read its body as the next request (smuggling):
    such a request is refused 400 and closed, and neither it (with an empty payload) nor its body runs."""
    journal = tmp_path / "journal"
    async with reference_worker(STRATA_WORKER_JOURNAL=str(journal)) as worker:
        raw = await Raw.open(worker)
        await raw.send(smuggling(framing))
        answer = await raw.answer()
        assert (answer.status, answer.headers["connection"]) == (400, "close")
        assert "Upgrade" in json.loads(answer.body)["detail"]
        assert await raw.closed_by_worker()
        assert await answers_health(worker.url)
    assert _journalled(journal) == []


async def test_a_content_length_over_the_limit_is_413_before_the_body_is_sent() -> None:
    """The worker refuses a too-large payload from its Content-Length alone, without waiting for the body."""
    async with reference_worker(STRATA_WORKER_MAX_PAYLOAD_BYTES="1000") as worker:
        raw = await Raw.open(worker)
        await raw.send(f"POST /execute HTTP/1.1\r\nHost: w\r\n{AUTH}Content-Length: 1001\r\n\r\n".encode())
        answer = await raw.answer()
        assert answer.status == 413
        assert "1000" in json.loads(answer.body)["detail"]
        assert await raw.closed_by_worker()


async def test_a_payload_at_the_limit_is_accepted() -> None:
    """Exactly the limit goes through."""
    async with reference_worker(STRATA_WORKER_MAX_PAYLOAD_BYTES="1000") as worker:
        raw = await Raw.open(worker)
        await raw.send(execute(b"x" * 1000))
        assert (await raw.answer()).status == 200
        await raw.close()


async def test_a_chunked_body_growing_over_the_limit_is_413() -> None:
    """A chunked body has no length up front: it is refused once its bytes pass the limit."""
    async with reference_worker(STRATA_WORKER_MAX_PAYLOAD_BYTES="1000") as worker:
        raw = await Raw.open(worker)
        await raw.send(f"POST /execute HTTP/1.1\r\nHost: w\r\n{AUTH}Transfer-Encoding: chunked\r\n\r\n".encode())
        await raw.send(b"258\r\n" + b"x" * 600 + b"\r\n" + b"258\r\n" + b"x" * 600 + b"\r\n")
        assert (await raw.answer()).status == 413
        assert await raw.closed_by_worker()


@pytest.mark.parametrize(
    "fields",
    [
        pytest.param("X-Big: " + "a" * 70_000 + "\r\n", id="one-huge-field"),
        pytest.param("".join(f"X-F{n}: v\r\n" for n in range(101)), id="too-many-fields"),
    ],
)
async def test_an_oversized_head_is_431(fields: str) -> None:
    """The request head is bounded in bytes and in fields."""
    async with reference_worker() as worker:
        raw = await Raw.open(worker)
        await raw.send(f"GET /health HTTP/1.1\r\nHost: w\r\n{fields}\r\n".encode())
        assert (await raw.answer()).status == 431
        assert await raw.closed_by_worker()


async def test_a_header_field_that_never_ends_is_431() -> None:
    """A header field sent without end, over several reads, is cut off at the head limit, not buffered on."""
    async with reference_worker() as worker:
        raw = await Raw.open(worker)
        await raw.send(b"GET /health HTTP/1.1\r\nX-Endless: " + b"a" * 600 * 1024)  # over two reads at most 256 KiB
        assert (await raw.answer()).status == 431
        assert await raw.closed_by_worker()


async def test_unauthorized_is_401_with_bearer_challenge_and_json_detail() -> None:
    """401 names the scheme in WWW-Authenticate and explains itself in JSON, without echoing the token."""
    async with reference_worker() as worker:
        raw = await Raw.open(worker)
        await raw.send(b"POST /execute HTTP/1.1\r\nHost: w\r\nAuthorization: Bearer nope\r\nContent-Length: 1\r\n\r\nx")
        answer = await raw.answer()
        assert (answer.status, answer.headers["www-authenticate"]) == (401, "Bearer")
        assert answer.headers["content-type"] == "application/json"
        assert json.loads(answer.body) == {"detail": "missing or invalid bearer token"}
        await raw.close()


async def test_received_content_type_is_echoed() -> None:
    """A Content-Type sent on /execute comes back as X-Strata-Received-Content-Type."""
    async with reference_worker() as worker:
        raw = await Raw.open(worker)
        await raw.send(execute(b"{}", "Content-Type: application/json\r\n"))
        assert (await raw.answer()).headers["x-strata-received-content-type"] == "application/json"
        await raw.close()


async def test_a_percent_encoded_build_id_is_cancelled_by_its_decoded_name() -> None:
    """The pool quotes a build id in the cancel path; the worker matches the decoded id."""
    async with reference_worker(STRATA_WORKER_HANDLER="sleep") as worker:
        raw = await Raw.open(worker)
        await raw.send(execute(b'{"seconds": 60, "build_id": "cell 1/a"}'))
        await eventually(lambda: _running(worker, 1), timeout=10)
        canceller = await Raw.open(worker)
        await canceller.send(f"POST /v1/executions/cell%201%2Fa/cancel HTTP/1.1\r\nHost: w\r\n{AUTH}\r\n".encode())
        assert (await canceller.answer()).status == 200
        answer = await raw.answer()
        assert (answer.status, answer.body) == (409, b"execution cell 1/a cancelled")
        await raw.close()
        await canceller.close()


async def test_a_client_that_goes_away_mid_execute_cancels_it() -> None:
    """Nobody reads the answer of a departed client: its execution is cancelled and leaves the registry."""
    async with reference_worker(STRATA_WORKER_HANDLER="sleep") as worker:
        raw = await Raw.open(worker)
        await raw.send(execute(b'{"seconds": 60, "build_id": "gone"}'))
        await eventually(lambda: _running(worker, 1), timeout=10)
        await raw.close()
        assert await eventually(lambda: _running(worker, 0), timeout=10)
        canceller = await Raw.open(worker)
        await canceller.send(f"POST /v1/executions/gone/cancel HTTP/1.1\r\nHost: w\r\n{AUTH}\r\n".encode())
        assert (await canceller.answer()).status == 404
        await canceller.close()


async def test_the_journal_holds_one_sha256_line_per_authorized_execute(tmp_path: Path) -> None:
    """STRATA_WORKER_JOURNAL gets the payload's sha256 for every authorized execute, none for a refused one."""
    journal = tmp_path / "journal"
    async with reference_worker(STRATA_WORKER_JOURNAL=str(journal)) as worker:
        raw = await Raw.open(worker)
        for payload in (b"one", b"two"):
            await raw.send(execute(payload))
            await raw.answer()
        await raw.send(b"POST /execute HTTP/1.1\r\nHost: w\r\nContent-Length: 5\r\n\r\nthree")
        assert (await raw.answer()).status == 401
        await raw.close()
    assert journal.read_text().splitlines() == [hashlib.sha256(p).hexdigest() for p in (b"one", b"two")]


async def test_a_journal_that_cannot_be_written_is_a_500_and_the_worker_goes_on(tmp_path: Path) -> None:
    """An execute the worker cannot journal (the path is a directory) is 500, without running; the next is served."""
    async with reference_worker(STRATA_WORKER_JOURNAL=str(tmp_path)) as worker:
        raw = await Raw.open(worker)
        await raw.send(execute(b"unjournalled"))
        answer = await raw.answer()
        assert (answer.status, json.loads(answer.body)) == (500, {"detail": "the worker failed to answer"})
        await raw.send(b"GET /health HTTP/1.1\r\nHost: w\r\n\r\n")
        assert (await raw.answer()).status == 200
        await raw.close()


async def test_sigterm_lets_an_execution_in_flight_finish_within_the_grace() -> None:
    """A short job running at SIGTERM still gets its answer (marked close), then the worker exits."""
    async with reference_worker(STRATA_WORKER_HANDLER="sleep") as worker:
        raw = await Raw.open(worker)
        idle = await Raw.open(worker)
        await raw.send(execute(b'{"seconds": 0.3}'))
        await eventually(lambda: _running(worker, 1), timeout=10)
        worker.process.send_signal(signal.SIGTERM)
        answer = await raw.answer()
        assert (answer.status, answer.body, answer.headers["connection"]) == (200, b"slept 0.3", "close")
        assert await raw.closed_by_worker()
        assert await idle.closed_by_worker()
        assert await asyncio.wait_for(worker.process.wait(), 5) == 0


async def test_sigint_with_an_idle_connection_open_exits_at_once() -> None:
    """An idle kept-alive connection does not hold the worker up at SIGINT (Ctrl-C)."""
    async with reference_worker() as worker:
        raw = await Raw.open(worker)
        await raw.send(execute(b"x"))
        await raw.answer()
        worker.process.send_signal(signal.SIGINT)
        assert await raw.closed_by_worker()
        assert await asyncio.wait_for(worker.process.wait(), 5) == 0


async def test_the_worker_runs_on_asyncios_own_loop_without_uvloop() -> None:
    """uvloop is optional: where it cannot be imported the worker serves the same contract."""
    port = free_port()
    without_uvloop = (
        "import runpy, sys; sys.modules['uvloop'] = None; runpy.run_module('thermostat.worker', run_name='__main__')"
    )
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        without_uvloop,
        env=worker_env(STRATA_WORKER_TOKEN=WORKER_TOKEN, STRATA_WORKER_PORT=str(port)),
        stderr=asyncio.subprocess.DEVNULL,
    )
    worker = RunningWorker(url=f"http://127.0.0.1:{port}", token=WORKER_TOKEN, process=process)
    try:
        assert await eventually(lambda: answers_health(worker.url), timeout=15)
        raw = await Raw.open(worker)
        await raw.send(execute(b"plain asyncio"))
        assert (await raw.answer()).body == b"plain asyncio"
        await raw.close()
    finally:
        process.terminate()
        assert await asyncio.wait_for(process.wait(), 5) == 0


async def test_a_taken_port_is_a_clear_error() -> None:
    """A port another process holds stops the worker with a message naming the address, exit 1."""
    async with reference_worker() as worker:
        port = worker.url.rsplit(":", 1)[1]
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "thermostat.worker",
            env=worker_env(STRATA_WORKER_TOKEN="t", STRATA_WORKER_PORT=port),
            stderr=asyncio.subprocess.PIPE,
        )
        _, stderr = await asyncio.wait_for(process.communicate(), 30)
        assert process.returncode == 1
        assert f"cannot listen on 127.0.0.1:{port}".encode() in stderr


async def _running(worker: RunningWorker, count: int) -> bool | None:
    raw = await Raw.open(worker)
    try:
        await raw.send(b"GET /health HTTP/1.1\r\nHost: w\r\n\r\n")
        return True if json.loads((await raw.answer()).body)["running"] == count else None
    finally:
        await raw.close()


def _journalled(journal: Path) -> list[str]:
    return journal.read_text().splitlines() if journal.exists() else []
