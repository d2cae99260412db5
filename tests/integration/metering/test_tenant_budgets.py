"""Tenant budgets the pool obeys: a tenant over its budget gets no machine (submit 409, nothing queued, the
refusal a failed job with the numbers; hint reason `budget`), an unset budget is no ceiling, and metering
unreachable refuses (fail closed). Budgets are set with the pool admin token and read like spend."""

from __future__ import annotations

import base64
import contextlib
import json
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass

import grpc
import pytest

from tests.fixtures.polling import eventually
from tests.fixtures.services import INTERNAL_TOKEN, metering_env, start_metering
from tests.integration.pool_dispatcher.conftest import (
    ADMIN,
    ADMIN_TOKEN,
    API_TOKEN,
    RunningPool,
    caller,
    pool_env,
    sleepy_type,
    start_pool,
)
from thermostat.chassis.internal_auth import INTERNAL_TOKEN_ENV
from thermostat.chassis.ports import free_port
from thermostat.metering.v1 import metering_pb2, metering_pb2_grpc
from thermostat.pool.v1 import pool_pb2
from thermostat.pool_dispatcher.budget_gate import BudgetGate
from thermostat.pool_dispatcher.budget_reaper import BudgetReaper
from thermostat.store.db import Store

PRICE = 3600.0  # one dollar a machine-second


@dataclass
class Rig:
    pool: RunningPool
    metering: metering_pb2_grpc.MeteringStub
    internal: metering_pb2_grpc.MeteringInternalStub
    store: Store

    async def caught_up(self) -> None:
        """Metering's ledger holds every machine event and usage event the pool recorded."""

        async def same() -> bool | None:
            counts = await self.store.pool.fetchrow(
                """SELECT (SELECT count(*) FROM pool_machine_events) AS m, (SELECT count(*) FROM pool_usage) AS u,
                          (SELECT count(*) FROM ledger_pool_machines) AS lm,
                          (SELECT count(*) FROM ledger_pool_usage) AS lu"""
            )
            return True if (counts["m"], counts["u"]) == (counts["lm"], counts["lu"]) else None

        await eventually(same, timeout=15, every=0.05)


def pool_with_metering(metering_port: int, **overrides: str) -> dict[str, str]:
    types = [sleepy_type(price_per_hour=PRICE)]
    env = {
        INTERNAL_TOKEN_ENV: INTERNAL_TOKEN,
        "METERING_ADDR": f"127.0.0.1:{metering_port}",
        # the background pass stays out of the way: a test reaps when it wants one
        "POOL_BUDGET_REAP_SECONDS": "3600",
        **overrides,
    }
    return pool_env(types, **env)


def metering_beside(pool: RunningPool) -> dict[str, str]:
    """Metering's environment reading this pool's feeds; no pod controller: its feed fails fast and the pool's feeds
    are read on."""
    return metering_env(
        f"127.0.0.1:{free_port()}",
        FEED_TIMEOUT_SECONDS="0.2",
        POOL_DISPATCHER_ADDR=pool.address,
        STRATA_POOL_TOKEN=API_TOKEN,
        STRATA_POOL_ADMIN_TOKEN=ADMIN_TOKEN,
    )


@contextlib.asynccontextmanager
async def rig_on(store: Store) -> AsyncIterator[Rig]:
    port = free_port()
    async with (
        start_pool(store, pool_with_metering(port)) as pool,
        start_metering(metering_beside(pool), store, port=port) as metering,
        metering.channel() as channel,
    ):
        yield Rig(
            pool=pool,
            metering=metering_pb2_grpc.MeteringStub(channel),
            internal=metering_pb2_grpc.MeteringInternalStub(channel),
            store=store,
        )


@pytest.fixture
async def rig(db_store: Store) -> AsyncIterator[Rig]:
    async with rig_on(db_store) as running:
        yield running


async def submit(pool: RunningPool, tenant: str) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await pool.submit(b"0", tenant=tenant, machine_type="sleepy")
    return refused.value


async def started_machines(store: Store) -> int:
    return int(await store.pool.fetchval("SELECT count(*) FROM pool_machine_events WHERE event = 'started'"))


