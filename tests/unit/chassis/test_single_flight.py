"""SingleFlight: one call per key in flight, every caller gets its result, callers cannot abort it."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from thermostat.chassis.single_flight import SingleFlight


async def test_callers_of_one_key_share_one_call_and_its_result() -> None:
    flight: SingleFlight[str] = SingleFlight("test")
    release = asyncio.Event()
    runs: list[str] = []

    async def call(who: str) -> str:
        runs.append(who)
        await release.wait()
        return f"by {who}"

    first = asyncio.create_task(flight.do("qwen", lambda: call("first")))
    second = asyncio.create_task(flight.do("qwen", lambda: call("second")))
    await asyncio.sleep(0)  # both callers are in: the event, not time, decides when the call ends
    release.set()
    assert await asyncio.gather(first, second) == ["by first", "by first"]
    assert runs == ["first"]


async def test_another_key_runs_its_own_call() -> None:
    flight: SingleFlight[str] = SingleFlight("test")

    async def call(key: str) -> str:
        return key

    assert await asyncio.gather(flight.do("a", lambda: call("a")), flight.do("b", lambda: call("b"))) == ["a", "b"]


async def test_a_finished_call_is_not_shared_with_a_later_caller() -> None:
    flight: SingleFlight[int] = SingleFlight("test")
    count = 0

    async def call() -> int:
        nonlocal count
        count += 1
        return count

    assert [await flight.do("k", call), await flight.do("k", call)] == [1, 2]


async def test_a_caller_that_gives_up_does_not_abort_the_call() -> None:
    flight: SingleFlight[str] = SingleFlight("test")
    release = asyncio.Event()

    async def call() -> str:
        await release.wait()
        return "done"

    leaving = asyncio.create_task(flight.do("k", call))
    await asyncio.sleep(0)
    leaving.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await leaving
    joining = asyncio.create_task(flight.do("k", call))
    release.set()
    assert await joining == "done"


async def test_every_caller_gets_the_calls_exception() -> None:
    flight: SingleFlight[str] = SingleFlight("test")
    release = asyncio.Event()

    async def call() -> str:
        await release.wait()
        raise LookupError("gone")

    callers = [asyncio.create_task(flight.do("k", call)) for _ in range(2)]
    await asyncio.sleep(0)
    release.set()
    for caller in callers:
        with pytest.raises(LookupError, match="gone"):
            await caller


async def test_drain_interrupts_a_call_still_running_after_its_grace_and_lets_it_record_how_it_ended() -> None:
    flight: SingleFlight[str] = SingleFlight("test")
    started, ended = asyncio.Event(), []

    async def call() -> str:
        try:
            started.set()
            await asyncio.Event().wait()  # never finishes by itself
        except asyncio.CancelledError:
            ended.append("interrupted")
            raise
        return "unreachable"

    caller = asyncio.create_task(flight.do("k", call))
    await started.wait()
    await flight.drain(0, interrupted_within=5)
    assert ended == ["interrupted"]
    assert flight.in_flight() == []
    with pytest.raises(asyncio.CancelledError):
        await caller
