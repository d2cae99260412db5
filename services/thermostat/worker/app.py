"""The worker's routes: a parsed request in, an answer or a waiting execution out (no sockets here).

Each `/execute` runs its handler; one that has to wait (handlers.py) runs as a task, registered under the
build its payload names so `POST /v1/executions/{build_id}/cancel` can cancel it, and that execute then
answers 409. W3C `traceparent` / `tracestate` and the `Content-Type` received on `/execute` are echoed back
in `X-Strata-Received-*` response headers, so a test can see what the pool forwarded (and that it set no
content type). With STRATA_WORKER_JOURNAL set, each authorized `/execute` appends the payload's sha256 to
that file (one short O_APPEND write, so workers sharing a file never interleave within a line).

Header names arrive lower-cased and values stay bytes: the hot path decodes nothing.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import os
from dataclasses import dataclass
from urllib.parse import unquote_to_bytes

from .config import WorkerConfig
from .handlers import Handler, build_handler, build_id_of
from .result import HandlerResult

ECHOED_HEADERS = (
    (b"traceparent", b"X-Strata-Received-Traceparent"),
    (b"tracestate", b"X-Strata-Received-Tracestate"),
    (b"content-type", b"X-Strata-Received-Content-Type"),
)
OCTETS = b"application/octet-stream"
TEXT = b"text/plain; charset=utf-8"
JSON = b"application/json"

Headers = tuple[tuple[bytes, bytes], ...]


@dataclass(frozen=True, slots=True)
class Request:
    method: bytes
    path: bytes  # the raw path, query removed
    headers: dict[bytes, bytes]  # lower-cased names; the first of repeated fields wins
    body: bytes


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    body: bytes = b""
    content_type: bytes | None = None
    headers: Headers = ()


@dataclass(frozen=True, slots=True)
class Execution:
    """A waiting handler's run: its task, the build it is registered under, the headers its answer echoes."""

    task: asyncio.Task[HandlerResult]
    build_id: str | None
    echoed: Headers


def json_response(status: int, document: object, headers: Headers = ()) -> Response:
    return Response(status, json.dumps(document).encode(), JSON, headers)


UNAUTHORIZED = json_response(401, {"detail": "missing or invalid bearer token"}, ((b"WWW-Authenticate", b"Bearer"),))
NOT_FOUND = json_response(404, {"detail": "not found"})


def method_not_allowed(allowed: bytes) -> Response:
    return json_response(405, {"detail": "method not allowed"}, ((b"Allow", allowed),))


class Worker:
    """Worker answers the contract's routes and keeps the registry of waiting executions."""

    def __init__(self, config: WorkerConfig, handler: Handler | None = None) -> None:
        self._config = config
        self._run = handler or build_handler(config)
        self._expected = f"Bearer {config.token}".encode()
        self.active: set[asyncio.Task[HandlerResult]] = set()  # every waiting execution
        self._running: dict[str, asyncio.Task[HandlerResult]] = {}  # by build id

    def respond(self, request: Request) -> Response | Execution:
        path = request.path
        if path == b"/execute":
            return self._execute(request) if request.method == b"POST" else method_not_allowed(b"POST")
        if path == b"/health":
            return self._health() if request.method in (b"GET", b"HEAD") else method_not_allowed(b"GET, HEAD")
        build_id = _cancelled_build(path)
        if build_id is not None:
            return self._cancel(request, build_id) if request.method == b"POST" else method_not_allowed(b"POST")
        return NOT_FOUND

    def finish(self, execution: Execution) -> Response:
        """The answer of an execution whose task is done; it leaves the registry either way."""
        task = execution.task
        self.active.discard(task)
        if execution.build_id is not None and self._running.get(execution.build_id) is task:
            del self._running[execution.build_id]
        if task.cancelled():
            return Response(409, f"execution {execution.build_id} cancelled".encode(), TEXT, execution.echoed)
        if task.exception() is not None:
            return Response(500, b"handler raised", TEXT, execution.echoed)
        return _answer(task.result(), execution.echoed)

    def _authorized(self, request: Request) -> bool:
        return hmac.compare_digest(request.headers.get(b"authorization", b""), self._expected)

    def _health(self) -> Response:
        return json_response(200, {"status": "ok", "handler": self._config.handler, "running": len(self.active)})

    def _execute(self, request: Request) -> Response | Execution:
        if not self._authorized(request):
            return UNAUTHORIZED
        payload = request.body
        if self._config.journal is not None:
            _journal(self._config.journal, payload)
        headers = request.headers
        echoed = tuple((out, headers[name]) for name, out in ECHOED_HEADERS if name in headers)
        outcome = self._run(payload)
        if isinstance(outcome, HandlerResult):
            return _answer(outcome, echoed)
        task = asyncio.get_running_loop().create_task(outcome)
        self.active.add(task)
        build_id = build_id_of(payload)
        if build_id is not None:
            self._running[build_id] = task
        return Execution(task, build_id, echoed)

    def _cancel(self, request: Request, build_id: str) -> Response:
        if not self._authorized(request):
            return UNAUTHORIZED
        task = self._running.get(build_id)
        if task is None:
            return json_response(404, {"detail": "no running execution for that build"})
        task.cancel()
        return json_response(200, {"cancelled": True})


def _answer(result: HandlerResult, echoed: Headers) -> Response:
    return Response(result.status, result.body, OCTETS, echoed)


def _cancelled_build(path: bytes) -> str | None:
    """The build id of `/v1/executions/{build_id}/cancel` (percent-decoded), else None."""
    if not path.startswith(b"/v1/executions/") or not path.endswith(b"/cancel"):
        return None
    segment = path[len(b"/v1/executions/") : -len(b"/cancel")]
    if not segment or b"/" in segment:
        return None
    return unquote_to_bytes(segment).decode("utf-8", "replace")


def _journal(path: str, payload: bytes) -> None:
    line = (hashlib.sha256(payload).hexdigest() + "\n").encode()
    descriptor = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(descriptor, line)
    finally:
        os.close(descriptor)