async def test_a_tenant_over_budget_gets_no_machine_and_the_refusal_is_on_record(rig: Rig) -> None:
    await rig.pool.run(b"0", tenant="acme", machine_type="sleepy")
    await rig.caught_up()
    await rig.metering.SetTenantBudget(
        metering_pb2.SetTenantBudgetRequest(tenant_id="acme", daily_usd=0.01), metadata=ADMIN
    )
    machines = await started_machines(rig.store)

    refused = await submit(rig.pool, "acme")
    assert refused.code() is grpc.StatusCode.FAILED_PRECONDITION
    assert ("x-http-code", "409") in tuple(refused.initial_metadata() or ())
    assert "tenant acme: daily budget of 0.01 USD reached" in (refused.details() or "")
    job = await rig.store.pool.fetchrow("SELECT state, error, started_at FROM pool_jobs WHERE error IS NOT NULL")
    assert (job["state"], job["started_at"]) == ("failed", None)
    assert "limit_usd=0.0100" in job["error"] and "spent_usd=" in job["error"]
    assert await rig.store.pool.fetchval("SELECT count(*) FROM pool_jobs WHERE state = 'queued'") == 0

    hint = rig.pool.stub.SendHint(pool_pb2.SendHintRequest(machine_type="sleepy"), metadata=caller("acme"))
    reply = await hint
    assert (reply.started, reply.reason) == (False, "budget")
    assert ("x-http-code", "409") in tuple(await hint.initial_metadata())
    assert await started_machines(rig.store) == machines


def wording(detail: str) -> str:
    return re.sub(r"[0-9a-f]{8}-[0-9a-f-]{27}|\d+(\.\d+)?", "#", detail)


async def test_a_budget_refusal_on_a_run_jobs_stream_answers_that_message_as_the_unary_call_and_the_stream_goes_on(
    rig: Rig,
) -> None:
    """A RunJobs message of a tenant over budget is answered by its tag with SubmitJobSync's refusal (its code, its
    detail, the failed job on record named by job_id); the stream stays open, and once the ceiling is lifted the
    next message runs."""
    await rig.pool.run(b"0", tenant="acme", machine_type="sleepy")
    await rig.caught_up()
    await rig.metering.SetTenantBudget(
        metering_pb2.SetTenantBudgetRequest(tenant_id="acme", daily_usd=0.01), metadata=ADMIN
    )
    with pytest.raises(grpc.aio.AioRpcError) as unary:
        await rig.pool.run(b"0", tenant="acme", machine_type="sleepy")
    call = rig.pool.stub.RunJobs(metadata=caller("acme"))

    async def ask(tag: int) -> pool_pb2.RunJobsResponse:
        request = pool_pb2.RunJobsRequest(
            tag=tag, job=pool_pb2.SubmitJobSyncRequest(machine_type="sleepy", wait_seconds="60")
        )
        request.job.payload.data = b"0"
        await call.write(request)
        response: pool_pb2.RunJobsResponse = await call.read()
        assert response.tag == tag
        return response

    refused = await ask(5)
    assert refused.error.code == unary.value.code().value[0] == grpc.StatusCode.FAILED_PRECONDITION.value[0]
    recorded = await rig.store.pool.fetchrow(
        "SELECT id::text AS id, state, error FROM pool_jobs WHERE id::text = $1", refused.job_id
    )
    assert (recorded["state"], refused.error.detail) == ("failed", f"{recorded['error']} (job {refused.job_id})")
    assert "tenant acme: daily budget of 0.01 USD reached" in refused.error.detail
    # worded alike; the numbers (the spend moves while a machine is warm) and the recorded job are each its own
    assert wording(refused.error.detail) == wording(unary.value.details() or "")
    assert refused.job_id not in (unary.value.details() or "")
    assert await rig.store.pool.fetchval("SELECT count(*) FROM pool_jobs WHERE state = 'queued'") == 0

    await rig.metering.SetTenantBudget(
        metering_pb2.SetTenantBudgetRequest(tenant_id="acme", daily_usd=1_000_000), metadata=ADMIN
    )
    ran = await ask(6)
    assert (ran.WhichOneof("outcome"), ran.job_id != "") == ("result", True)
    await call.done_writing()
    assert await call.code() == grpc.StatusCode.OK


