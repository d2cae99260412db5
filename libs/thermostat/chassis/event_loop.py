"""The event loop a service process runs on: uvloop when it is installed, unless `EVENT_LOOP=asyncio`.

uvloop (libuv, in C) runs the same asyncio code with less of the loop's own Python per callback, timer and
socket write, where a pool dispatcher spends a large share of its CPU (docs/performance.md). Nothing the
services rely on belongs to the loop: tasks are still asyncio.Task (uvloop's create_task builds them), so
asyncio.timeout's cancel-and-uncancel, TaskGroup and shield behave as on the standard loop; signal handlers,
subprocesses (the local backend's workers, started in a session of their own), sockets and the readers grpc.aio
polls its completion queue through are all part of the loop's API, which uvloop implements (grpc.aio supports
it since grpcio 1.32). `EVENT_LOOP=asyncio` runs the standard loop instead: the switch for a platform without
uvloop's wheel, or to rule the loop out while diagnosing.
"""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

T = TypeVar("T")

EventLoopSetting = Literal["uvloop", "asyncio"]


@dataclass(frozen=True, slots=True)
class LoopChoice:
    """The loop a process runs on: its name, the factory asyncio.Runner takes (None: the standard loop's) and,
    when the setting asked for a loop that cannot be had, why not (for the service's log)."""

    name: str
    factory: Callable[[], asyncio.AbstractEventLoop] | None
    fallback: str | None = None


def choose_loop(setting: EventLoopSetting) -> LoopChoice:
    """uvloop when the setting asks for it and it imports, else asyncio's own loop."""
    if setting == "asyncio":
        return LoopChoice("asyncio", None)
    try:
        uvloop: Any = importlib.import_module("uvloop")
    except ImportError:
        return LoopChoice("asyncio", None, fallback="EVENT_LOOP=uvloop, but uvloop is not installed")
    return LoopChoice("uvloop", uvloop.new_event_loop)


def run(main: Coroutine[Any, Any, T], choice: LoopChoice) -> T:
    """asyncio.run(main) on the chosen loop."""
    with asyncio.Runner(loop_factory=choice.factory) as runner:
        return runner.run(main)


def running_loop_name() -> str:
    """The running loop's library ("uvloop" or "asyncio"), as a service logs it at start."""
    return type(asyncio.get_running_loop()).__module__.partition(".")[0]
