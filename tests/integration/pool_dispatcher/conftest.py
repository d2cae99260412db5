"""Pool dispatchers in this process over real gRPC and the test's own database, running reference workers
(`python -m thermostat.worker`) as real child processes through the local backend.

The scaler does not run on its own here: a test calls `scaler_pass()` (or `reap()`, `probe()`, `reclaim()`) when
it wants one, and injects the monotonic clock, so no test waits on a timer.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import grpc
import pytest

from tests.fixtures.clock import RealWaits
from tests.fixtures.polling import eventually
from tests.fixtures.postgres import open_store
from tests.integration.pool_dispatcher.seams import Seam
from thermostat.chassis.clock import SYSTEM_CLOCK
from thermostat.chassis.server import ServiceHost
from thermostat.pool.v1 import pool_pb2, pool_pb2_grpc
from thermostat.pool_dispatcher.__main__ import assemble
from thermostat.pool_dispatcher.dispatcher import Dispatcher
from thermostat.pool_dispatcher.orphan_sweep import OrphanSweeper
from thermostat.pool_dispatcher.settings import PoolDispatcherSettings
from thermostat.providers.pool.local import LocalBackend
from thermostat.store.db import Store

API_TOKEN = "pool-api-token-for-tests"
ADMIN_TOKEN = "pool-admin-token-for-tests"
JOB_FIELDS = frozenset(
    {
        "id",
        "tenant_id",
        "machine_type",
        "state",
        "submitted_at",
        "priority",
        "session_id",
        "worker_id",
        "timeout_seconds",
        "error",
        "started_at",
        "completed_at",
        "has_result",
        "handed_to_machines",
    }
)
"""The seed's job JSON fields (and the Job message's): exactly these, never a payload, result or credential."""
TYPED_JOB_FIELDS = frozenset({"job_state", "submit_time", "start_time", "complete_time", "timeout"})
"""The Job message's typed fields beside the seed's (issue 38): the enum, Timestamps and a Duration."""
REFERENCE_WORKER = f"{sys.executable} -m thermostat.worker"
TEST_BACKENDS = "local,docker,runpod,fly"
"""Every backend, local included: a deployment enables local explicitly, as the tests and `make run` do."""


def local_type(name: str = "local", **fields: Any) -> dict[str, Any]:
    return {"name": name, "image": REFERENCE_WORKER, "backend": "local", "boot_timeout_seconds": 30, **fields}


def sleepy_type(name: str = "sleepy", **fields: Any) -> dict[str, Any]:
    """A type whose worker sleeps for the payload's `seconds` (a bare number or {"seconds": n})."""
    env = {"STRATA_WORKER_HANDLER": "sleep", "STRATA_WORKER_SLEEP_SECONDS": "0", **fields.pop("env", {})}
    return local_type(name, env=env, **fields)


def caller(tenant: str | None = "acme", token: str | None = API_TOKEN, **extra: str) -> tuple[tuple[str, str], ...]:
    metadata = []
    if token is not None:
        metadata.append(("authorization", f"Bearer {token}"))
    if tenant is not None:
        metadata.append(("x-strata-tenant", tenant))
    metadata.extend(extra.items())
    return tuple(metadata)


ADMIN = caller(tenant=None, token=ADMIN_TOKEN)


