"""The pool's /metrics over HTTP: jobs by state and machines by state and backend as the pool holds them, the
queue and dispatch latency of jobs that ran, a lapsed instance's rows reclaimed as a takeover; every family in
docs/operations.md."""

from __future__ import annotations

from tests.fixtures.metrics import Family, assert_documented, scrape
from tests.fixtures.polling import eventually
from tests.integration.pool_dispatcher.conftest import (
    RunningPool,
    caller,
    local_type,
    pool_env,
    sleepy_type,
    start_pool,
)
from thermostat.pool.v1 import pool_pb2
from thermostat.store.db import Store

BLOCKER = b'{"seconds": 30, "build_id": "blocker"}'


async def _in_state(pool: RunningPool, job_id: str, state: str) -> None:
    async def reached() -> bool | None:
        return True if (await pool.job(job_id)).state == state else None

    await eventually(reached, timeout=30, every=0.02)


async def test_jobs_and_machines_by_state_follow_the_pool_and_a_finished_job_observes_its_latencies(
    pool_store: Store,
) -> None:
    """One machine busy with a long job and one job queued behind it: the gauges say so; once the long job is
    cancelled the queued one runs, and it is counted completed with its queue and dispatch latency."""
    async with start_pool(pool_store, pool_env([sleepy_type(max_workers=1)])) as pool:
        empty = await scrape(pool.metrics_port)
        assert empty["thermostat_pool_jobs"].value(state="queued") == 0
        assert empty["thermostat_pool_machines"].value(state="warm", backend="local") == 0
        blocker = await pool.submit(BLOCKER, machine_type="sleepy")
        await _in_state(pool, blocker.id, "running")
        queued = await pool.submit(b"0", machine_type="sleepy")
        await _in_state(pool, queued.id, "queued")
        busy = await scrape(pool.metrics_port)
        assert {s: busy["thermostat_pool_jobs"].value(state=s) for s in ("queued", "dispatched", "running")} == {
            "queued": 1,
            "dispatched": 0,
            "running": 1,
        }
        assert busy["thermostat_pool_machines"].value(state="busy", backend="local") == 1
        assert busy["thermostat_pool_queue_seconds"].value(machine_type="sleepy") == 1  # the blocker went out
        await pool.stub.CancelJob(pool_pb2.CancelJobRequest(id=blocker.id, build_id="blocker"), metadata=caller())
        assert (await pool.finished(queued.id)).state == "completed"
        done = await scrape(pool.metrics_port)
    assert done["thermostat_pool_jobs_finished_total"].value(machine_type="sleepy", state="completed") == 1
    assert done["thermostat_pool_dispatch_seconds"].value(machine_type="sleepy", state="completed") == 1
    assert done["thermostat_pool_queue_seconds"].value(machine_type="sleepy") == 2
    assert done["thermostat_pool_jobs"].value(state="queued") == 0
    assert done["thermostat_pool_jobs"].value(state="running") == 0
    assert_documented(done)


async def test_a_lapsed_instance_reclaimed_is_counted_as_a_pool_instance_takeover(pool_store: Store) -> None:
    """A dispatcher whose lease lapsed with a job in flight: the survivor's reclaim counts one takeover."""
    async with start_pool(pool_store, pool_env([sleepy_type()], POOL_INSTANCE_ID="doomed")) as doomed:
        job = await doomed.submit(BLOCKER, machine_type="sleepy")
        await _in_state(doomed, job.id, "running")
        # the instance stalls past its lease: expire it by the database clock
        await pool_store.pool.execute("UPDATE leases SET expires_at = now() - interval '1 second' WHERE name = $1",
                                      "pool-instance:doomed")  # fmt: skip
        async with start_pool(pool_store, pool_env([sleepy_type()], POOL_INSTANCE_ID="survivor")) as survivor:
            await survivor.dispatcher.scaler.reclaim()
            takeovers = (await scrape(survivor.metrics_port))["thermostat_lease_takeovers_total"]
            assert takeovers.value(lease="pool-instance") == 1
            assert (await survivor.job(job.id)).state == "failed"


async def test_a_failed_boot_is_counted_by_type_and_backend_and_the_fleet_cap_is_exported(pool_store: Store) -> None:
    """A type whose worker binary does not exist fails its boot at the start: its counter moves from the 0 shown at
    the catalogue's apply, the other type's stays 0, and the cap reads POOL_MAX_WORKERS_TOTAL."""
    types = [local_type("broken", image="no-such-worker-binary"), sleepy_type()]
    async with start_pool(pool_store, pool_env(types, POOL_MAX_WORKERS_TOTAL="3")) as pool:
        before = await scrape(pool.metrics_port)
        shown = {
            (sample.labels["machine_type"], sample.labels["backend"], sample.value)
            for sample in before["thermostat_pool_boot_failures_total"].samples
            if sample.name == "thermostat_pool_boot_failures_total"
        }
        assert shown == {("broken", "local", 0), ("sleepy", "local", 0)}  # at 0 from the catalogue's apply
        assert before["thermostat_pool_fleet_cap"].value() == 3
        await pool.submit(b"x", machine_type="broken")

        async def counted() -> dict[str, Family] | None:
            families = await scrape(pool.metrics_port)
            failures = families["thermostat_pool_boot_failures_total"]
            return families if failures.value(machine_type="broken", backend="local") >= 1 else None

        after = await eventually(counted, timeout=30, every=0.05)
    assert after["thermostat_pool_boot_failures_total"].value(machine_type="sleepy", backend="local") == 0
    assert_documented(after)


async def test_without_a_fleet_cap_no_cap_series_is_exported(pool_store: Store) -> None:
    async with start_pool(pool_store, pool_env([sleepy_type()])) as pool:
        assert "thermostat_pool_fleet_cap" not in await scrape(pool.metrics_port)
