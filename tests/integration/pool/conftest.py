"""Local machines for the pool's adapter tests: reference workers started through the LocalBackend."""

from __future__ import annotations

import contextlib
import sys
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.fixtures.polling import eventually
from thermostat.policy.pool.machine_type import BackendKind, MachineType
from thermostat.providers.pool.backend import Backend, MachineHandle, MachineSpec
from thermostat.providers.pool.local import LocalBackend
from thermostat.providers.pool.worker_client import WorkerClient

REFERENCE_WORKER = f"{sys.executable} -m thermostat.worker"
MACHINE_TOKEN = "machine-token-for-tests"


def worker_type(**fields: Any) -> MachineType:
    return MachineType(**{"name": "local", "image": REFERENCE_WORKER, "backend": BackendKind.LOCAL, **fields})


def spec(machine_type: MachineType | None = None, token: str = MACHINE_TOKEN) -> MachineSpec:
    return MachineSpec(
        machine_id=uuid.uuid4().hex, tenant_id="acme", machine_type=machine_type or worker_type(), worker_token=token
    )


@pytest.fixture
async def client() -> AsyncIterator[WorkerClient]:
    async with WorkerClient(probe_timeout_seconds=1.0) as worker_client:
        yield worker_client


@pytest.fixture
async def backend(client: WorkerClient) -> AsyncIterator[LocalBackend]:
    local = LocalBackend(client, stop_grace_seconds=2.0)
    try:
        yield local
    finally:
        await local.aclose()


async def healthy(backend: Backend, handle: MachineHandle) -> None:
    """Poll the machine's health until it answers, as the pool's boot does."""

    async def probe() -> bool | None:
        return True if await backend.health(handle) else None

    await eventually(probe, timeout=20, every=0.05)


async def booted(backend: LocalBackend, machine_spec: MachineSpec) -> MachineHandle:
    """Start a machine and wait until it is healthy."""
    handle = await backend.start(machine_spec)
    await healthy(backend, handle)
    return handle


@contextlib.asynccontextmanager
async def machine(backend: LocalBackend, **fields: Any) -> AsyncIterator[MachineHandle]:
    handle = await booted(backend, spec(worker_type(**fields)))
    try:
        yield handle
    finally:
        await backend.stop(handle.provider_id)
