"""FakeClock, the test clock every waiting component is stepped with: sleepers wake when time reaches them,
in deadline order, and `settled` waits until the expected sleepers are parked."""

import asyncio

from tests.fixtures.clock import START, FakeClock


async def test_a_sleeper_wakes_only_once_time_reaches_its_deadline() -> None:
    """Advancing short of the deadline wakes nobody; reaching it wakes the sleeper."""
    clock = FakeClock()
    sleeper = asyncio.ensure_future(clock.sleep(2.0))
    await clock.settled(1)
    clock.advance(1.5)
    await clock.settled(1)
    assert not sleeper.done()
    clock.advance(0.5)
    await asyncio.wait_for(sleeper, timeout=5)
    assert clock.monotonic() == START + 2.0


async def test_sleepers_wake_in_deadline_order_and_wall_time_moves_with_the_monotonic_reading() -> None:
    """One advance past two deadlines wakes both, the earlier first; now() moves by what was advanced."""
    clock = FakeClock()
    wall = clock.now()
    woke: list[str] = []

    async def nap(name: str, seconds: float) -> None:
        await clock.sleep(seconds)
        woke.append(name)

    naps = [asyncio.ensure_future(nap("late", 3.0)), asyncio.ensure_future(nap("early", 1.0))]
    await clock.settled(2)
    clock.advance(5.0)
    await asyncio.gather(*naps)
    assert woke == ["early", "late"]
    assert (clock.now() - wall).total_seconds() == 5.0


async def test_a_cancelled_sleeper_is_no_longer_counted() -> None:
    """A sleep cancelled mid-way (a lost lease ends a tick interval) leaves the count at once."""
    clock = FakeClock()
    sleeper = asyncio.ensure_future(clock.sleep(1.0))
    await clock.settled(1)
    sleeper.cancel()
    await clock.settled(0)
    assert clock.sleepers == 0
