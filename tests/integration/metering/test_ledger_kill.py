"""kill -9 of a real metering process mid-ingest: a restarted one lands what was left, nothing lost and
nothing doubled (checked against the controller's own rows and by summing the billed durations)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from tests.fixtures.polling import eventually
from tests.fixtures.services import INTERNAL_TOKEN, RunningService
from tests.integration.metering.conftest import feed_ids, ledger_ids, stored_position, write_actions
from thermostat.chassis.internal_auth import INTERNAL_TOKEN_ENV
from thermostat.chassis.ports import free_port
from thermostat.store.db import Store

ACTIONS = 4000


@contextmanager
def metering_process(database_url: str, controller: str) -> Iterator[subprocess.Popen[bytes]]:
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "POD_CONTROLLER_ADDR": controller,
        "METERING_PORT": str(free_port()),
        INTERNAL_TOKEN_ENV: INTERNAL_TOKEN,
        "LEDGER_PAGE_SIZE": "50",
        "LEDGER_POLL_SECONDS": "0.05",
        "LOG_LEVEL": "WARNING",
        # the killed process held the ingest lease: the restarted one takes it over once it lapses
        "LEDGER_LEASE_SECONDS": "2",
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "thermostat.metering"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(10)


async def test_kill_9_mid_ingest_loses_nothing_and_doubles_nothing(
    pod_controller: RunningService, db_store: Store, database_url: str
) -> None:
    await write_actions(db_store.pool, ACTIONS)

    async def partway() -> int | None:
        position = await stored_position(db_store.pool)
        return position if position > 0 else None

    with metering_process(database_url, pod_controller.address) as first:
        killed_at = await eventually(partway, timeout=60, every=0.005)
        first.send_signal(signal.SIGKILL)
        await asyncio.to_thread(first.wait, 10)
    landed = len(await ledger_ids(db_store.pool))
    assert landed == await stored_position(db_store.pool) >= killed_at
    assert landed < ACTIONS, "the kill came after the whole feed was read: nothing was tested"

    async def caught_up() -> bool | None:
        return True if await stored_position(db_store.pool) == ACTIONS else None

    with metering_process(database_url, pod_controller.address):
        await eventually(caught_up, timeout=60, every=0.05)
    assert await ledger_ids(db_store.pool) == await feed_ids(db_store.pool)
    billed = await db_store.pool.fetchval("""
        SELECT sum(extract(epoch FROM s.at - c.at)) FROM ledger_pod_actions c
        JOIN ledger_pod_actions s ON s.pod_id = c.pod_id AND s.action = 'Stop' WHERE c.action = 'Create'""")
    own = await db_store.pool.fetchval("""
        SELECT sum(extract(epoch FROM s.at - c.at)) FROM pod_actions c
        JOIN pod_actions s ON s.pod_id = c.pod_id AND s.action = 'Stop' WHERE c.action = 'Create'""")
    assert billed == own == ACTIONS // 2
