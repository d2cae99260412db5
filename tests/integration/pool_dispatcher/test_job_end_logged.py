"""A job that fails or times out is one warning line with its id, tenant, type and why (issue 35: the operator's
terminal said nothing about either); a completed job is not."""

from __future__ import annotations

import logging

import pytest

from tests.integration.pool_dispatcher.conftest import local_type, pool_env, sleepy_type, start_pool
from thermostat.store.db import Store

LOGGER = "thermostat.pool_dispatcher"


def job_lines(caplog: pytest.LogCaptureFixture, job_id: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == LOGGER and r.getMessage().startswith(f"job {job_id} of tenant")]


async def test_a_failed_job_is_logged_with_its_id_tenant_type_and_why(
    pool_store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    failing = local_type(env={"STRATA_WORKER_HANDLER": "fail", "STRATA_WORKER_FAIL_MESSAGE": "cell raised"})
    async with start_pool(pool_store, pool_env([failing])) as pool:
        _, metadata = await pool.run(b"x")
        job_id = metadata["x-pool-job-id"]
    [line] = job_lines(caplog, job_id)
    assert line.levelno == logging.WARNING
    message = line.getMessage()
    assert message.startswith(f"job {job_id} of tenant acme (type local) failed: ")
    assert "cell raised" in message


async def test_a_timed_out_job_is_logged_as_timed_out(pool_store: Store, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    async with start_pool(pool_store, pool_env([sleepy_type()])) as pool:
        _, metadata = await pool.run(b'{"seconds": 5}', machine_type="sleepy", timeout_seconds="0.3")
        job_id = metadata["x-pool-job-id"]
    [line] = job_lines(caplog, job_id)
    assert "of tenant acme (type sleepy) timed out: " in line.getMessage()


async def test_a_completed_job_is_not_logged(pool_store: Store, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    async with start_pool(pool_store, pool_env([local_type()])) as pool:
        _, metadata = await pool.run(b"x")
        assert job_lines(caplog, metadata["x-pool-job-id"]) == []
