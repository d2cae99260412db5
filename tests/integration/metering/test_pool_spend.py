"""Pool spend through metering's GET /v1/spend (gRPC GetPoolSpend): machine time boot to stop, idle warm time
included, and job time, per tenant and machine type, priced at the type's price_per_hour; checked against the
pool's own rows. Scoped like the pool's usage: the admin token sees all or one tenant, the API token its own."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc
import pytest

from tests.fixtures.clock import FakeClock
from tests.fixtures.polling import eventually
from tests.fixtures.services import INTERNAL_TOKEN, metering_env, start_metering
from tests.integration.pool_dispatcher.conftest import (
    ADMIN,
    ADMIN_TOKEN,
    API_TOKEN,
    caller,
    pool_env,
    sleepy_type,
    start_pool,
)
from thermostat.chassis.internal_auth import INTERNAL_TOKEN_ENV
from thermostat.chassis.ports import free_port
from thermostat.metering.v1 import metering_pb2, metering_pb2_grpc
from thermostat.store.db import Store

PRICE = 3600.0  # USD per machine-hour: one dollar a second, so USD reads as seconds


@pytest.fixture
async def spend_rig(db_store: Store) -> AsyncIterator[metering_pb2_grpc.MeteringStub]:
    """Jobs of two tenants run on a priced type (acme: two jobs on one machine; globex: one), every machine
    reaped after its cool-down, and metering's ledger caught up with both pool feeds."""
    clock = FakeClock()
    types = [sleepy_type(price_per_hour=PRICE, cool_down_seconds=60)]
    async with start_pool(db_store, pool_env(types, **{INTERNAL_TOKEN_ENV: INTERNAL_TOKEN}), clock=clock) as pool:
        for tenant in ("acme", "acme", "globex"):
            await pool.run(b"0", tenant=tenant, machine_type="sleepy")
        clock.advance(61)
        await pool.dispatcher.scaler.reap()

        async def stopped() -> bool | None:
            return True if await db_store.pool.fetchval("SELECT count(*) FROM pool_machines") == 0 else None

        await eventually(stopped, timeout=15, every=0.05)
        # no pod controller: its feed fails fast and the pool's feeds are read on
        env = metering_env(
            f"127.0.0.1:{free_port()}",
            FEED_TIMEOUT_SECONDS="0.2",
            POOL_DISPATCHER_ADDR=pool.address,
            STRATA_POOL_TOKEN=API_TOKEN,
            STRATA_POOL_ADMIN_TOKEN=ADMIN_TOKEN,
        )
        async with start_metering(env, db_store) as metering, metering.channel() as channel:

            async def caught_up() -> bool | None:
                machines = await db_store.pool.fetchval("SELECT count(*) FROM ledger_pool_machines")
                usage = await db_store.pool.fetchval("SELECT count(*) FROM ledger_pool_usage")
                return True if (machines, usage) == (4, 3) else None

            await eventually(caught_up, timeout=15, every=0.05)
            yield metering_pb2_grpc.MeteringStub(channel)


async def own_machine_seconds(store: Store, tenant: str) -> float:
    """Boot to stop of the tenant's machines, from the pool's own event rows."""
    value = await store.pool.fetchval(
        """SELECT sum(extract(epoch FROM e.at - s.at)) FROM pool_machine_events s
           JOIN pool_machine_events e ON e.machine_id = s.machine_id AND e.event = 'stopped'
           WHERE s.event = 'started' AND s.tenant_id = $1""",
        tenant,
    )
    return float(value)


async def own_job_seconds(store: Store, tenant: str) -> float:
    return float(await store.pool.fetchval("SELECT sum(duration_seconds) FROM pool_usage WHERE tenant_id = $1", tenant))


async def test_admin_sees_every_tenants_machine_and_job_time_priced(
    spend_rig: metering_pb2_grpc.MeteringStub, db_store: Store
) -> None:
    reply = await spend_rig.GetPoolSpend(metering_pb2.GetPoolSpendRequest(), metadata=ADMIN)
    assert [(line.tenant_id, line.machine_type, line.priced) for line in reply.lines] == [
        ("acme", "sleepy", True),
        ("globex", "sleepy", True),
    ]
    for line in reply.lines:
        machine = await own_machine_seconds(db_store, line.tenant_id)
        job = await own_job_seconds(db_store, line.tenant_id)
        assert line.machine_seconds == pytest.approx(machine, abs=1e-3)
        assert line.machine_usd == pytest.approx(machine, abs=1e-3)
        assert line.job_seconds == pytest.approx(job) and line.job_usd == pytest.approx(job)
        # the machine bills its boot and its idle warm minute too, not only the jobs
        assert line.machine_seconds > line.job_seconds


