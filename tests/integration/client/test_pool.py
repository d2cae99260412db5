"""The client's pool and metering calls against the real pool dispatcher and metering: run's result and its
three typed job errors (each carrying the job), submit / get / wait / result / cancel / hint, the catalogue,
workers, usage, spend and tenant budgets, and auth refusals as typed errors."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import grpc
import pytest

from tests.fixtures.polling import eventually
from tests.integration.client.conftest import Stack
from tests.integration.pool_dispatcher.conftest import local_type
from thermostat.client import AsyncThermostat, JobRequest, errors

BINARY = bytes(range(256)) * 4


async def test_run_returns_the_result_bytes(client: AsyncThermostat) -> None:
    assert await client.pool.run("local", BINARY) == BINARY


async def test_run_of_a_failing_job_raises_job_failed_with_the_job(client: AsyncThermostat) -> None:
    with pytest.raises(errors.JobFailed) as failed:
        await client.pool.run("failing", b"x")
    job = failed.value.job
    assert job.state == "failed" and job.tenant_id == "acme" and job.machine_type == "failing"
    assert "cell raised" in failed.value.detail and job.id in failed.value.detail


async def test_run_past_the_jobs_timeout_raises_job_timed_out(client: AsyncThermostat) -> None:
    with pytest.raises(errors.JobTimedOut) as timed_out:
        await client.pool.run("sleepy", b'{"seconds": 20}', timeout_seconds=1)
    assert timed_out.value.job.state == "timed_out"


async def test_run_whose_sync_wait_runs_out_follows_the_job_to_its_result(client: AsyncThermostat) -> None:
    """wait_seconds shorter than the job: the pool answers with the queued job, the client waits on the stream."""
    assert await client.pool.run("sleepy", b'{"seconds": 1.0}', wait_seconds=0.1) == b"slept 1"


async def test_run_cancelled_meanwhile_raises_job_cancelled(client: AsyncThermostat) -> None:
    job = await client.pool.submit("sleepy", b'{"seconds": 20}', session_id="nb-7")
    assert job.state in ("queued", "dispatched", "running") and job.session_id == "nb-7"

    async def running() -> bool | None:
        return True if (await client.pool.get(job.id)).state == "running" else None

    await eventually(running, timeout=30, every=0.05)
    cancelled = await client.pool.cancel(job.id)
    assert cancelled.state == "cancelled"
    with pytest.raises(errors.JobCancelled) as raised:
        await client.pool.result(job.id)
    assert raised.value.job.id == job.id


async def test_submit_wait_and_result(client: AsyncThermostat) -> None:
    job = await client.pool.submit("local", b"hello", priority=5, timeout_seconds=20)
    assert (job.priority, job.timeout_seconds) == (5, 20)
    states = [j.state async for j in client.pool.wait(job.id, timeout=30)]
    assert states[-1] == "completed" and states[0] in ("queued", "dispatched", "running", "completed")
    assert await client.pool.result(job.id) == b"hello"
    assert (await client.pool.get(job.id)).has_result


async def test_result_of_a_running_job_is_a_conflict(client: AsyncThermostat) -> None:
    job = await client.pool.submit("sleepy", b'{"seconds": 20}')
    with pytest.raises(errors.Conflict):
        await client.pool.result(job.id)
    await client.pool.cancel(job.id)


async def test_another_tenants_job_is_not_found(client: AsyncThermostat) -> None:
    job = await client.pool.submit("local", b"mine")
    with pytest.raises(errors.NotFound):
        await client.pool.get(job.id, tenant="someone-else")


async def test_a_bad_submit_is_invalid_argument_and_a_missing_tenant_names_the_field(
    client: AsyncThermostat, stack: Stack
) -> None:
    with pytest.raises(errors.InvalidArgument) as refused:
        await client.pool.submit("no-such-type", b"x")
    assert "machine" in refused.value.detail
    async with AsyncThermostat(stack.config_with(tenant=None)) as tenantless:
        with pytest.raises(ValueError, match="tenant"):
            await tenantless.pool.submit("local", b"x")


async def test_hint_workers_and_usage(client: AsyncThermostat) -> None:
    hinted = await client.pool.hint("local", tenant="hinter")
    assert hinted.started or hinted.reason
    await client.pool.run("local", b"u")
    workers = await client.pool.workers()
    assert {w.tenant_id for w in workers} >= {"acme"}
    assert [w.tenant_id for w in await client.pool.workers("acme")] == ["acme"] * len(
        [w for w in workers if w.tenant_id == "acme"]
    )
    usage = await client.pool.usage(page_size=100)
    assert any(e.tenant_id == "acme" and e.terminal_state == "completed" for e in usage.events)
    assert usage.next_position >= max(e.position for e in usage.events)


async def test_the_catalogue_is_read_and_replaced_with_the_admin_token(client: AsyncThermostat, stack: Stack) -> None:
    names = [t["name"] for t in await client.pool.machine_types()]
    assert names == ["local", "sleepy", "failing"]
    stored = await client.pool.put_machine_types([local_type("local"), local_type("extra", env={"KEY": "secret-v"})])
    assert [t["name"] for t in stored] == ["local", "extra"]
    assert (await client.pool.machine_types())[1]["env"] == {"KEY": "secret-v"}
    async with AsyncThermostat(stack.config_with(pool_admin_token=None)) as api_only:
        with pytest.raises(errors.PermissionDenied):
            await api_only.pool.put_machine_types([local_type("local")])
        redacted = await api_only.pool.machine_types()
        assert redacted[1]["env"] == {"KEY": "<redacted>"} and "secret-v" not in json.dumps(redacted)


async def test_pool_tokens_are_checked(stack: Stack) -> None:
    async with AsyncThermostat(stack.config_with(pool_token=None, pool_admin_token=None)) as anonymous:
        with pytest.raises(errors.Unauthenticated):
            await anonymous.pool.run("local", b"x")
        with pytest.raises(errors.Unauthenticated):
            _ = [job async for job in anonymous.pool.wait("00000000-0000-0000-0000-000000000000")]
    async with AsyncThermostat(stack.config_with(pool_token="wrong", pool_admin_token=None)) as wrong:
        with pytest.raises(errors.Unauthenticated) as refused:
            await wrong.pool.submit("local", b"x")
        assert "wrong" not in str(refused.value)


async def test_a_payload_over_the_limit_is_resource_exhausted(client: AsyncThermostat) -> None:
    with pytest.raises(errors.ResourceExhausted):
        await client.pool.submit("local", b"\0" * (32 * 1024 * 1024 + 1))


async def test_pool_spend_tenant_budgets_and_the_ledger(client: AsyncThermostat, stack: Stack) -> None:
    budget = await client.metering.set_tenant_budget("acme", daily_usd=3.0)
    assert budget.tenant_id == "acme" and budget.daily_usd == 3.0 and not budget.HasField("monthly_usd")
    assert (await client.metering.tenant_budget("acme")).daily_usd == 3.0
    spend = await client.metering.pool_spend()
    assert spend.until >= spend.since > 0

    async def pool_feed_read() -> bool | None:
        feeds = {feed.source for feed in (await client.metering.ledger()).feeds}
        return True if "pool-dispatcher/usage" in feeds else None

    await eventually(pool_feed_read, timeout=15, every=0.05)
    async with AsyncThermostat(stack.config_with(pool_admin_token=None)) as api_only:
        with pytest.raises(errors.PermissionDenied):
            await api_only.metering.set_tenant_budget("acme", daily_usd=1.0)
        assert (await api_only.metering.tenant_budget("acme")).daily_usd == 3.0
        assert (await api_only.metering.pool_spend()).since > 0


async def test_an_unreachable_service_is_unavailable_after_the_retries(stack: Stack) -> None:
    from thermostat.client import RetryPolicy

    config = stack.config_with(pool_target="127.0.0.1:1", timeout=5)
    async with AsyncThermostat(config, retry=RetryPolicy(attempts=2, base_delay=0.01)) as unreachable:
        with pytest.raises(errors.Unavailable) as down:
            await unreachable.pool.get("00000000-0000-0000-0000-000000000000")
    assert down.value.code is grpc.StatusCode.UNAVAILABLE


async def test_run_many_answers_every_job_over_one_stream_each_outcome_by_its_request(
    client: AsyncThermostat, stack: Stack
) -> None:
    """Results, the typed job errors and refusals all come back as outcomes, each with the request it answers."""
    ok = [JobRequest("local", f"job {n}".encode(), key=n) for n in range(20)]
    failing = JobRequest("failing", b"x", key="failing")
    refused = JobRequest("local", b"x", priority=None, timeout_seconds=-1, key="refused")
    unknown = JobRequest("no-such-type", b"x", key="unknown")
    still_running = JobRequest("sleepy", b'{"seconds": 1}', wait_seconds=0.1, key="running")
    outcomes = {o.request.key: o async for o in client.pool.run_many([*ok, failing, refused, unknown, still_running])}
    assert len(outcomes) == 24
    assert all(outcomes[n].value() == f"job {n}".encode() and outcomes[n].job_id for n in range(20))
    assert isinstance(outcomes["failing"].error, errors.JobFailed)
    assert outcomes["failing"].job is not None and outcomes["failing"].job.state == "failed"
    assert isinstance(outcomes["refused"].error, errors.InvalidArgument)
    assert outcomes["refused"].error.detail.startswith("timeout: ") and outcomes["refused"].job_id is None
    assert isinstance(outcomes["unknown"].error, errors.InvalidArgument)
    running = outcomes["running"]
    assert running.running and running.job_id is not None
    with pytest.raises(errors.Conflict):
        running.value()
    assert [j.state async for j in client.pool.wait(running.job_id)][-1] == "completed"


async def test_run_many_takes_jobs_from_an_endless_async_iterable_as_the_stream_carries_them(
    client: AsyncThermostat,
) -> None:
    """The jobs are drawn lazily (an endless source would never end a client that read it all first); leaving the
    loop cancels the stream."""
    drawn = 0

    async def endless() -> AsyncIterator[JobRequest]:
        nonlocal drawn
        while True:
            drawn += 1
            yield JobRequest("local", str(drawn).encode(), key=drawn)

    taken = []
    async for outcome in client.pool.run_many(endless()):
        assert outcome.value() == str(outcome.request.key).encode()
        taken.append(outcome.request.key)
        if len(taken) == 10:
            break
    assert len(set(taken)) == 10 and drawn >= 10
    assert await client.pool.run("local", b"the client still works") == b"the client still works"


async def test_run_many_raises_the_streams_auth_refusal(stack: Stack) -> None:
    async with AsyncThermostat(stack.config_with(pool_token="wrong", pool_admin_token=None)) as wrong:
        with pytest.raises(errors.Unauthenticated) as refused:
            _ = [o async for o in wrong.pool.run_many([JobRequest("local", b"x")])]
        assert "wrong" not in str(refused.value)
