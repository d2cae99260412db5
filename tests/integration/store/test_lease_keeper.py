"""LeaseKeeper: renews in the background, gives up before others may take over, reports every loss.

The keeper runs on a fake clock the test steps (tests/fixtures/clock.py), so "before a rival may take over"
is exact: the keeper gives up when its clock reaches the lease's trust, while the database — the judge of
expiry, in real time — still holds the lease for the rest of a TTL no test outlives. Where a rival must get
the lease, the test expires it in SQL, as the database clock would have.
"""

import asyncio
from urllib.parse import urlsplit

import asyncpg
import pytest

from tests.fixtures.clock import FakeClock
from tests.fixtures.polling import eventually
from tests.fixtures.tcp_proxy import FreezableProxy
from thermostat.store.db import create_pool
from thermostat.store.keeper import LeaseKeeper, LeaseLoss, LeaseLossReason
from thermostat.store.lease import DEFAULT_SAFETY_FRACTION, Lease, LeaseStore

TTL = 30.0  # on the fake clock for the keeper; real seconds for the database, longer than any test
RENEW = 10.0
TRUST = TTL * (1 - DEFAULT_SAFETY_FRACTION)


@pytest.fixture
async def keeper_pool(database_url):
    """The keeper's own pool of one connection, so a test can starve it."""
    pool = await create_pool(database_url, min_size=1, max_size=1)
    yield pool
    pool.terminate()


@pytest.fixture
async def rival(db_pool):
    """Another replica's lease store, on a pool of its own."""
    return LeaseStore(db_pool)


@pytest.fixture
def clock():
    return FakeClock()


async def expire(pool: asyncpg.Pool, name: str) -> None:
    """Let the lease lapse now by the database clock, as a TTL running out would."""
    await pool.execute("UPDATE leases SET expires_at = now() WHERE name = $1", name)


async def renewed(keeper: LeaseKeeper, clock: FakeClock, seconds: float) -> Lease:
    """Step the clock to the next renewal and wait for it to land (the keeper is parked again by then)."""
    before = keeper.lease
    await clock.settled(1)
    clock.advance(seconds)
    return await eventually(lambda: asyncio.sleep(0, keeper.lease if keeper.lease is not before else None), timeout=10)


async def holding(store: LeaseStore, clock: FakeClock) -> tuple[LeaseKeeper, Lease, list[LeaseLoss]]:
    """A keeper that has just acquired `leader` for holder `a`, its lease, and the losses it reports."""
    losses: list[LeaseLoss] = []
    keeper = LeaseKeeper(
        store, name="leader", holder="a", ttl=TTL, renew_interval=RENEW, on_lost=losses.append, clock=clock
    )
    lease = await keeper.acquire()
    assert lease is not None
    return keeper, lease, losses


async def test_keeper_renews_so_nobody_else_gets_the_lease_past_its_ttl(keeper_pool, rival, clock):
    """Held for two TTLs: one renewal per interval, the term stays, the expiry moves on, a rival is refused."""
    async with LeaseKeeper(
        LeaseStore(keeper_pool), name="leader", holder="a", ttl=TTL, renew_interval=RENEW, clock=clock
    ) as keeper:
        first = await keeper.acquire()
        assert first is not None
        lease = first
        for _ in range(6):
            previous, lease = lease, await renewed(keeper, clock, RENEW)
            assert (lease.term, lease.trusted_until) == (first.term, clock.monotonic() + TRUST)
            assert lease.expires_at > previous.expires_at
            assert await rival.acquire("leader", "b", TTL) is None
        assert clock.monotonic() - first.trusted_until > TTL, "trusted long past the first lease's trust"
        assert keeper.is_trusted()
        current = await rival.holder("leader")
    assert current is not None
    assert (current.holder, current.term) == ("a", first.term)


