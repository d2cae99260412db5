"""One stack per test module (stack.py); tests keep apart by pod name and tenant."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import asyncpg
import pytest

from tests.e2e.cli.stack import CliStack, cli_stack
from tests.fixtures.postgres import scratch_database
from thermostat.store.db import Store


@pytest.fixture(scope="module")
async def stack(
    postgres_admin: asyncpg.Connection,
    template_database: str,
    postgres_dsn: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[CliStack]:
    async with scratch_database(postgres_admin, postgres_dsn, template=template_database) as dsn:
        store = await Store.open(dsn, max_size=20, application_name="cli-tests")
        try:
            async with cli_stack(store, tmp_path_factory.mktemp("edge")) as running:
                yield running
        finally:
            await store.close()


def fresh_tenant() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"
