"""A PUT of the catalogue through one dispatcher process is what every other live process serves (worker-pool seed:
"Replace the catalogue without a restart"), without a restart or a call to it: `LISTEN pool_catalogue` applies it
(engine/catalogue.py). The scaler is off here, so its pass, the other way a copy refreshes, cannot be what did."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

from tests.fixtures.polling import eventually
from tests.fixtures.postgres import open_store
from tests.integration.pool_dispatcher.conftest import ADMIN, RunningPool, local_type, pool_env, start_pool
from thermostat.pool.v1 import pool_pb2


@contextlib.asynccontextmanager
async def instance(database_url: str, instance_id: str, types: list[dict[str, Any]]) -> AsyncIterator[RunningPool]:
    store = await open_store(database_url, max_size=12, application_name=f"pool-{instance_id}")
    try:
        async with start_pool(store, pool_env(types, POOL_INSTANCE_ID=instance_id)) as pool:
            yield pool
    finally:
        await store.close()


async def put(pool: RunningPool, types: list[dict[str, Any]]) -> None:
    request = pool_pb2.PutMachineTypesRequest()
    request.catalogue.data = json.dumps(types).encode()
    await pool.stub.PutMachineTypes(request, metadata=ADMIN)


async def applied(pool: RunningPool, version: int) -> None:
    """Until the process's own copy is at `version` (its placement, caps and runs read that copy)."""

    async def at_version() -> bool | None:
        return True if pool.dispatcher.catalogues.state.version == version else None

    await eventually(at_version, timeout=10, every=0.02)


async def test_a_put_through_one_process_is_served_by_another_live_one(database_url: str) -> None:
    """beta runs a warm machine of `local`; alpha's PUT changes the type's image and env and adds `second`. beta
    applies it unasked: its next `local` job runs on a machine of the new image (the old one is not fed), and
    alpha's removal of `second` after that is refused by beta as an unknown type."""
    v1 = [local_type()]
    async with instance(database_url, "alpha", v1) as alpha, instance(database_url, "beta", v1) as beta:
        body, _ = await beta.run(b"before")
        assert body == b"before"
        [old] = await beta.workers()
        changed = local_type(
            image=f"{sys.executable} -u -m thermostat.worker",
            env={"STRATA_WORKER_HANDLER": "fail", "STRATA_WORKER_FAIL_MESSAGE": "catalogue v2"},
        )
        await put(alpha, [changed, local_type("second")])
        await applied(beta, alpha.dispatcher.catalogues.state.version)
        assert beta.dispatcher.catalogues.catalogue.names == alpha.dispatcher.catalogues.catalogue.names
        failed = await beta.finished((await beta.submit(b"after")).id)
        assert failed.state == "failed" and "catalogue v2" in failed.error and failed.worker_id != old.id

        await put(alpha, [changed])
        await applied(beta, alpha.dispatcher.catalogues.state.version)
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await beta.submit(b"x", machine_type="second")
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "second" in refused.value.details()