async def test_keeper_starved_of_connections_gives_up_before_a_rival_can_take_over(keeper_pool, rival, clock, db_pool):
    """With renewals stuck (its pool exhausted) the keeper reports EXPIRED when its trust ends, while the
    database still holds the lease for it."""
    keeper, lease, losses = await holding(LeaseStore(keeper_pool), clock)
    await clock.settled(1)  # the keeper waits for its first renewal
    async with keeper_pool.acquire():  # the only connection: every renewal now waits
        clock.advance(RENEW)
        await clock.settled(1)  # the renewal waits for a connection, bounded by the trust that remains
        assert keeper.is_trusted() and keeper.loss is None
        clock.advance(lease.trusted_until - clock.monotonic())
        loss = await asyncio.wait_for(keeper.wait_lost(), timeout=10)
        refused = await rival.acquire("leader", "b", TTL)
    assert loss.reason is LeaseLossReason.EXPIRED
    assert losses == [loss]
    assert not keeper.is_trusted()
    assert refused is None, "the keeper must stop trusting before the database expires the lease"
    await expire(db_pool, "leader")
    taken = await rival.acquire("leader", "b", TTL)
    assert taken is not None and taken.term == lease.term + 1
    assert await keeper.release() is False
    holder = await rival.holder("leader")
    assert holder is not None
    assert holder.holder == "b"


async def test_keeper_whose_store_stops_answering_gives_up_before_a_rival_can_take_over(
    database_url, rival, clock, db_pool
):
    """A half-open link (no reset, no answer) ends in EXPIRED when trust ends, not at a TCP timeout."""
    target = urlsplit(database_url)
    userinfo = target.netloc.rpartition("@")[0]  # the password too: a testcontainers server asks for it
    async with FreezableProxy(target.hostname or "127.0.0.1", target.port or 5432) as proxy:
        pool = await create_pool(
            target._replace(netloc=f"{userinfo}@127.0.0.1:{proxy.port}").geturl(), min_size=1, max_size=1
        )
        try:
            keeper, lease, _ = await holding(LeaseStore(pool), clock)
            await clock.settled(1)
            proxy.freeze()
            clock.advance(RENEW)
            await clock.settled(1)  # the renewal is out on the frozen link, bounded by the trust that remains
            clock.advance(lease.trusted_until - clock.monotonic())
            loss = await asyncio.wait_for(keeper.wait_lost(), timeout=10)
            refused = await rival.acquire("leader", "b", TTL)
            await expire(db_pool, "leader")
            taken = await rival.acquire("leader", "b", TTL)
        finally:
            proxy.thaw()
            pool.terminate()
    assert loss.reason is LeaseLossReason.EXPIRED
    assert refused is None
    assert taken is not None and taken.term == lease.term + 1


async def test_keeper_that_stalled_past_its_ttl_learns_on_renew_that_the_lease_was_taken(
    keeper_pool, rival, clock, db_pool
):
    """A keeper whose clock stood still while its lease lapsed and changed hands renews, is told TAKEN, and
    cannot release the new holder's lease."""
    keeper, lease, losses = await holding(LeaseStore(keeper_pool), clock)
    await expire(db_pool, "leader")
    taken = await rival.acquire("leader", "b", TTL)
    assert taken is not None
    await clock.settled(1)
    clock.advance(RENEW)
    loss = await asyncio.wait_for(keeper.wait_lost(), timeout=10)
    assert loss.reason is LeaseLossReason.TAKEN
    assert loss.lease.term == lease.term
    assert losses == [loss]
    assert taken.term == lease.term + 1
    assert keeper.lease is None
    assert not keeper.is_trusted()
    assert await keeper.release() is False
    holder = await rival.holder("leader")
    assert holder is not None
    assert (holder.holder, holder.term) == ("b", taken.term)


async def test_leaving_the_keeper_releases_the_lease_for_the_next_holder_at_once(keeper_pool, rival):
    """A graceful stop hands the lease over now, not a TTL later."""
    async with LeaseKeeper(LeaseStore(keeper_pool), name="leader", holder="a", ttl=30) as keeper:
        lease = await keeper.acquire()
        assert lease is not None
    taken = await rival.acquire("leader", "b", 30)
    assert taken is not None
    assert taken.term == lease.term + 1