@dataclass
class RunningPool:
    address: str
    dispatcher: Dispatcher
    backend: LocalBackend
    channel: grpc.aio.Channel
    stub: pool_pb2_grpc.PoolDispatcherStub
    orphans: OrphanSweeper
    metrics_port: int | None = None
    host: ServiceHost | None = None  # a deploy test stops it as a signal would (test_deploys.py)

    async def submit(
        self, payload: bytes = b"hello", *, tenant: str = "acme", machine_type: str = "local", **options: str
    ) -> pool_pb2.Job:
        request = pool_pb2.SubmitJobRequest(machine_type=machine_type, **options)
        request.payload.data = payload
        job: pool_pb2.Job = await self.stub.SubmitJob(request, metadata=caller(tenant))
        return job

    async def run(
        self,
        payload: bytes = b"hello",
        *,
        tenant: str = "acme",
        machine_type: str = "local",
        wait_seconds: str = "60",
        **options: str,
    ) -> tuple[bytes, dict[str, str]]:
        """A sync submit: the result bytes and the response metadata."""
        request = pool_pb2.SubmitJobSyncRequest(machine_type=machine_type, wait_seconds=wait_seconds, **options)
        request.payload.data = payload
        call = self.stub.SubmitJobSync(request, metadata=caller(tenant))
        body = await call
        metadata = {k: v for k, v in (*(await call.initial_metadata()), *(await call.trailing_metadata()))}
        return body.data, metadata

    async def job(self, job_id: str, tenant: str = "acme") -> pool_pb2.Job:
        job: pool_pb2.Job = await self.stub.GetJob(pool_pb2.GetJobRequest(id=job_id), metadata=caller(tenant))
        return job

    async def finished(self, job_id: str, tenant: str = "acme", timeout: float = 30.0) -> pool_pb2.Job:
        async def done() -> pool_pb2.Job | None:
            job = await self.job(job_id, tenant)
            return job if job.state in ("completed", "failed", "timed_out", "cancelled") else None

        return await eventually(done, timeout=timeout, every=0.05)

    async def workers(self, tenant: str | None = None) -> list[pool_pb2.Worker]:
        request = pool_pb2.ListWorkersRequest(tenant_id=tenant or "")
        response = await self.stub.ListWorkers(request, metadata=ADMIN)
        return list(response.workers)

    async def usage(self) -> list[pool_pb2.UsageEvent]:
        response = await self.stub.ListUsage(pool_pb2.ListUsageRequest(page_size=1000), metadata=ADMIN)
        return list(response.events)


def pool_env(types: list[dict[str, Any]] | None = None, **overrides: str) -> dict[str, str]:
    env = {
        "STRATA_POOL_TOKEN": API_TOKEN,
        "STRATA_POOL_ADMIN_TOKEN": ADMIN_TOKEN,
        "POOL_MACHINE_TYPES": json.dumps(types if types is not None else [local_type()]),
        "POOL_HEALTH_POLL_SECONDS": "0.05",
        "POOL_LEASE_SECONDS": "30",
        # the tests' types run the reference worker as a child process: local is enabled explicitly (issue 23)
        "POOL_ENABLED_BACKENDS": TEST_BACKENDS,
    }
    env.update(overrides)
    return env


@contextlib.asynccontextmanager
async def start_pool(
    store: Store,
    env: Mapping[str, str],
    *,
    clock: Any = None,
    run_scaler: bool = False,
    lease_clock: Any = None,
    sleep: Any = None,
    seams: Sequence[Seam] = (),
) -> AsyncIterator[RunningPool]:
    with pytest.MonkeyPatch.context() as mp:
        for key in PoolDispatcherSettings.model_fields:
            mp.delenv(key.upper(), raising=False)
        for key, value in env.items():
            mp.setenv(key, value)
        settings = PoolDispatcherSettings()
    # the dispatcher's one clock: the test's readings (or the real ones) with real waits (or the test's sleep)
    real = clock is None and sleep is None
    waits = SYSTEM_CLOCK if real else RealWaits(clock or SYSTEM_CLOCK, sleep or asyncio.sleep)
    service = assemble(settings, leases_on(store, lease_clock), clock=waits, run_scaler=run_scaler)
    for seam in seams:  # each wraps one injected call of this dispatcher (seams.py), in place before it runs
        seam(service.dispatcher)
    port = await service.host.start("127.0.0.1", 0, metrics_port=0)
    address = f"127.0.0.1:{port}"
    channel = grpc.aio.insecure_channel(
        address,
        options=[
            ("grpc.max_receive_message_length", 64 * 1024 * 1024),
            ("grpc.max_send_message_length", 64 * 1024 * 1024),
        ],
    )
    try:
        yield RunningPool(
            address=address,
            dispatcher=service.dispatcher,
            backend=service.backend,
            channel=channel,
            stub=pool_pb2_grpc.PoolDispatcherStub(channel),
            orphans=service.orphans,
            metrics_port=service.host.metrics_port,
            host=service.host,
        )
    finally:
        await channel.close()
        await service.host.stop(1.0)


def leases_on(store: Store, clock: Any) -> Store:
    """`store` with its leases judging trust on `clock` (a test that steps only the instance lease's trust)."""
    if clock is None:
        return store
    view = copy.copy(store)
    view.leases = store.leases.using(clock)
    return view


@pytest.fixture
async def pool_store(database_url: str) -> AsyncIterator[Store]:
    store = await open_store(database_url, max_size=12, application_name="pool-tests")
    yield store
    await store.close()
