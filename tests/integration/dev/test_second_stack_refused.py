"""A second `make run` in the same clone refuses, naming the first one's pid, and never stops a Postgres server
whose owner is alive (issue 35: it took the first stack's live database for a crashed leftover and stopped it)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import asyncpg
import pytest

from tests.fixtures.postgres import embedded_data_dir
from thermostat.dev.embedded_postgres import EmbeddedPostgres, EmbeddedPostgresError
from thermostat.dev.stack.lock import StackAlreadyRunning
from thermostat.dev.stack.supervisor import Stack, StackConfig

# starts an embedded Postgres of its own, with no fixture to say so (tests/fixtures/tiers.py)
pytestmark = pytest.mark.pg

OWNER = """
import sys
from thermostat.dev.embedded_postgres import EmbeddedPostgres
with EmbeddedPostgres(sys.argv[1], durable=False) as server:
    print(server.dsn, flush=True)
    sys.stdin.read()
"""


async def _answers(dsn: str) -> bool:
    connection = await asyncpg.connect(dsn)
    try:
        return await connection.fetchval("SELECT 1") == 1
    finally:
        await connection.close()


def _config(root: Path) -> StackConfig:
    return StackConfig(data_dir=root, durable_db=False, relay_logs=False, edge=False, services=(), simulator_port=0)


async def test_a_second_stack_on_the_same_data_directory_refuses_and_the_first_keeps_its_database() -> None:
    """The refusal names the running one's pid and THERMOSTAT_DATA_DIR; the first's Postgres still answers."""
    with embedded_data_dir() as root:
        first = Stack(_config(root))
        await first.start()
        try:
            second = Stack(_config(root))
            with pytest.raises(StackAlreadyRunning) as refused:
                await second.start()
            assert f"pid {os.getpid()}" in str(refused.value)
            assert "another `make run` of this clone is running" in str(refused.value)
            assert "THERMOSTAT_DATA_DIR" in str(refused.value)
            assert await _answers(first.database_url)
        finally:
            await first.stop()
        again = Stack(_config(root))  # the first one stopped: the directory is free again
        await again.start()
        await again.stop()


def test_a_server_whose_owner_is_alive_is_refused_not_stopped() -> None:
    """Another live process started it: the start raises, and that server keeps serving."""
    with embedded_data_dir() as root:
        argv = [sys.executable, "-c", OWNER, str(root / "pg")]
        with subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) as owner:
            assert owner.stdin is not None and owner.stdout is not None
            try:
                dsn = owner.stdout.readline().strip()
                with pytest.raises(EmbeddedPostgresError, match=f"belongs to pid {owner.pid}, which is running"):
                    EmbeddedPostgres(root / "pg", durable=False).start()
                assert asyncio.run(_answers(dsn))
            finally:
                owner.stdin.close()
                owner.wait(30)
