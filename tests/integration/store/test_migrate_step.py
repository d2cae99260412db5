"""The deployment's migration step (`python -m thermostat.store.migrate`, the Kubernetes Job and compose's
`migrate`) brings a database current, is a no-op the second time, and names what it needs."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import asyncpg

from thermostat.store.migrations import discover_migrations

ROOT = Path(__file__).resolve().parents[3]


async def _migrate_step(env: dict[str, str]) -> tuple[int, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "thermostat.store.migrate",
        cwd=ROOT,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    output, _ = await asyncio.wait_for(process.communicate(), timeout=60)
    assert process.returncode is not None
    return process.returncode, output.decode()


def _env(**overrides: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    return {**env, **overrides}


async def test_the_step_applies_every_migration_to_an_empty_database_and_exits_zero(empty_database_url: str) -> None:
    code, output = await _migrate_step(_env(DATABASE_URL=empty_database_url))
    assert code == 0, output
    latest = discover_migrations()[-1]
    assert f"now at {latest.file_name}" in output
    connection = await asyncpg.connect(empty_database_url)
    try:
        versions = [row["version"] for row in await connection.fetch("SELECT version FROM schema_migrations")]
    finally:
        await connection.close()
    assert sorted(versions) == [m.version for m in discover_migrations()]


async def test_the_step_on_a_current_database_applies_nothing_and_exits_zero(database_url: str) -> None:
    code, output = await _migrate_step(_env(DATABASE_URL=database_url))
    assert code == 0, output
    assert "nothing to apply" in output


async def test_the_step_without_database_url_exits_two_naming_the_variable() -> None:
    code, output = await _migrate_step(_env())
    assert code == 2
    assert "DATABASE_URL is required" in output


async def test_the_step_against_an_unreachable_database_exits_one_without_printing_the_password() -> None:
    """A refused connection fails the step (the Job retries it); the DSN's password never reaches the log."""
    dsn = "postgresql://thermostat:s3cret-password@127.0.0.1:9/thermostat"
    code, output = await _migrate_step(_env(DATABASE_URL=dsn))
    assert code == 1
    assert "migrations failed" in output
    assert "s3cret-password" not in output
