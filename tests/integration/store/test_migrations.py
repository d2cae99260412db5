"""Migrations: ordered, each in its own transaction, exactly once across replicas starting together."""

import asyncio
from pathlib import Path

import asyncpg
import pytest

from thermostat.store.migrations import MigrationError, discover_migrations, migrate

REPLICAS = 4


def write_migrations(directory: Path, files: dict[str, str]) -> Path:
    for name, sql in files.items():
        (directory / name).write_text(sql)
    return directory


@pytest.fixture
def counting_migrations(tmp_path):
    """Three migrations that fail if applied twice and count each application."""
    return write_migrations(
        tmp_path,
        {
            "0001_applied.sql": "CREATE TABLE applied (version int NOT NULL);\nINSERT INTO applied VALUES (1);",
            # The sleep holds the lock long enough that every replica arrives while it is taken.
            "0002_slow.sql": "SELECT pg_sleep(0.2);\nCREATE TABLE slow (id int);\nINSERT INTO applied VALUES (2);",
            "0010_last.sql": "CREATE TABLE last (id int);\nINSERT INTO applied VALUES (10);",
        },
    )


async def test_replicas_migrating_at_once_apply_each_migration_exactly_once(empty_database_url, counting_migrations):
    """Four connections migrating together: one applies everything, the others find nothing to do."""
    migrations = discover_migrations(counting_migrations)
    connections = [await asyncpg.connect(empty_database_url) for _ in range(REPLICAS)]
    try:
        results = await asyncio.gather(*(migrate(c, migrations) for c in connections))
        applied_rows = await connections[0].fetch("SELECT version FROM applied ORDER BY version")
        recorded = await connections[0].fetch("SELECT version, name FROM schema_migrations ORDER BY version")
    finally:
        await asyncio.gather(*(c.close() for c in connections))
    assert sorted(len(result) for result in results) == [0] * (REPLICAS - 1) + [3]
    assert [row["version"] for row in applied_rows] == [1, 2, 10]
    assert [(row["version"], row["name"]) for row in recorded] == [(1, "applied"), (2, "slow"), (10, "last")]


async def test_migrating_a_migrated_database_is_a_no_op(empty_database_url, counting_migrations):
    """A second run applies nothing and changes nothing."""
    migrations = discover_migrations(counting_migrations)
    connection = await asyncpg.connect(empty_database_url)
    try:
        first = await migrate(connection, migrations)
        second = await migrate(connection, migrations)
        count = await connection.fetchval("SELECT count(*) FROM applied")
    finally:
        await connection.close()
    assert ([m.version for m in first], second, count) == ([1, 2, 10], [], 3)


async def test_a_failing_migration_leaves_nothing_behind_and_is_retried_next_time(empty_database_url, tmp_path):
    """A migration whose second statement fails is rolled back whole and not recorded."""
    write_migrations(tmp_path, {"0001_half.sql": "CREATE TABLE half (id int);\nSELECT 1 / 0;"})
    connection = await asyncpg.connect(empty_database_url)
    try:
        with pytest.raises(asyncpg.DivisionByZeroError):
            await migrate(connection, discover_migrations(tmp_path))
        leftovers = await connection.fetchval("SELECT to_regclass('half') IS NOT NULL")
        recorded = await connection.fetchval("SELECT count(*) FROM schema_migrations")
        write_migrations(tmp_path, {"0001_half.sql": "CREATE TABLE half (id int);"})
        applied = await migrate(connection, discover_migrations(tmp_path))
    finally:
        await connection.close()
    assert (leftovers, recorded, [m.name for m in applied]) == (False, 0, ["half"])


async def test_a_migration_edited_after_it_was_applied_is_an_error(empty_database_url, tmp_path):
    """Changing an applied file fails loudly instead of leaving the schema behind the code."""
    write_migrations(tmp_path, {"0001_table.sql": "CREATE TABLE t (id int);"})
    connection = await asyncpg.connect(empty_database_url)
    try:
        await migrate(connection, discover_migrations(tmp_path))
        write_migrations(tmp_path, {"0001_table.sql": "CREATE TABLE t (id bigint);"})
        with pytest.raises(MigrationError, match=r"0001_table\.sql changed after it was applied"):
            await migrate(connection, discover_migrations(tmp_path))
    finally:
        await connection.close()


@pytest.mark.parametrize(
    ("files", "error"),
    [
        pytest.param({"1_short.sql": "SELECT 1;"}, "NNNN_lower_snake_name", id="unpadded-number"),
        pytest.param({"0001-dash.sql": "SELECT 1;"}, "NNNN_lower_snake_name", id="dash"),
        pytest.param({"0002_a.sql": "SELECT 1;", "0002_b.sql": "SELECT 2;"}, "share version 2", id="duplicate"),
    ],
)
def test_misnamed_or_clashing_migration_files_are_rejected(tmp_path, files, error):
    """Files that do not say their place in the order unambiguously stop the start-up."""
    write_migrations(tmp_path, files)
    with pytest.raises(MigrationError, match=error):
        discover_migrations(tmp_path)


def test_migrations_are_ordered_by_number_and_other_files_ignored(tmp_path):
    """Numbers, not file-system order, decide; non-SQL files (notes) are not migrations."""
    write_migrations(tmp_path, {"0010_c.sql": "SELECT 3;", "0002_b.sql": "SELECT 2;", "README.md": "notes"})
    assert [m.file_name for m in discover_migrations(tmp_path)] == ["0002_b.sql", "0010_c.sql"]


async def test_shipped_migrations_create_the_lease_table(database_url):
    """The cloned test database carries every shipped migration, the lease table among them."""
    connection = await asyncpg.connect(database_url)
    try:
        versions = await connection.fetch("SELECT version FROM schema_migrations ORDER BY version")
        has_leases = await connection.fetchval("SELECT to_regclass('leases') IS NOT NULL")
    finally:
        await connection.close()
    assert [row["version"] for row in versions] == [m.version for m in discover_migrations()]
    assert has_leases
