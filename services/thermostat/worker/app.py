"""The worker's HTTP routes on aiohttp's server.

Each `/execute` runs its handler as a task; one whose payload names a build is registered under that id,
so `POST /v1/executions/{build_id}/cancel` can cancel it, and that execute then answers 409. W3C
`traceparent` / `tracestate` and the `Content-Type` received on `/execute` are echoed back in
`X-Strata-Received-*` response headers, so a test can see what the pool forwarded (and that it set no
content type). With STRATA_WORKER_JOURNAL set, each authorized `/execute` appends the payload's sha256 to
that file (one short O_APPEND write, so workers sharing a file never interleave within a line).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import os

from aiohttp import web

from .config import WorkerConfig
from .handlers import Handler, HandlerResult, build_handler, build_id_of

ECHOED_HEADERS = {
    "traceparent": "X-Strata-Received-Traceparent",
    "tracestate": "X-Strata-Received-Tracestate",
    "Content-Type": "X-Strata-Received-Content-Type",
}

_RUNNING: web.AppKey[dict[str, asyncio.Task[HandlerResult]]] = web.AppKey("running", dict)  # by build id
_ACTIVE: web.AppKey[set[asyncio.Task[HandlerResult]]] = web.AppKey("active", set)  # every execution


def create_app(config: WorkerConfig, handler: Handler | None = None) -> web.Application:
    run = handler or build_handler(config)
    expected = f"Bearer {config.token}".encode()
    app = web.Application(client_max_size=config.max_payload_bytes)
    app[_RUNNING] = {}
    app[_ACTIVE] = set()

    def authorized(request: web.Request) -> bool:
        return hmac.compare_digest(request.headers.get("Authorization", "").encode(), expected)

    async def health(request: web.Request) -> web.Response:
        return web.json_response({"status": "ok", "handler": config.handler, "running": len(app[_ACTIVE])})

    async def execute(request: web.Request) -> web.Response:
        if not authorized(request):
            return _unauthorized()
        payload = await request.read()
        if config.journal is not None:
            _journal(config.journal, payload)
        echoed = {out: request.headers[name] for name, out in ECHOED_HEADERS.items() if name in request.headers}
        build_id = build_id_of(payload)
        task: asyncio.Task[HandlerResult] = asyncio.ensure_future(run(payload))
        app[_ACTIVE].add(task)
        if build_id is not None:
            app[_RUNNING][build_id] = task
        try:
            result = await asyncio.shield(task)
        except asyncio.CancelledError:
            if not task.cancelled():  # the client went away: stop the work too
                task.cancel()
                raise
            return web.Response(status=409, text=f"execution {build_id} cancelled", headers=echoed)
        finally:
            app[_ACTIVE].discard(task)
            if build_id is not None and app[_RUNNING].get(build_id) is task:
                del app[_RUNNING][build_id]
        return web.Response(status=result.status, body=result.body, headers=echoed)

    async def cancel(request: web.Request) -> web.Response:
        if not authorized(request):
            return _unauthorized()
        task = app[_RUNNING].get(request.match_info["build_id"])
        if task is None:
            return web.json_response({"detail": "no running execution for that build"}, status=404)
        task.cancel()
        return web.json_response({"cancelled": True})

    app.router.add_get("/health", health)
    app.router.add_post("/execute", execute)
    app.router.add_post("/v1/executions/{build_id}/cancel", cancel)
    return app


def _journal(path: str, payload: bytes) -> None:
    line = (hashlib.sha256(payload).hexdigest() + "\n").encode()
    descriptor = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(descriptor, line)
    finally:
        os.close(descriptor)


def _unauthorized() -> web.Response:
    return web.Response(
        status=401,
        text=json.dumps({"detail": "missing or invalid bearer token"}),
        content_type="application/json",
        headers={"WWW-Authenticate": "Bearer"},
    )
