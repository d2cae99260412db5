"""Periodic, the background loop of the sweeps and the reaper: a pass every `every_seconds` on an injected
clock, a failed pass logged and the next one still run, and `stop` ends the loop asleep or mid-pass, within its
grace. A grace that must run out is tiny against a pass that never ends (it runs out whatever the load); one that
must not is an hour against a pass the test ends."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

import pytest

from tests.fixtures.clock import FakeClock
from thermostat.chassis.periodic import Periodic

EVERY = 60.0
LOGGER = "tests.chassis.periodic"
FAILED = "test sweep failed; retrying on the next pass"
TINY = 0.01
HOUR = 3600.0


class Passes:
    """The passes a loop ran; `script` says which of them raise (True), in order, then they all succeed."""

    def __init__(self, script: tuple[bool, ...] = ()) -> None:
        self.script = list(script)
        self.count = 0

    async def __call__(self) -> None:
        self.count += 1
        if self.script and self.script.pop(0):
            raise RuntimeError(f"pass {self.count} broke")


def periodic(clock: FakeClock, one_pass: Callable[[], Awaitable[None]], *, grace: float = HOUR) -> Periodic:
    return Periodic(
        "test-sweep",
        EVERY,
        one_pass,
        log=logging.getLogger(LOGGER),
        what="test sweep",
        clock=clock,
        stop_grace=grace,
    )


async def started(clock: FakeClock, one_pass: Callable[[], Awaitable[None]], *, grace: float = HOUR) -> Periodic:
    """A loop started and asleep before its first pass."""
    loop = periodic(clock, one_pass, grace=grace)
    await loop.start()
    await clock.settled(1)
    return loop


async def step(clock: FakeClock, passes: int) -> None:
    """Let `passes` passes run, each once its wait is over, and the loop go back to sleep after each."""
    for _ in range(passes):
        clock.advance(EVERY)
        await clock.settled(1)


@pytest.mark.parametrize(
    ("script", "failures"),
    [
        pytest.param((False, False, False), 0, id="every-pass-succeeds"),
        pytest.param((True, False, False), 1, id="a-failed-first-pass-is-logged-and-the-next-runs"),
        pytest.param((True, True, True), 3, id="every-pass-fails-and-the-loop-still-carries-on"),
        pytest.param((False, True, False), 1, id="a-failure-between-successes-is-logged-once"),
    ],
)
async def test_a_pass_that_raises_is_logged_and_the_next_pass_still_runs(
    script: tuple[bool, ...], failures: int, caplog: pytest.LogCaptureFixture
) -> None:
    """Three waits run three passes whatever they raise; each raise is one error under the owner's logger."""
    clock, passes = FakeClock(), Passes(script)
    loop = await started(clock, passes)
    with caplog.at_level(logging.ERROR, logger=LOGGER):
        await step(clock, 3)
    await loop.stop()
    assert passes.count == 3
    logged = [r for r in caplog.records if r.name == LOGGER]
    assert [r.getMessage() for r in logged] == [FAILED] * failures
    assert caplog.text.count("RuntimeError: pass") == failures  # each with its traceback


async def test_the_first_pass_runs_only_once_the_first_wait_is_over() -> None:
    """Start waits `every_seconds` before the first pass: short of it, nothing has run."""
    clock, passes = FakeClock(), Passes()
    loop = await started(clock, passes)
    clock.advance(EVERY - 1)
    await clock.settled(1)
    assert passes.count == 0
    clock.advance(1)
    await clock.settled(1)
    assert passes.count == 1
    await loop.stop()


async def test_stop_cancels_a_sleeping_loop() -> None:
    """Stopped while waiting, the loop ends and its pass never runs, however far time then moves."""
    clock, passes = FakeClock(), Passes()
    loop = await started(clock, passes)
    await loop.stop()
    assert not loop.running
    assert clock.sleepers == 0
    clock.advance(EVERY * 10)
    await asyncio.sleep(0)
    assert passes.count == 0


async def test_stop_lets_a_pass_in_flight_end_within_the_grace(caplog: pytest.LogCaptureFixture) -> None:
    """Stopped mid-pass, the pass ends on its own within the grace: it is not cancelled, nothing is logged, stop
    returns once it has ended, and no later pass runs."""
    clock = FakeClock()
    entered, ended = asyncio.Event(), asyncio.Event()
    passes: list[str] = []

    async def slow_pass() -> None:
        entered.set()
        try:
            await ended.wait()
            passes.append("ended")
        except asyncio.CancelledError:
            passes.append("cancelled")
            raise

    loop = await started(clock, slow_pass)
    clock.advance(EVERY)
    await entered.wait()
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        stopping = asyncio.create_task(loop.stop())
        await asyncio.sleep(0)  # the stop runs up to its wait for the pass
        assert not stopping.done()
        ended.set()
        await stopping
    assert passes == ["ended"]
    assert not loop.running and clock.sleepers == 0
    assert [r for r in caplog.records if r.name == LOGGER] == []
    clock.advance(EVERY * 10)
    await asyncio.sleep(0)
    assert passes == ["ended"]


