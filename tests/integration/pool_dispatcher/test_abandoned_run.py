"""A running job whose sender here ended on an unexpected error: nobody will report it. The scaler pass's reconcile
fails it (no usage event: it never reported, as a reclaimed job's) and retires its machine, rather than leaving the
machine busy, billed and holding its type's only slot until this process's rows are reclaimed."""

from __future__ import annotations

import asyncio

from tests.fixtures.polling import eventually
from tests.integration.pool_dispatcher.conftest import pool_env, sleepy_type, start_pool
from tests.integration.pool_dispatcher.seams import before_complete
from thermostat.pool_dispatcher.dispatcher import ABANDONED
from thermostat.store.db import Store


async def test_a_running_job_whose_sender_died_fails_without_usage_and_its_machine_is_retired(
    pool_store: Store,
) -> None:
    """Nobody will report a running job whose sender ended on an unexpected error: it fails with the reason, without
    usage (as a reclaimed job), and its machine, in a state nobody knows, is retired (jobs.sql `abandon_running`)."""
    sender_died = asyncio.Event()

    async def dies_before_completing(_job_id: str) -> None:
        sender_died.set()
        raise RuntimeError("the sender ends here, after the worker answered")

    seams = [before_complete(dies_before_completing)]
    async with start_pool(pool_store, pool_env([sleepy_type(max_workers=1)]), seams=seams) as pool:
        job = await pool.submit(b"0", machine_type="sleepy")
        await sender_died.wait()  # the task unwound in the step that set the event: nothing drives the machine
        (machine,) = await pool.workers()
        assert machine.state == "busy" and (await pool.job(job.id)).state == "running"

        await pool.dispatcher.scaler.scaler_pass()

        finished = await pool.finished(job.id)
        assert finished.state == "failed" and finished.error == ABANDONED
        assert await pool.usage() == []

        async def machine_gone() -> bool | None:
            return True if not await pool.workers() else None

        await eventually(machine_gone, timeout=10)  # retired and stopped, not left busy
