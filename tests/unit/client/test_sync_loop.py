"""The blocking wrapper's private loop: Ctrl-C during a blocked stream step ends in KeyboardInterrupt, with the
stream closed once its step has unwound (never an aclose() racing a step still running: `pods watch` exit 130)."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
from collections.abc import AsyncIterator

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

    def run(self, work):  # type: ignore[no-untyped-def]
        return asyncio.run_coroutine_threadsafe(work, self.loop).result()


def test_a_step_left_running_by_an_interrupt_is_ended_before_the_stream_is_closed() -> None:
    assert _ctrl_c_during_a_blocked_step(_InterruptLeavesTheCallRunning()) == ["cancelled", "closed"]
