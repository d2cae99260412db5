"""Every machine gets its own token (worker-pool seed: "The token is minted per machine before it boots and passed
in its environment"): a token one machine holds opens no other machine's /execute."""

from __future__ import annotations

from tests.fixtures.polling import eventually
from tests.integration.pool_dispatcher.conftest import (
    ADMIN_TOKEN,
    API_TOKEN,
    RunningPool,
    caller,
    local_type,
    pool_env,
    start_pool,
)
from thermostat.policy.pool.job_outcome import ReplyKind
from thermostat.pool.v1 import pool_pb2
from thermostat.providers.pool.worker_client import WorkerClient
from thermostat.store.db import Store


async def warm_machines(pool: RunningPool, count: int) -> None:
    async def warm() -> bool | None:
        return True if [w.state for w in await pool.workers()] == ["warm"] * count else None

    await eventually(warm, timeout=30)


async def test_each_machine_a_job_or_a_hint_starts_has_its_own_token_which_opens_only_its_worker(
    pool_store: Store,
) -> None:
    async with start_pool(pool_store, pool_env([local_type(max_workers=2)])) as pool:
        await pool.run(b"a", tenant="acme")
        await pool.run(b"b", tenant="globex")
        hinted = await pool.stub.SendHint(pool_pb2.SendHintRequest(machine_type="local"), metadata=caller("initech"))
        assert hinted.started
        await warm_machines(pool, 3)
        rows = await pool_store.pool.fetch("SELECT tenant_id, endpoint, token FROM pool_machines ORDER BY tenant_id")
        assert [r["tenant_id"] for r in rows] == ["acme", "globex", "initech"]
        tokens = [r["token"] for r in rows]
        assert len(set(tokens)) == 3 and all(len(t) >= 32 for t in tokens)  # 32 random bytes, url-safe
        assert not {API_TOKEN, ADMIN_TOKEN} & set(tokens)
        async with WorkerClient() as client:
            for row in rows:
                for token in tokens:
                    reply = await client.execute(row["endpoint"], token, b"knock", deadline_seconds=10)
                    expected = (200, b"knock") if token == row["token"] else (401, None)
                    assert reply.kind is ReplyKind.ANSWERED
                    assert (reply.status, reply.body if reply.status == 200 else None) == expected
