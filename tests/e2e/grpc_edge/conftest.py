"""The whole stack behind the real edge (tests/e2e/cli/stack.py), once per module, spoken to as a gRPC client and
an operator's grpcurl would."""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
import grpc
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
        store = await Store.open(dsn, max_size=20, application_name="grpc-edge-tests")
        try:
            async with cli_stack(store, tmp_path_factory.mktemp("edge")) as running:
                yield running
        finally:
            await store.close()


@pytest.fixture
async def edge(stack: CliStack) -> AsyncIterator[grpc.aio.Channel]:
    """A plain gRPC channel to the edge."""
    async with grpc.aio.insecure_channel(stack.edge) as channel:
        yield channel
