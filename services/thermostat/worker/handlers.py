"""The handlers a reference worker can run, chosen by STRATA_WORKER_HANDLER.

echo   answers 200 with the payload, byte for byte
sleep  sleeps, then answers 200 `slept <seconds>`; the duration is the payload's `seconds` (a JSON object
       field, or the whole payload as a bare number), else STRATA_WORKER_SLEEP_SECONDS; a cancel ends it
fail   answers 500 with STRATA_WORKER_FAIL_MESSAGE: a cell whose code raised
python runs the payload (a cell: `{"source": ...}`, or the code as text) in a Python subprocess; its stdout
       is the result, a non-zero exit a 500 with stderr's end; the job's timeout or a cancel kills it
       (python_cell.py)

A handler returns its result at once, or a coroutine when it has to wait: only a waiting execution becomes
a task that a build cancel or a departed client can end, so echo and fail cost no task, no build-id parse.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Callable, Coroutine
from typing import Any

from .config import WorkerConfig
from .python_cell import run_cell
from .result import HandlerResult

Waiting = Coroutine[Any, Any, HandlerResult]
Handler = Callable[[bytes], HandlerResult | Waiting]


def build_handler(config: WorkerConfig) -> Handler:
    def echo(payload: bytes) -> HandlerResult:
        return HandlerResult(status=200, body=payload)

    def sleep(payload: bytes) -> Waiting:
        return _sleep(sleep_seconds(payload, default=config.sleep_seconds))

    failed = HandlerResult(status=500, body=config.fail_message.encode())

    def fail(payload: bytes) -> HandlerResult:
        return failed

    def python(payload: bytes) -> Waiting:
        return run_cell(payload)

    handlers: dict[str, Handler] = {"echo": echo, "sleep": sleep, "fail": fail, "python": python}
    return handlers[config.handler]


async def _sleep(seconds: float) -> HandlerResult:
    await asyncio.sleep(seconds)
    return HandlerResult(status=200, body=f"slept {seconds:g}".encode())


def sleep_seconds(payload: bytes, *, default: float) -> float:
    decoded = parse_json(payload)
    value = decoded.get("seconds") if isinstance(decoded, dict) else decoded
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value >= 0:
        return float(value)
    return default


def build_id_of(payload: bytes) -> str | None:
    """The build a payload names (a JSON object's string `build_id`), as a Strata manifest does."""
    decoded = parse_json(payload)
    build_id = decoded.get("build_id") if isinstance(decoded, dict) else None
    return build_id if isinstance(build_id, str) and build_id else None


def parse_json(payload: bytes) -> object:
    if not payload or payload[:1] not in b'{[0123456789.-"':
        return None
    try:
        return json.loads(payload)
    except (ValueError, UnicodeDecodeError):
        return None