async def test_a_budget_refusal_in_a_rest_batch_is_each_jobs_entry_as_the_unary_call_answers_it(rig: Rig) -> None:
    """RunJobsJson (POST /v1/jobs/batch) for a tenant over budget: every job of the batch is its own entry with
    SubmitJobSync's refusal (409, its detail, the failed job on record named by job_id); nothing queued. Once the
    ceiling is lifted the same batch runs."""
    await rig.pool.run(b"0", tenant="acme", machine_type="sleepy")
    await rig.caught_up()
    await rig.metering.SetTenantBudget(
        metering_pb2.SetTenantBudgetRequest(tenant_id="acme", daily_usd=0.01), metadata=ADMIN
    )
    with pytest.raises(grpc.aio.AioRpcError) as unary:
        await rig.pool.run(b"0", tenant="acme", machine_type="sleepy")
    request = pool_pb2.RunJobsJsonRequest()
    request.payload.data = json.dumps({"jobs": [{"machine_type": "sleepy", "payload": "MA=="}] * 2}).encode()

    answer = await rig.pool.stub.RunJobsJson(request, metadata=caller("acme"))
    entries = json.loads(answer.data)
    assert [(e["status"], set(e)) for e in entries] == [(409, {"status", "job_id", "detail"})] * 2
    assert len({e["job_id"] for e in entries}) == 2
    for entry in entries:
        recorded = await rig.store.pool.fetchrow(
            "SELECT state, error FROM pool_jobs WHERE id::text = $1", entry["job_id"]
        )
        assert (recorded["state"], entry["detail"]) == ("failed", f"{recorded['error']} (job {entry['job_id']})")
        assert wording(entry["detail"]) == wording(unary.value.details() or "")
    assert await rig.store.pool.fetchval("SELECT count(*) FROM pool_jobs WHERE state = 'queued'") == 0

    await rig.metering.SetTenantBudget(
        metering_pb2.SetTenantBudgetRequest(tenant_id="acme", daily_usd=1_000_000), metadata=ADMIN
    )
    ran = json.loads((await rig.pool.stub.RunJobsJson(request, metadata=caller("acme"))).data)
    assert [(e["status"], base64.b64decode(e["result"])) for e in ran] == [(200, b"slept 0")] * 2


async def test_a_tenant_without_a_budget_has_no_ceiling(rig: Rig) -> None:
    await rig.metering.SetTenantBudget(
        metering_pb2.SetTenantBudgetRequest(tenant_id="acme", daily_usd=0.0), metadata=ADMIN
    )
    _, metadata = await rig.pool.run(b"0", tenant="globex", machine_type="sleepy")
    assert metadata["x-pool-job-state"] == "completed"
    assert (await submit(rig.pool, "acme")).code() is grpc.StatusCode.FAILED_PRECONDITION


async def test_metering_unreachable_refuses_every_submit(db_store: Store) -> None:
    env = pool_with_metering(free_port(), METERING_TIMEOUT_SECONDS="0.3")
    async with start_pool(db_store, env) as pool:
        refused = await submit(pool, "acme")
    assert refused.code() is grpc.StatusCode.FAILED_PRECONDITION
    assert "budget unreadable" in (refused.details() or "") and "fail closed" in (refused.details() or "")
    assert await started_machines(db_store) == 0


async def test_a_submit_while_metering_comes_back_waits_for_it_within_the_timeout(db_store: Store) -> None:
    """Metering down, then back: the pool's channel sits between reconnect attempts (at most 5 s apart), and the
    budget check waits for it within METERING_TIMEOUT_SECONDS instead of failing at once with UNAVAILABLE, which
    refused a submit of a tenant with no ceiling (CI: metering started a moment after the pool)."""
    port = free_port()
    async with start_pool(db_store, pool_with_metering(port, METERING_TIMEOUT_SECONDS="8")) as pool:
        # nothing listens: refused, fail closed, and the channel is left between reconnect attempts
        refused = await submit(pool, "globex")
        assert "budget unreadable" in (refused.details() or "") and "fail closed" in (refused.details() or "")
        async with start_metering(metering_beside(pool), db_store, port=port):
            _, metadata = await pool.run(b"0", tenant="globex", machine_type="sleepy")
            assert metadata["x-pool-job-state"] == "completed"


