"""Leases over the real store: one winner per race, expiry by the database clock, owner-and-term fencing."""

import asyncio
import time
from collections import Counter

import asyncpg
import pytest

from tests.fixtures.clock import FakeClock
from tests.fixtures.polling import eventually
from thermostat.store.db import create_pool
from thermostat.store.lease import DEFAULT_SAFETY_FRACTION, LeaseStore

ROUNDS = 1000
TTL = 0.2  # seconds; long enough for a round trip, short enough to wait out


async def wait_until_free(leases: LeaseStore, name: str) -> None:
    """Poll the database (its clock, not ours) until nobody holds `name`."""

    async def free() -> bool | None:
        return True if await leases.holder(name) is None else None

    await eventually(free)


@pytest.fixture
async def racers(database_url):
    """Two lease stores, each on a pool of exactly one connection of its own."""
    pools = [await create_pool(database_url, min_size=1, max_size=1) for _ in range(2)]
    yield [LeaseStore(pool) for pool in pools]
    await asyncio.gather(*(pool.close() for pool in pools))


@pytest.fixture
async def leases(db_pool):
    return LeaseStore(db_pool)


async def test_racers_use_separate_server_sessions(racers):
    """The race below means something only if the two claims run in two backends at once."""
    pids = [await racer._pool.fetchval("SELECT pg_backend_pid()") for racer in racers]
    assert pids[0] != pids[1]


@pytest.mark.parametrize(
    "same_name",
    [
        pytest.param(False, id="new-lease-each-round"),
        pytest.param(True, id="released-lease-each-round"),
    ],
)
async def test_two_holders_racing_for_a_lease_exactly_one_wins_every_round(racers, same_name):
    """A thousand concurrent acquire pairs on separate connections; each round has one winner."""
    a, b = racers
    wins: Counter[str] = Counter()
    for round_ in range(ROUNDS):
        name = "race" if same_name else f"race-{round_}"
        # Alternate who is sent first, so that winning is not just being first on the wire.
        first, second = (("a", a), ("b", b)) if round_ % 2 == 0 else (("b", b), ("a", a))
        results = await asyncio.gather(first[1].acquire(name, first[0], 30), second[1].acquire(name, second[0], 30))
        won = [lease for lease in results if lease is not None]
        assert len(won) == 1, f"round {round_}: {results}"
        lease = won[0]
        wins[lease.holder] += 1
        # A released lease changes hands each round, so its term counts the rounds.
        assert lease.term == (round_ + 1 if same_name else 1)
        if same_name:
            assert await (a if lease.holder == "a" else b).release(lease)
    assert wins.total() == ROUNDS


async def test_an_expired_lease_is_taken_over_with_the_next_term(leases):
    """After the TTL passes by the database clock another holder takes the lease, term + 1."""
    first = await leases.acquire("pod:qwen", "a", 30)
    blocked = await leases.acquire("pod:qwen", "b", TTL)  # refused however slowly this runs: 30 s are left
    assert first is not None
    assert await leases.renew(first, ttl=TTL) is not None  # now it runs out in TTL
    await wait_until_free(leases, "pod:qwen")
    taken = await leases.acquire("pod:qwen", "b", TTL)
    assert first is not None
    assert first.term == 1
    assert blocked is None
    assert taken is not None
    assert (taken.holder, taken.term) == ("b", 2)


async def test_a_holder_that_lost_its_lease_learns_it_on_renew_and_cannot_release_the_new_one(leases):
    """A stalled holder's renew answers None and its release leaves the new holder's lease alone."""
    stale = await leases.acquire("pod:qwen", "a", TTL)
    assert stale is not None
    await wait_until_free(leases, "pod:qwen")
    current = await leases.acquire("pod:qwen", "b", 30)
    assert current is not None
    assert await leases.renew(stale) is None
    assert await leases.release(stale) is False
    holder = await leases.holder("pod:qwen")
    assert holder is not None
    assert (holder.holder, holder.term) == ("b", 2)


async def test_renew_by_the_right_holder_with_a_stale_term_fails(leases):
    """The holder name alone is not enough: a lease from an earlier term of the same holder is dead."""
    old = await leases.acquire("gate", "a", 30)
    assert old is not None
    assert await leases.release(old)
    new = await leases.acquire("gate", "a", 30)
    assert new is not None
    assert new.term == old.term + 1
    assert await leases.renew(old) is None
    assert await leases.release(old) is False
    assert await leases.renew(new) is not None


async def test_holder_reports_the_current_holder_term_and_expiry(leases):
    """holder() names the live holder, its term and expiry, and nobody once released."""
    assert await leases.holder("gate") is None
    lease = await leases.acquire("gate", "a", 30)
    assert lease is not None
    current = await leases.holder("gate")
    assert current is not None
    assert (current.holder, current.term, current.expires_at) == ("a", 1, lease.expires_at)
    assert await leases.release(lease)
    assert await leases.holder("gate") is None


