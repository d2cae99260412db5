"""An event-loop listener for the simulated pods' /metrics: the proxy surface the monitor scrapes, cheap per request.

The simulator's threaded server spends a thread per connection and a few hundred microseconds of Python per
request; the monitor keeps one connection per pod and scrapes them all at once, so at 10,000 pods the simulator
on the same two cores cost as much CPU as the monitor it was there to measure, and its threads (10,000 of them,
each sleeping out a delay fault) were the limit (issue 26). This listener serves the same answers from the same
world — `PodWorld.metrics` under its lock, the same scripted faults (delay, status, hang), the same request log —
on one asyncio loop in a background thread: a request is parsed by httptools and a delay is a timer, not a thread.

Only `GET /proxy/{podId}-{port}/metrics` is served here (everything else is 404): the v2 API, the control API and
the pool's machine forwarding stay on the main server. `RunPodSimulator(fast_proxy=True)` starts it, and
`proxy_url_template` then points at it.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from typing import TYPE_CHECKING, cast

import httptools

from thermostat.dev.simulators.serving import Answer, RecordedRequest

if TYPE_CHECKING:
    from thermostat.dev.simulators.runpod.server import RunPodSimulator

_REASONS = {200: "OK", 403: "Forbidden", 404: "Not Found", 500: "Internal Server Error", 502: "Bad Gateway"}
_NOT_FOUND: Answer = 404, {"Content-Type": "text/plain; charset=utf-8"}, b"404 page not found\n"


class FastProxy:
    """FastProxy runs the listener on its own loop and thread; `start` returns once it listens."""

    def __init__(self, simulator: RunPodSimulator, host: str) -> None:
        self._simulator = simulator
        self._host = host
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.Server | None = None
        self._thread: threading.Thread | None = None
        self.port = 0

    def start(self) -> None:
        ready = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(ready,), name="runpod-sim-fast-proxy", daemon=True)
        self._thread.start()
        ready.wait()

    def stop(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=5)
        self._loop = self._thread = None

    def _run(self, ready: threading.Event) -> None:
        loop = self._loop = asyncio.new_event_loop()
        server = self._server = loop.run_until_complete(
            loop.create_server(lambda: _Connection(self._simulator), self._host, 0, backlog=4096)
        )
        self.port = int(server.sockets[0].getsockname()[1])
        ready.set()
        try:
            loop.run_forever()
        finally:
            server.close()
            for task in asyncio.all_tasks(loop):
                task.cancel()
            with contextlib.suppress(Exception):
                loop.run_until_complete(asyncio.sleep(0))
            loop.close()


class _Connection(asyncio.Protocol):
    """One kept-alive client connection; requests are answered in the order they arrive."""

    def __init__(self, simulator: RunPodSimulator) -> None:
        self._simulator = simulator
        self._parser = httptools.HttpRequestParser(self)
        self._transport: asyncio.Transport | None = None
        self._url = b""
        self._headers: dict[str, str] = {}
        self._queue: list[tuple[str, str, dict[str, str], bool]] = []
        self._busy = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError:
            if self._transport is not None:
                self._transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None

    # httptools callbacks
    def on_message_begin(self) -> None:
        self._url, self._headers = b"", {}

    def on_url(self, url: bytes) -> None:
        self._url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_message_complete(self) -> None:
        method = self._parser.get_method().decode()
        keep_alive = self._parser.should_keep_alive()
        path, _, query = self._url.decode("latin-1").partition("?")
        self._queue.append((method, path + ("?" + query if query else ""), self._headers, keep_alive))
        if not self._busy:
            self._busy = True
            asyncio.get_running_loop().create_task(self._drain())

    async def _drain(self) -> None:
        try:
            while self._queue and self._transport is not None:
                method, target, headers, keep_alive = self._queue.pop(0)
                answer = await self._answer(method, target, headers)
                if answer is None or self._transport is None:  # a hang: the connection is dropped unanswered
                    if self._transport is not None:
                        self._transport.close()
                    return
                self._send(answer, keep_alive)
                if not keep_alive:
                    self._transport.close()
                    return
        finally:
            self._busy = False

    async def _answer(self, method: str, target: str, headers: dict[str, str]) -> Answer | None:
        simulator = self._simulator
        path, _, query = target.partition("?")
        request = RecordedRequest(
            method=method, path=path, query=query, headers=headers, body="", json_body=None, received_at=time.time()
        )
        simulator._request_log.record(request)
        fault = simulator._take_fault(method, path)
        if fault is not None:
            simulator._note_fault(request, fault)
            if fault.delay_seconds > 0:
                await asyncio.sleep(fault.delay_seconds)
            if fault.hang:
                return None
            if fault.status is not None and not fault.commit_then_fail:
                return fault.response()
        answer = _metrics(simulator, method, path, headers.get("user-agent", ""))
        return fault.response() if fault is not None and fault.commit_then_fail else answer

    def _send(self, answer: Answer, keep_alive: bool) -> None:
        status, fields, body = answer
        head = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Status')}\r\n"]
        head.extend(f"{name}: {value}\r\n" for name, value in fields.items())
        head.append(f"Content-Length: {len(body)}\r\n")
        if not keep_alive:
            head.append("Connection: close\r\n")
        head.append("\r\n")
        assert self._transport is not None
        self._transport.write("".join(head).encode("latin-1") + body)


def _metrics(simulator: RunPodSimulator, method: str, path: str, user_agent: str) -> Answer:
    """`GET /proxy/{podId}-{port}/metrics`, answered by the world as the main server answers it."""
    parts = path.split("/")
    if method != "GET" or len(parts) != 4 or parts[1] != "proxy" or parts[3] != "metrics" or "-" not in parts[2]:
        return _NOT_FOUND
    pod_id, _, port = parts[2].rpartition("-")
    if not port.isdigit():
        return _NOT_FOUND
    return simulator.world.metrics(pod_id, int(port), user_agent)
