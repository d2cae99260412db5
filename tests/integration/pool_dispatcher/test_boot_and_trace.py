"""Boot failures leave the queue intact for the next pass; trace context is kept with the job."""

from __future__ import annotations

import json
import logging
import sys

import pytest

from tests.fixtures.polling import eventually
from tests.integration.pool_dispatcher.conftest import ADMIN, caller, local_type, pool_env, start_pool
from thermostat.pool.v1 import pool_pb2
from thermostat.store.db import Store

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


async def test_a_failed_boot_requeues_the_job_and_the_next_pass_places_it(pool_store: Store) -> None:
    async with start_pool(pool_store, pool_env([local_type(image="no-such-worker-binary")])) as pool:
        job = await pool.submit(b"x")

        # queued with no machine is also the job before its first boot was placed: only the boot's failure on the
        # job says the failed boot is behind it (seen in CI: the first boot, placed after the new catalogue's pass,
        # failed after it, and nothing placed the job again)
        async def requeued() -> bool | None:
            machines = await pool_store.pool.fetchval("SELECT count(*) FROM pool_machines")
            seen = await pool.job(job.id)
            return True if machines == 0 and seen.state == "queued" and "failed to boot" in seen.error else None

        await eventually(requeued, timeout=10, every=0.05)
        request = pool_pb2.PutMachineTypesRequest()
        request.catalogue.data = json.dumps([local_type()]).encode()
        await pool.stub.PutMachineTypes(request, metadata=ADMIN)
        await pool.dispatcher.scaler.scaler_pass()  # no new submit: the pass alone places the waiting job
        assert (await pool.finished(job.id)).state == "completed"


async def test_a_machine_that_exits_while_booting_fails_its_boot_at_once_saying_why(
    pool_store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 35: a worker that exits at start was invisible for the whole boot timeout (300 s); its boot now fails
    at its exit, the exit code and its last line in the log line and the job's error, no secret in either."""
    dying = local_type(
        image=f"{sys.executable} -c \"import sys; sys.exit('no handler named nope')\"",
        boot_timeout_seconds=300,
        env={"HF_TOKEN": "hf-secret-value-1234"},
    )
    caplog.set_level(logging.WARNING, logger="thermostat.pool_dispatcher")
    async with start_pool(pool_store, pool_env([dying])) as pool:
        job = await pool.submit(b"x")

        async def failed_boot() -> str | None:
            error = (await pool.job(job.id)).error
            return error if "failed to boot" in error else None

        error = await eventually(failed_boot, timeout=20, every=0.05)
    assert "exited with code 1 before answering its health check; its last output: no handler named nope" in error
    logged = [r.getMessage() for r in caplog.records if "failed to boot" in r.getMessage()]
    assert logged and "no handler named nope" in logged[0], logged
    assert "hf-secret-value-1234" not in error + " ".join(logged)


async def test_trace_context_is_kept_with_the_job(pool_store: Store) -> None:
    async with start_pool(pool_store, pool_env([local_type()])) as pool:
        request = pool_pb2.SubmitJobRequest(machine_type="local")
        request.payload.data = b"x"
        job = await pool.stub.SubmitJob(request, metadata=caller(traceparent=TRACEPARENT, tracestate="k=v"))
        await pool.finished(job.id)
        row = await pool_store.pool.fetchrow(
            "SELECT traceparent, tracestate FROM pool_jobs WHERE id = $1::uuid", job.id
        )
        assert (row["traceparent"], row["tracestate"]) == (TRACEPARENT, "k=v")


async def test_every_machine_stops_when_the_service_stops(pool_store: Store) -> None:
    async with start_pool(pool_store, pool_env([local_type()])) as pool:
        await pool.run(b"a", tenant="acme")
        await pool.run(b"b", tenant="globex")
        processes = list(pool.backend._children.values())
        assert len(processes) == 2
    assert all(process.returncode is not None for process in processes)
    assert await pool_store.pool.fetchval("SELECT count(*) FROM pool_machines") == 0