async def test_the_holder_taking_its_own_live_lease_again_keeps_the_term_and_extends_it(leases):
    """Re-acquiring your own lease (a restart under the same id) is a renewal, not a new term."""
    first = await leases.acquire("gate", "a", 30)
    again = await leases.acquire("gate", "a", 60)
    assert first is not None
    assert again is not None
    assert again.term == first.term
    assert again.expires_at > first.expires_at


async def test_a_new_incarnation_takes_its_own_live_lease_under_a_new_term_and_fences_the_old_one(leases):
    """acquire(new_term=True): the same holder name gets the lease at once, under term + 1; the earlier
    incarnation's renew and release are refused from then on."""
    old = await leases.acquire("gate", "a", 30)
    new = await leases.acquire("gate", "a", 30, new_term=True)
    assert old is not None and new is not None
    assert new.term == old.term + 1
    assert await leases.renew(old) is None
    assert not await leases.release(old)
    assert await leases.renew(new) is not None


async def test_a_new_incarnation_cannot_take_another_holders_live_lease(leases):
    assert await leases.acquire("gate", "a", 30) is not None
    assert await leases.acquire("gate", "b", 30, new_term=True) is None


async def test_the_holder_taking_back_its_expired_untaken_lease_keeps_the_term(leases):
    """Nobody held the lease in between, so nothing was fenced off and the term stays."""
    first = await leases.acquire("gate", "a", TTL)
    assert first is not None
    await wait_until_free(leases, "gate")
    again = await leases.acquire("gate", "a", TTL)
    assert again is not None
    assert again.term == first.term


async def test_expired_but_untaken_lease_can_still_be_renewed(leases):
    """Renewal after expiry succeeds while holder and term still match."""
    lease = await leases.acquire("gate", "a", TTL)
    assert lease is not None
    await wait_until_free(leases, "gate")
    renewed = await leases.renew(lease, ttl=30)
    assert renewed is not None
    assert renewed.term == lease.term
    assert await leases.holder("gate") is not None


async def test_a_slow_answer_does_not_extend_trust(db_pool, database_url):
    """Trust counts from when the holder asked (River's rule), however late the answer comes."""
    clock = FakeClock()
    leases = LeaseStore(db_pool, clock=clock)
    lease = await leases.acquire("gate", "a", 1.0)
    assert lease is not None
    blocker = await asyncpg.connect(database_url)
    try:
        transaction = blocker.transaction()
        await transaction.start()
        await blocker.execute("SELECT 1 FROM leases WHERE name = 'gate' FOR UPDATE")
        asked_at = clock.monotonic()
        renewal = asyncio.create_task(leases.renew(lease))
        await eventually(lambda: _waiting_on_a_lock(blocker), timeout=10)
        clock.advance(5.0)  # the answer comes five seconds after the question
        await transaction.rollback()
        renewed = await renewal
    finally:
        await blocker.close()
    assert renewed is not None
    assert renewed.trusted_until == asked_at + 1.0 * (1 - DEFAULT_SAFETY_FRACTION)
    assert not renewed.is_trusted(clock.monotonic()), "the slow answer came after the trust it grants had ended"


async def _waiting_on_a_lock(connection: asyncpg.Connection) -> bool | None:
    waiting = await connection.fetchval(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
    )
    return True if waiting else None


async def test_a_lease_is_trusted_for_less_than_its_ttl(leases):
    """The holder stops trusting a lease before the database lets anyone else take it."""
    before = time.monotonic()
    lease = await leases.acquire("gate", "a", 10)
    assert lease is not None
    assert lease.is_trusted()
    assert lease.trusted_until <= time.monotonic() + 10 * (1 - DEFAULT_SAFETY_FRACTION)
    assert lease.trusted_until >= before + 10 * (1 - DEFAULT_SAFETY_FRACTION)
    assert not lease.is_trusted(lease.trusted_until)


@pytest.mark.parametrize(
    ("name", "holder", "ttl"),
    [
        pytest.param("", "a", 1, id="no-name"),
        pytest.param("gate", "", 1, id="no-holder"),
        pytest.param("gate", "a", 0, id="zero-ttl"),
        pytest.param("gate", "a", -1, id="negative-ttl"),
    ],
)
async def test_acquire_rejects_a_lease_without_name_holder_or_positive_ttl(leases, name, holder, ttl):
    """Arguments that could never make a meaningful lease are refused before any query."""
    with pytest.raises(ValueError, match="lease"):
        await leases.acquire(name, holder, ttl)