async def test_the_api_token_sees_only_its_own_tenant(spend_rig: metering_pb2_grpc.MeteringStub) -> None:
    request = metering_pb2.GetPoolSpendRequest(tenant_id="globex")  # ignored for the API token
    reply = await spend_rig.GetPoolSpend(request, metadata=caller("acme"))
    assert [line.tenant_id for line in reply.lines] == ["acme"]


async def test_the_admin_token_reads_one_tenant_by_tenant_id(spend_rig: metering_pb2_grpc.MeteringStub) -> None:
    reply = await spend_rig.GetPoolSpend(metering_pb2.GetPoolSpendRequest(tenant_id="globex"), metadata=ADMIN)
    assert [line.tenant_id for line in reply.lines] == ["globex"]


async def test_lines_are_paged(spend_rig: metering_pb2_grpc.MeteringStub) -> None:
    first = await spend_rig.GetPoolSpend(metering_pb2.GetPoolSpendRequest(page_size=1), metadata=ADMIN)
    second = await spend_rig.GetPoolSpend(
        metering_pb2.GetPoolSpendRequest(page_size=1, page_token=first.next_page_token), metadata=ADMIN
    )
    assert [line.tenant_id for line in (*first.lines, *second.lines)] == ["acme", "globex"]
    assert (first.next_page_token != "", second.next_page_token) == (True, "")


async def test_a_range_before_the_machines_booted_holds_nothing(spend_rig: metering_pb2_grpc.MeteringStub) -> None:
    reply = await spend_rig.GetPoolSpend(metering_pb2.GetPoolSpendRequest(since=1, until=1000), metadata=ADMIN)
    assert list(reply.lines) == []


@pytest.mark.parametrize(
    ("metadata", "request_", "code"),
    [
        pytest.param((), metering_pb2.GetPoolSpendRequest(), grpc.StatusCode.UNAUTHENTICATED, id="no-token"),
        pytest.param(
            caller("acme", token="wrong"), metering_pb2.GetPoolSpendRequest(), grpc.StatusCode.UNAUTHENTICATED,
            id="wrong-token",
        ),
        pytest.param(
            caller(None), metering_pb2.GetPoolSpendRequest(), grpc.StatusCode.INVALID_ARGUMENT, id="api-token-no-tenant"
        ),
        pytest.param(
            ADMIN, metering_pb2.GetPoolSpendRequest(since=2000, until=1000), grpc.StatusCode.INVALID_ARGUMENT,
            id="since-after-until",
        ),
        pytest.param(
            ADMIN, metering_pb2.GetPoolSpendRequest(page_token="x"), grpc.StatusCode.INVALID_ARGUMENT, id="bad-token"
        ),
        pytest.param(  # str.isdigit() says yes to a superscript, int() then raised (UNKNOWN, a 500)
            ADMIN, metering_pb2.GetPoolSpendRequest(page_token="\u00b2"), grpc.StatusCode.INVALID_ARGUMENT,
            id="superscript-token",
        ),
        pytest.param(  # past int()'s 4,300-digit limit: the same ValueError
            ADMIN, metering_pb2.GetPoolSpendRequest(page_token="9" * 5000), grpc.StatusCode.INVALID_ARGUMENT,
            id="endless-token",
        ),
        pytest.param(  # found by the chaos fuzzing: year 10000 was an unhandled ValueError (UNKNOWN, a 500)
            ADMIN, metering_pb2.GetPoolSpendRequest(until=1e12), grpc.StatusCode.INVALID_ARGUMENT, id="until-past-9999"
        ),
        pytest.param(
            ADMIN, metering_pb2.GetPoolSpendRequest(since=1e300), grpc.StatusCode.INVALID_ARGUMENT, id="since-huge"
        ),
    ],
)  # fmt: skip
async def test_refusals(
    spend_rig: metering_pb2_grpc.MeteringStub,
    metadata: tuple[tuple[str, str], ...],
    request_: metering_pb2.GetPoolSpendRequest,
    code: grpc.StatusCode,
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await spend_rig.GetPoolSpend(request_, metadata=metadata)
    assert refused.value.code() is code
    if request_.since > 1e10 or request_.until > 1e10:
        assert (
            refused.value.details()
            == f"{'since' if request_.since else 'until'} must be epoch seconds up to 9999 (0: the default)"
        )
