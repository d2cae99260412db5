"""A pruned job through the real Envoy edge: the seed's REST routes answer 404 with a problem detail saying it expired,
and an id no job ever had answers the plain "no such job" (docs/pool-retention.md).

One pool dispatcher (in this process, over real gRPC and the module's own database, running a reference worker as a
child process) with a retention of about a second and a prune pass every 0.2 s, behind the real Envoy.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from tests.e2e.test_pool_through_edge import edge_for, fresh_tenant, problem, tenant_headers
from tests.fixtures.polling import eventually
from tests.fixtures.postgres import open_store
from tests.integration.pool_dispatcher.conftest import local_type, pool_env, start_pool
from thermostat.policy.pool.retention import mint_job_id
from thermostat.store.db import Store

pytestmark = pytest.mark.e2e

RETENTION_HOURS = "0.0003"  # 1.08 s


@pytest.fixture
async def store(database_url: str) -> AsyncIterator[Store]:
    opened = await open_store(database_url, max_size=8, application_name="pool-retention-edge")
    yield opened
    await opened.close()


async def test_a_pruned_job_answers_404_saying_it_expired_through_the_edge(store: Store, tmp_path: Path) -> None:
    env = pool_env([local_type()], POOL_JOB_RETENTION_HOURS=RETENTION_HOURS, POOL_PRUNE_SECONDS="0.2")
    tenant = fresh_tenant()
    headers = tenant_headers(tenant)
    async with start_pool(store, env) as pool, edge_for(pool.address, tmp_path) as edge:
        submitted = await edge.post(
            "/v1/jobs", params={"machine_type": "local"}, content=b"kept a moment", headers=headers
        )
        assert submitted.status_code == 202, submitted.text
        job_id = submitted.json()["id"]
        assert uuid.UUID(job_id).version == 7  # its id says when it was minted

        async def pruned() -> httpx.Response | None:
            answer = await edge.get(f"/v1/jobs/{job_id}", headers=headers)
            return answer if answer.status_code == 404 else None

        expired = f"job {job_id} expired: finished jobs and their results are kept {RETENTION_HOURS} hours"
        assert problem(await eventually(pruned, timeout=30, every=0.1), 404) == expired
        assert problem(await edge.get(f"/v1/jobs/{job_id}/result", headers=headers), 404) == expired
        cancel = await edge.post(f"/v1/jobs/{job_id}/cancel", json={"build_id": "b-1"}, headers=headers)
        assert problem(cancel, 404) == expired

        never = mint_job_id(now=datetime.now(UTC), random=bytes(10))
        assert problem(await edge.get(f"/v1/jobs/{never}", headers=headers), 404) == "no such job"
