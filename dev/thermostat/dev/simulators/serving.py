"""The HTTP plumbing every simulator shares: a request recorded as it arrived, an answer sent, a server run
on a background thread, and the standalone process that waits for a signal.

A simulator decides what to answer (`RecordingHandler.answer`); this module does the rest the same way for
Docker, Fly and RunPod, so a shape pinned against one simulator's request log reads like another's.
"""

from __future__ import annotations

import abc
import json
import logging
import signal
import socketserver
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from types import FrameType, TracebackType
from typing import Any, ClassVar, Generic, Self, TypeVar
from urllib.parse import parse_qs

Answer = tuple[int, dict[str, str], bytes]


@dataclass(frozen=True, slots=True, kw_only=True)
class RecordedRequest:
    """RecordedRequest is one request as it arrived, for pinning exact shapes in tests.

    `path` is the raw, still percent-encoded path; `headers` have lower-cased names; `json_body` is the decoded
    body or None when there was none or it was not JSON.
    """

    method: str
    path: str
    query: str
    headers: dict[str, str]
    body: str
    json_body: object
    received_at: float
    raw_body: bytes | None = field(default=None, repr=False)  # the bytes as sent, for forwarding to a machine

    @property
    def params(self) -> dict[str, list[str]]:
        return parse_qs(self.query, keep_blank_values=True)

    def to_json(self) -> dict[str, object]:
        return {
            "method": self.method,
            "path": self.path,
            "query": self.query,
            "headers": self.headers,
            "body": self.body,
            "json": self.json_body,
            "receivedAt": self.received_at,
        }


class RequestLog:
    """RequestLog keeps the last `size` requests a simulator received, oldest first, for shape pins."""

    def __init__(self, size: int = 10_000) -> None:
        self._lock = threading.Lock()
        self._requests: deque[RecordedRequest] = deque(maxlen=size)

    def record(self, request: RecordedRequest) -> None:
        with self._lock:
            self._requests.append(request)

    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._requests)

    def clear(self) -> None:
        with self._lock:
            self._requests.clear()


def json_answer(status: int, body: object, *, content_type: str = "application/json") -> Answer:
    return status, {"Content-Type": content_type}, json.dumps(body).encode()


def _decode(content: bytes) -> object:
    if not content:
        return None
    try:
        decoded: object = json.loads(content)
    except (ValueError, UnicodeDecodeError):
        return None
    return decoded


class RecordingHandler(BaseHTTPRequestHandler, metaclass=abc.ABCMeta):
    """RecordingHandler reads each request into a RecordedRequest and sends the simulator's answer.

    A subclass names itself (`label`, in its log lines), says what to `answer` and what a crash answers
    (`failure`), and adds the methods beyond GET, POST and DELETE that its API has.
    """

    label: ClassVar[str]
    protocol_version = "HTTP/1.1"
    timeout = 30  # idle keep-alive connections release their thread

    @abc.abstractmethod
    def answer(self, request: RecordedRequest) -> Answer:
        """What the simulator answers `request`."""

    @abc.abstractmethod
    def failure(self) -> Answer:
        """The answer to a request whose handling raised: the provider's own shape of a 500."""

    def log_message(self, format: str, *args: Any) -> None:
        # Request lines only (method, path, status); headers, and with them any bearer, are never logged.
        self._log.debug(f"{self.label}: " + format, *args)

    @property
    def _log(self) -> logging.Logger:
        return logging.getLogger(type(self).__module__)

    def do_GET(self) -> None:
        self._serve()

    def do_POST(self) -> None:
        self._serve()

    def do_DELETE(self) -> None:
        self._serve()

    def _serve(self) -> None:
        request = self.read_request()
        self.send_answer(self.answer_or_failure(request))

    def read_request(self) -> RecordedRequest:
        """The request, its body read by Content-Length."""
        raw_path, _, query = self.path.partition("?")
        length = int(self.headers.get("Content-Length") or 0)
        content = self.rfile.read(length) if length > 0 else b""
        return RecordedRequest(
            method=self.command,
            path=raw_path,
            query=query,
            headers={name.lower(): value for name, value in self.headers.items()},
            body=content.decode("utf-8", errors="replace"),
            json_body=_decode(content),
            received_at=time.time(),
            raw_body=content,
        )

    def answer_or_failure(self, request: RecordedRequest) -> Answer:
        try:
            return self.answer(request)
        except Exception:
            self._log.exception("%s: %s %s failed", self.label, self.command, request.path)
            return self.failure()

    def send_answer(self, answer: Answer) -> None:
        status, headers, content = answer
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(content)))
        self.end_headers()
        if content and self.command != "HEAD":
            self.wfile.write(content)


_Served = TypeVar("_Served", bound=socketserver.BaseServer)


class ServedSimulator(abc.ABC, Generic[_Served]):
    """A simulator serving from a background thread, keeping what it received; as a context manager it starts
    on entry and stops on exit. A subclass builds its server in `start` and hands it to `_serve`."""

    def __init__(self, *, request_log_size: int = 10_000) -> None:
        self._request_log = RequestLog(request_log_size)
        self._server: _Served | None = None
        self._thread: threading.Thread | None = None

    @abc.abstractmethod
    def start(self) -> Self:
        """Serve from a background thread."""

    @abc.abstractmethod
    def stop(self) -> None:
        """Stop serving; nothing the simulator started outlives it."""

    def _serve(self, server: _Served, thread_name: str) -> Self:
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, name=thread_name, daemon=True
        )
        self._thread.start()
        return self

    def _stop_serving(self) -> None:
        if self._server is not None and self._thread is not None:
            self._server.shutdown()
            self._server.server_close()
            self._thread.join()
            self._server = self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def requests(self) -> list[RecordedRequest]:
        """The requests received, oldest first."""
        return self._request_log.requests()

    def clear_requests(self) -> None:
        self._request_log.clear()


def wait_for_signal(ready_lines: Sequence[str]) -> None:
    """A standalone simulator's life: print `ready_lines` (what a client exports), then block until SIGTERM or
    SIGINT."""
    stop = threading.Event()

    def _on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    for line in ready_lines:
        print(line, flush=True)
    stop.wait()