async def test_a_pass_that_outlasts_the_grace_is_cancelled_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    """A pass still in flight when the grace runs out is cancelled where it waits, and a warning says so."""
    clock = FakeClock()
    entered = asyncio.Event()
    cancelled: list[bool] = []

    async def stuck_pass() -> None:
        entered.set()
        try:
            await asyncio.Event().wait()  # never set: I/O that never answers
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    loop = await started(clock, stuck_pass, grace=TINY)
    clock.advance(EVERY)
    await entered.wait()
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        await loop.stop()
    assert cancelled == [True]
    assert not loop.running
    logged = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == LOGGER]
    assert logged == [(logging.WARNING, "test sweep still running after the 0.01 s stop grace; cancelling it")]


async def test_a_pass_that_ignores_its_cancellation_does_not_hold_the_stop(caplog: pytest.LogCaptureFixture) -> None:
    """A pass that outlasts the grace and then its cancellation too (stuck in I/O its cancellation cannot cut) is
    left behind: stop returns, with a warning and then an error logged, and that loop never runs another pass."""
    clock = FakeClock()
    entered, released = asyncio.Event(), asyncio.Event()
    passes: list[str] = []

    async def stubborn_pass() -> None:
        passes.append("ran")
        entered.set()
        while not released.is_set():  # ignores every cancellation until released
            with contextlib.suppress(asyncio.CancelledError):
                await released.wait()

    loop = await started(clock, stubborn_pass, grace=TINY)
    clock.advance(EVERY)
    await entered.wait()
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        await loop.stop()
    assert not loop.running
    logged = [r.levelno for r in caplog.records if r.name == LOGGER]
    assert logged == [logging.WARNING, logging.ERROR]
    assert "did not end within 0.01 s of its cancellation; stopping without it" in caplog.text
    (left_behind,) = [t for t in asyncio.all_tasks() if t.get_name() == "test-sweep"]
    released.set()
    await asyncio.wait({left_behind})  # it ends after its pass rather than sleeping again: it is no longer the loop
    assert clock.sleepers == 0
    clock.advance(EVERY * 10)
    await asyncio.sleep(0)
    assert passes == ["ran"]


async def test_start_twice_runs_one_loop() -> None:
    """A second start while the loop runs starts no second loop: one sleeper, one pass per wait."""
    clock, passes = FakeClock(), Passes()
    loop = await started(clock, passes)
    await loop.start()
    await clock.settled(1)
    await step(clock, 2)
    assert passes.count == 2
    await loop.stop()


async def test_stop_before_start_does_nothing() -> None:
    """Stopping a loop never started returns at once; the loop can still be started afterwards."""
    clock, passes = FakeClock(), Passes()
    loop = periodic(clock, passes)
    await loop.stop()
    assert not loop.running
    await loop.start()
    await clock.settled(1)
    await step(clock, 1)
    assert passes.count == 1
    await loop.stop()


async def test_stop_ends_the_loop_even_when_the_pass_swallows_its_cancellation() -> None:
    """A pass that catches its cancellation and returns (Python 3.11's wait_for does, cancelled just after the
    call it awaits finished) still ends the loop at stop: stop returns, and no later pass ever runs."""
    clock = FakeClock()
    entered, ended = asyncio.Event(), asyncio.Event()
    passes: list[str] = []

    async def swallowing_pass() -> None:
        passes.append("ran")
        entered.set()
        try:
            await ended.wait()
        except asyncio.CancelledError:
            passes.append("swallowed its cancellation")

    loop = await started(clock, swallowing_pass, grace=TINY)
    clock.advance(EVERY)
    await entered.wait()
    stopping = asyncio.create_task(loop.stop())
    done, _ = await asyncio.wait({stopping}, timeout=10)  # a bound for the failure only: stop never sleeps
    assert done, "stop waited for a loop that carried on after its pass swallowed the cancellation"
    assert passes == ["ran", "swallowed its cancellation"]
    assert not loop.running and clock.sleepers == 0
    clock.advance(EVERY * 10)
    await asyncio.sleep(0)
    assert passes == ["ran", "swallowed its cancellation"]


async def test_a_cancelled_stop_is_not_swallowed_by_the_loop_it_waits_for() -> None:
    """Cancelling the task that is stopping the loop cancels it (the stop's CancelledError is its own)."""
    clock = FakeClock()
    entered, ended = asyncio.Event(), asyncio.Event()

    async def stubborn_pass() -> None:
        entered.set()
        while True:  # ignores every cancellation until released
            try:
                await ended.wait()
                return
            except asyncio.CancelledError:
                continue

    loop = await started(clock, stubborn_pass)
    clock.advance(EVERY)
    await entered.wait()
    stopping = asyncio.create_task(loop.stop())
    await asyncio.sleep(0)  # the stop has cancelled the loop and waits for it
    stopping.cancel()
    with pytest.raises(asyncio.CancelledError):
        await stopping
    ended.set()