async def test_budgets_are_set_with_the_admin_token_and_read_like_spend(rig: Rig) -> None:
    set_request = metering_pb2.SetTenantBudgetRequest(tenant_id="acme", daily_usd=5, monthly_usd=50)
    with pytest.raises(grpc.aio.AioRpcError) as denied:
        await rig.metering.SetTenantBudget(set_request, metadata=caller("acme"))
    assert denied.value.code() is grpc.StatusCode.PERMISSION_DENIED
    await rig.metering.SetTenantBudget(set_request, metadata=ADMIN)
    own = await rig.metering.GetTenantBudget(
        metering_pb2.GetTenantBudgetRequest(tenant_id="acme"), metadata=caller("acme")
    )
    assert (own.daily_usd, own.monthly_usd) == (5, 50)
    with pytest.raises(grpc.aio.AioRpcError) as hidden:
        await rig.metering.GetTenantBudget(
            metering_pb2.GetTenantBudgetRequest(tenant_id="acme"), metadata=caller("globex")
        )
    assert hidden.value.code() is grpc.StatusCode.NOT_FOUND
    with pytest.raises(grpc.aio.AioRpcError) as negative:
        await rig.metering.SetTenantBudget(
            metering_pb2.SetTenantBudgetRequest(tenant_id="acme", daily_usd=-1), metadata=ADMIN
        )
    assert negative.value.code() is grpc.StatusCode.INVALID_ARGUMENT and "daily_usd" in (negative.value.details() or "")


async def test_warm_machines_of_a_tenant_over_budget_are_reaped_at_once(rig: Rig) -> None:
    """acme's and globex's machines are warm (a five-minute cool-down ahead); acme's budget is reached: a
    reaping pass stops acme's machine now and leaves globex's."""
    for tenant in ("acme", "globex"):
        await rig.pool.run(b"0", tenant=tenant, machine_type="sleepy")
    await rig.caught_up()
    await rig.metering.SetTenantBudget(
        metering_pb2.SetTenantBudgetRequest(tenant_id="acme", monthly_usd=0.01), metadata=ADMIN
    )
    reaper = BudgetReaper(rig.pool.dispatcher, BudgetGate(rig.internal), every_seconds=3600)
    retired = await reaper.reap_over_budget()
    rows = await rig.store.pool.fetch("SELECT id, tenant_id FROM pool_machines")
    assert [r["tenant_id"] for r in rows] == ["globex"]
    stopped = await rig.store.pool.fetch(
        "SELECT machine_id, tenant_id FROM pool_machine_events WHERE event = 'stopped'"
    )
    assert [(str(r["machine_id"]), r["tenant_id"]) for r in stopped] == [(retired[0], "acme")]
    assert await reaper.reap_over_budget() == []


async def test_a_busy_machine_of_a_tenant_over_budget_is_left_to_its_job(rig: Rig) -> None:
    """The reaping pass reads acme's machine warm, a job claims it, then the retire comes: the retire is
    guarded by the state in its statement, so the job runs on and nothing is stopped."""
    await rig.pool.run(b"0", tenant="acme", machine_type="sleepy")
    await rig.caught_up()
    await rig.metering.SetTenantBudget(
        metering_pb2.SetTenantBudgetRequest(tenant_id="acme", monthly_usd=0.01), metadata=ADMIN
    )
    gate = BudgetGate(rig.internal)
    exhausted = gate.exhausted

    async def claimed_meanwhile(tenant: str) -> str | None:
        reason = await exhausted(tenant)
        await rig.store.pool.execute("UPDATE pool_machines SET state = 'busy' WHERE tenant_id = $1", tenant)
        return reason

    gate.exhausted = claimed_meanwhile  # type: ignore[method-assign]
    assert await BudgetReaper(rig.pool.dispatcher, gate, every_seconds=3600).reap_over_budget() == []
    states = await rig.store.pool.fetch("SELECT state FROM pool_machines")
    assert [r["state"] for r in states] == ["busy"]
