"""LeaseLeader: leads while it holds its lease, steps down and campaigns again, survives a lead that raises.

On a fake clock the test steps (tests/fixtures/clock.py) and real Postgres: the campaign's retries and the pause
after a failed lead are exact steps, never waits that make a race unlikely.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

import asyncpg
import pytest

from tests.fixtures.clock import FakeClock
from tests.fixtures.polling import eventually
from thermostat.store.keeper import LeaseKeeper
from thermostat.store.leader import LeaseLeader
from thermostat.store.lease import LeaseStore

NAME = "test:leader"
TTL = 30.0
RETRY = 5.0
LOGGER = "tests.store.leader"


class Leading:
    """A `lead` that records each term it leads and returns when the test says (or raises, when scripted)."""

    def __init__(self, *, raises: int = 0) -> None:
        self.calls = 0
        self.raises = raises
        self.done = asyncio.Event()
        self.stepped_down = 0

    async def __call__(self, keeper: LeaseKeeper) -> None:
        self.calls += 1
        assert keeper.is_trusted()
        if self.raises:
            self.raises -= 1
            raise RuntimeError("the store blinked")
        await self.done.wait()
        self.done.clear()

    def step_down(self) -> None:
        self.stepped_down += 1


def leader(store: LeaseStore, clock: FakeClock, leading: Leading, holder: str = "a") -> LeaseLeader:
    return LeaseLeader(
        store,
        name=NAME,
        holder=holder,
        ttl=TTL,
        retry_seconds=RETRY,
        lead=leading,
        log=logging.getLogger(LOGGER),
        what="test leading",
        clock=clock,
        stepped_down=leading.step_down,
    )


@contextlib.asynccontextmanager
async def running(replica: LeaseLeader) -> AsyncIterator[asyncio.Task[None]]:
    task = asyncio.create_task(replica.run())
    try:
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def holder(pool: asyncpg.Pool) -> str | None:
    return await pool.fetchval("SELECT holder FROM leases WHERE name = $1", NAME)


async def calls(leading: Leading, n: int) -> None:
    await eventually(lambda: asyncio.sleep(0, True if leading.calls >= n else None))


async def test_a_replica_leads_while_it_holds_the_lease_then_steps_down_releases_and_leads_again(
    db_pool: asyncpg.Pool,
) -> None:
    clock, leading = FakeClock(), Leading()
    replica = leader(LeaseStore(db_pool), clock, leading)
    async with running(replica):
        await calls(leading, 1)
        assert replica.leading and await holder(db_pool) == "a"
        leading.done.set()  # the lead returns (as on a lost lease): released, stepped down, campaigned anew
        await calls(leading, 2)
        assert leading.stepped_down == 1 and replica.leading


async def test_a_lead_that_raises_is_logged_and_the_replica_campaigns_again_after_its_pause(
    db_pool: asyncpg.Pool, caplog: pytest.LogCaptureFixture
) -> None:
    clock, leading = FakeClock(), Leading(raises=1)
    replica = leader(LeaseStore(db_pool), clock, leading)
    with caplog.at_level(logging.ERROR, logger=LOGGER):
        async with running(replica):
            await calls(leading, 1)
            await clock.settled(2)  # the pause, on the clock, and the keeper renewing until it ends
            assert leading.calls == 1  # held through the pause, released after it
            clock.advance(RETRY)
            await calls(leading, 2)
            assert replica.leading and await holder(db_pool) == "a"
    assert [r.getMessage() for r in caplog.records] == ["test leading: leading failed; campaigning again"]


async def test_of_two_replicas_one_leads_and_the_other_leads_once_it_is_gone(db_pool: asyncpg.Pool) -> None:
    """A stopped leader releases the lease on its way out, so the other takes it at its next retry, not a TTL on."""
    clock, first, second = FakeClock(), Leading(), Leading()
    a = leader(LeaseStore(db_pool), clock, first, "a")
    b = leader(LeaseStore(db_pool), clock, second, "b")
    async with running(a) as a_task:
        await calls(first, 1)  # a leads before b campaigns: started together, either could have won the lease
        async with running(b):
            await clock.settled(2)  # a's keeper renewing and b's campaign retrying
            assert (second.calls, await holder(db_pool)) == (0, "a")
            a_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await a_task
            assert first.stepped_down == 1 and await holder(db_pool) is None
            clock.advance(RETRY)
            await calls(second, 1)
            assert b.leading and await holder(db_pool) == "b"
