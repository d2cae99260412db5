"""The blocking wrapper's private loop: Ctrl-C during a blocked stream step ends in KeyboardInterrupt, with the
stream closed once its step has unwound (never an aclose() racing a step still running: `pods watch` exit 130)."""

from __future__ import annotations

import asyncio
import gc
import itertools
import os
import signal
import sys
import threading
import warnings
from collections.abc import AsyncIterator, Generator
from types import FrameType
from typing import Any

import pytest

from thermostat.client.sync_client import _Loop


def _ctrl_c_during_a_blocked_step(loop: _Loop) -> list[str]:
    """Press Ctrl-C once `loop`'s first step waits on a stream, expecting KeyboardInterrupt; how the stream ended."""
    entered = threading.Event()
    closed: list[str] = []

    async def stream() -> AsyncIterator[int]:
        try:
            entered.set()
            await asyncio.sleep(3600)
            yield 1
        except asyncio.CancelledError:
            closed.append("cancelled")
            await asyncio.sleep(0.05)  # unwinding takes loop turns: a close arriving now would meet it running
            raise
        finally:
            closed.append("closed")

    def ctrl_c_once_the_step_waits() -> None:
        entered.wait(10)
        os.kill(os.getpid(), signal.SIGINT)

    timer = threading.Thread(target=ctrl_c_once_the_step_waits)
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            next(loop.iterate(stream()))
    finally:
        timer.join()
        loop.close()
    return closed


def test_ctrl_c_during_a_blocked_step_closes_the_stream_and_raises_keyboard_interrupt() -> None:
    assert _ctrl_c_during_a_blocked_step(_Loop()) == ["cancelled", "closed"]


class _InterruptLeavesTheCallRunning(_Loop):
    """A loop whose blocked call, when interrupted, is left running: the window between scheduling a step and
    waiting on it, where Ctrl-C can land before any cancel."""

    def run(self, work, *, timeout=None):  # type: ignore[no-untyped-def]
        return asyncio.run_coroutine_threadsafe(work(), self.loop).result(timeout)


def test_a_step_left_running_by_an_interrupt_is_ended_before_the_stream_is_closed() -> None:
    assert _ctrl_c_during_a_blocked_step(_InterruptLeavesTheCallRunning()) == ["cancelled", "closed"]


class _CtrlCAt:
    """A trace function raising KeyboardInterrupt at the n-th line or return the calling thread runs in the
    wrapper, threading or asyncio: where a real Ctrl-C can land (Python runs its handler between bytecodes), e.g.
    just after a lock was taken and before the `with` that releases it. `fired` says whether it got that far."""

    WHERE = ("sync_client.py", "threading.py", "asyncio")

    def __init__(self, n: int) -> None:
        self.n = n
        self.seen = 0
        self.fired = False

    def __call__(self, frame: FrameType, event: str, arg: object) -> Any:
        if self.fired:
            return None
        if event in ("line", "return") and any(part in frame.f_code.co_filename for part in self.WHERE):
            self.seen += 1
            if self.seen == self.n:
                self.fired = True
                raise KeyboardInterrupt
        return self


def _next_interrupted_at(n: int) -> tuple[bool, str, list[str]]:
    """One step of a fresh loop's stream with Ctrl-C at the n-th traced line: whether it fired, what next() ended
    in (a hang after 10 s is an answer), and how the stream ended."""
    closed: list[str] = []

    async def stream() -> AsyncIterator[int]:
        try:
            await asyncio.sleep(0.02)
            yield 1
        except asyncio.CancelledError:
            closed.append("cancelled")
            await asyncio.sleep(0.01)
            raise
        finally:
            closed.append("closed")

    loop = _Loop()
    ctrl_c = _CtrlCAt(n)
    ended: list[str] = []

    def step() -> None:
        steps = loop.iterate(stream())
        assert isinstance(steps, Generator)  # closed below, as a `for` that is left would
        sys.settrace(ctrl_c)
        try:
            next(steps)
            ended.append("item")
        except BaseException as error:
            ended.append(type(error).__name__)
        finally:
            sys.settrace(None)
        steps.close()

    caller = threading.Thread(target=step, daemon=True)  # its own thread: a hang is an answer, not a stuck suite
    caller.start()
    caller.join(10)
    if caller.is_alive():
        return ctrl_c.fired, "hang", closed
    assert loop.run(lambda: asyncio.sleep(0, "alive")) == "alive", "the loop serves on"
    loop.close()
    return ctrl_c.fired, ended[0], closed


def test_ctrl_c_landing_anywhere_in_a_step_raises_keyboard_interrupt_and_leaves_no_stream_running() -> None:
    """At every line a step passes through: KeyboardInterrupt, never a hang or a lock error; the stream not
    started, cancelled and closed, or closed after its item; no coroutine made and dropped unawaited."""
    outcomes: dict[int, tuple[str, list[str], list[str]]] = {}
    # A full collection per traced line (about 60) scans the whole heap each time: in the full suite's process,
    # under load, that alone outlasted pytest's 120 s timeout. Frozen, the heap the test found is not scanned;
    # what the steps make (the coroutines to find) still is.
    gc.freeze()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for n in itertools.count(1):
                fired, ended, closed = _next_interrupted_at(n)
                if not fired:
                    assert ended == "item", "uninterrupted, the step answers"
                    break
                gc.collect()  # a coroutine dropped unawaited warns when it is collected
                outcomes[n] = (ended, closed, [str(w.message) for w in caught])
                caught.clear()
    finally:
        gc.unfreeze()
    assert n > 20, "the trace reached the wrapper's wait"
    # the stream not started; cut mid-step; closed after its item
    stream_ends: list[list[str]] = [[], ["cancelled", "closed"], ["closed"]]
    wrong = {n: o for n, o in outcomes.items() if o[0] != "KeyboardInterrupt" or o[1] not in stream_ends or o[2]}
    assert wrong == {}