async def test_campaign_waits_out_the_rivals_lease_and_then_leads(keeper_pool, rival, clock, db_pool):
    """A campaigning keeper retries while the rival's lease is live, and takes it at the first attempt after
    it lapses, with the next term."""
    rivals = await rival.acquire("leader", "b", TTL)
    assert rivals is not None
    async with LeaseKeeper(LeaseStore(keeper_pool), name="leader", holder="a", ttl=TTL, clock=clock) as keeper:
        campaign = asyncio.ensure_future(keeper.campaign(retry_interval=1.0))
        for _ in range(3):
            await clock.settled(1)
            assert not campaign.done()
            clock.advance(1.0)
        await clock.settled(1)
        await expire(db_pool, "leader")
        clock.advance(1.0)
        lease = await asyncio.wait_for(campaign, timeout=10)
        assert (lease.holder, lease.term) == ("a", rivals.term + 1)
        assert keeper.is_trusted()


async def test_keeper_rejects_a_renew_interval_not_below_the_ttl(keeper_pool):
    """Renewing only as often as the TTL loses the lease between ticks (River PRs 199/217/219)."""
    with pytest.raises(ValueError, match="renew_interval"):
        LeaseKeeper(LeaseStore(keeper_pool), name="leader", holder="a", ttl=1, renew_interval=1)


async def test_store_errors_during_renewal_are_retried_while_trust_remains(database_url, rival, clock):
    """Renewals whose connection was killed are retried; the keeper keeps the lease and its term."""
    pool = await create_pool(database_url, min_size=1, max_size=1)
    try:
        async with LeaseKeeper(
            LeaseStore(pool), name="leader", holder="a", ttl=TTL, renew_interval=RENEW, clock=clock
        ) as keeper:
            lease = await keeper.acquire()
            assert lease is not None
            admin = await asyncpg.connect(database_url)
            try:
                for _ in range(3):
                    await admin.execute(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                        "WHERE datname = current_database() AND pid <> pg_backend_pid() "
                        "AND application_name = 'thermostat'"
                    )
                    # a failed renewal is retried every RENEW / 4 while trust remains: step until one lands.
                    # The one sleeper is either the keeper waiting to (re)try, whose wake comes before its trust
                    # ends, or a renewal's deadline, at the trust's end: time moves only to the former, as a
                    # renewal out on a fresh connection takes real time, however long the machine needs.
                    before = keeper.lease
                    assert before is not None
                    async with asyncio.timeout(30):  # real seconds: a renewal that never lands fails here
                        while keeper.lease is before:
                            assert keeper.loss is None
                            await clock.settled(1)
                            wake = clock.next_wake()
                            if wake is not None and wake < before.trusted_until:
                                clock.advance(wake - clock.monotonic())
                            await asyncio.sleep(0.01)
            finally:
                await admin.close()
            assert keeper.loss is None
            assert keeper.is_trusted()
            holder = await rival.holder("leader")
            assert holder is not None
            assert (holder.holder, holder.term) == ("a", lease.term)
    finally:
        await pool.close()


async def test_a_keeper_for_a_new_incarnation_takes_the_name_under_a_new_term(keeper_pool, clock):
    """new_incarnation: the first acquire fences an earlier holder of the same name (a process restarted under
    its old id while the old one may only be stalled), at once."""
    store = LeaseStore(keeper_pool)
    earlier = await store.acquire("pool", "alpha", TTL)
    assert earlier is not None
    keeper = LeaseKeeper(store, name="pool", holder="alpha", ttl=TTL, clock=clock, new_incarnation=True)
    lease = await keeper.acquire()
    assert lease is not None and lease.term == earlier.term + 1
    assert keeper.remaining_trust() == pytest.approx(TRUST)
    assert await store.renew(earlier) is None
    await keeper.release()
    assert keeper.remaining_trust() == 0.0
