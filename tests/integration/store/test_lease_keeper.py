"""LeaseKeeper: renews in the background, gives up before others may take over, reports every loss."""

import asyncio
import threading
from urllib.parse import urlsplit

import asyncpg
import pytest

from tests.fixtures.polling import eventually
from tests.fixtures.tcp_proxy import FreezableProxy
from thermostat.store.db import create_pool
from thermostat.store.keeper import LeaseKeeper, LeaseLoss, LeaseLossReason
from thermostat.store.lease import Lease, LeaseStore

TTL = 0.5
RENEW = 0.1
# Where a test asserts that the keeper gives up *before* a rival may take over, a wide margin keeps the
# assertion about the rule rather than about scheduling on a busy machine.
WIDE_MARGIN = 0.4


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


def take_over_from_another_thread(database_url: str, name: str) -> Lease:
    """Block this thread (and its event loop: a stalled process) while another takes the lease."""
    result: list[Lease] = []

    async def take_over() -> None:
        connection_pool = await create_pool(database_url, min_size=1, max_size=1)
        try:
            leases = LeaseStore(connection_pool)
            result.append(await eventually(lambda: leases.acquire(name, "b", 30), timeout=5))
        finally:
            await connection_pool.close()

    thread = threading.Thread(target=asyncio.run, args=(take_over(),))
    thread.start()
    thread.join()
    assert result, "the rival never got the lease"
    return result[0]


async def test_keeper_renews_so_nobody_else_gets_the_lease_past_its_ttl(keeper_pool, rival):
    """Held for two TTLs: the term stays, the expiry moves on, a rival is refused throughout."""
    async with LeaseKeeper(LeaseStore(keeper_pool), name="leader", holder="a", ttl=TTL, renew_interval=RENEW) as keeper:
        first = await keeper.acquire()
        assert first is not None
        for _ in range(4):
            await asyncio.sleep(TTL / 2)
            assert await rival.acquire("leader", "b", TTL) is None
            assert keeper.is_trusted()
        current = await rival.holder("leader")
    assert current is not None
    assert (current.holder, current.term) == ("a", first.term)
    assert current.expires_at > first.expires_at


async def test_keeper_starved_of_connections_gives_up_before_a_rival_can_take_over(keeper_pool, rival):
    """With renewals stuck (its pool exhausted) the keeper reports EXPIRED while the lease is still live."""
    losses: list[LeaseLoss] = []
    keeper = LeaseKeeper(
        LeaseStore(keeper_pool, safety_fraction=WIDE_MARGIN),
        name="leader",
        holder="a",
        ttl=TTL,
        renew_interval=RENEW,
        on_lost=losses.append,
    )
    lease = await keeper.acquire()
    assert lease is not None
    async with keeper_pool.acquire():  # the only connection: every renewal now waits
        loss = await asyncio.wait_for(keeper.wait_lost(), timeout=TTL * 2)
        refused = await rival.acquire("leader", "b", TTL)
    assert loss.reason is LeaseLossReason.EXPIRED
    assert losses == [loss]
    assert not keeper.is_trusted()
    assert refused is None, "the keeper must stop trusting before the database expires the lease"
    taken = await eventually(lambda: rival.acquire("leader", "b", TTL))
    assert taken.term == lease.term + 1
    assert await keeper.release() is False
    holder = await rival.holder("leader")
    assert holder is not None
    assert holder.holder == "b"


async def test_keeper_whose_store_stops_answering_gives_up_before_a_rival_can_take_over(database_url, rival):
    """A half-open link (no reset, no answer) ends in EXPIRED within the trust window, not a TCP timeout."""
    target = urlsplit(database_url)
    async with FreezableProxy(target.hostname or "127.0.0.1", target.port or 5432) as proxy:
        pool = await create_pool(
            target._replace(netloc=f"{target.username}@127.0.0.1:{proxy.port}").geturl(), min_size=1, max_size=1
        )
        try:
            keeper = LeaseKeeper(
                LeaseStore(pool, safety_fraction=WIDE_MARGIN), name="leader", holder="a", ttl=TTL, renew_interval=RENEW
            )
            lease = await keeper.acquire()
            assert lease is not None
            proxy.freeze()
            loss = await asyncio.wait_for(keeper.wait_lost(), timeout=TTL)
            refused = await rival.acquire("leader", "b", TTL)
            taken = await eventually(lambda: rival.acquire("leader", "b", TTL))
        finally:
            proxy.thaw()
            pool.terminate()
    assert loss.reason is LeaseLossReason.EXPIRED
    assert refused is None
    assert taken.term == lease.term + 1


async def test_keeper_that_stalled_past_its_ttl_learns_on_renew_that_the_lease_was_taken(
    keeper_pool, rival, database_url
):
    """A stalled process wakes, renews, is told TAKEN, and cannot release the new holder's lease."""
    losses: list[LeaseLoss] = []
    # The renewal after the stall gets a renew interval to answer; half a TTL keeps a slow answer TAKEN.
    keeper = LeaseKeeper(
        LeaseStore(keeper_pool), name="leader", holder="a", ttl=TTL, renew_interval=TTL / 2, on_lost=losses.append
    )
    lease = await keeper.acquire()
    assert lease is not None
    taken = take_over_from_another_thread(database_url, "leader")
    loss = await asyncio.wait_for(keeper.wait_lost(), timeout=TTL)
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


async def test_campaign_waits_out_the_rivals_lease_and_then_leads(keeper_pool, rival):
    """A campaigning keeper takes the lease once the rival's runs out, with the next term."""
    rivals = await rival.acquire("leader", "b", TTL)
    assert rivals is not None
    async with LeaseKeeper(LeaseStore(keeper_pool), name="leader", holder="a", ttl=30) as keeper:
        lease = await asyncio.wait_for(keeper.campaign(retry_interval=0.02), timeout=TTL * 4)
        assert (lease.holder, lease.term) == ("a", rivals.term + 1)
        assert keeper.is_trusted()


async def test_keeper_rejects_a_renew_interval_not_below_the_ttl(keeper_pool):
    """Renewing only as often as the TTL loses the lease between ticks (River PRs 199/217/219)."""
    with pytest.raises(ValueError, match="renew_interval"):
        LeaseKeeper(LeaseStore(keeper_pool), name="leader", holder="a", ttl=1, renew_interval=1)


async def test_store_errors_during_renewal_are_retried_while_trust_remains(database_url, rival):
    """A renewal that fails (its connection killed) is retried; the keeper keeps the lease."""
    pool = await create_pool(database_url, min_size=1, max_size=1)
    try:
        async with LeaseKeeper(LeaseStore(pool), name="leader", holder="a", ttl=TTL, renew_interval=RENEW) as keeper:
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
                    await asyncio.sleep(RENEW * 2)
            finally:
                await admin.close()
            await asyncio.sleep(TTL)
            assert keeper.loss is None
            assert keeper.is_trusted()
            holder = await rival.holder("leader")
            assert holder is not None
            assert (holder.holder, holder.term) == ("a", lease.term)
    finally:
        await pool.close()
