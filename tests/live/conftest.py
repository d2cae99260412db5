"""Live tests against real providers: billed, opt-in per provider by environment variable, never run in CI.

STRATA_POOL_RUNPOD_LIVE=1, STRATA_POOL_FLY_LIVE=1 (the seed's names; THERMOSTAT_POOL_RUNPOD_LIVE and
THERMOSTAT_POOL_FLY_LIVE are aliases) opt in to the billed ones; the Docker ones run
whenever a daemon is reachable (STRATA_POOL_REQUIRE_DOCKER=1 turns an unreachable daemon into a failure). Each test
terminates what it starts, in a finally; a crashed interpreter can still leave a machine, named
`{POOL_NAME}-{machine_type}-{machine_id}` so it is findable in the provider's console.
"""

from __future__ import annotations

import os
import uuid

import pytest

from tests.fixtures.polling import eventually
from thermostat.policy.pool.machine_type import MachineType
from thermostat.providers.pool.backend import Backend, MachineHandle, MachineSpec
from thermostat.providers.pool.settings import ALIASES, env_setting

LIVE_TOKEN_PREFIX = "live-"


def setting(name: str) -> str:
    """A variable's value, blank when unset; a seed name is read with its alias (both set and different: an error
    naming both)."""
    if name in ALIASES:
        return env_setting(name) or ""
    return os.environ.get(name, "").strip()


def opted_in(variable: str) -> pytest.MarkDecorator:
    """Skip unless `variable`=1 (or its alias): a billed test runs only when someone asked for it."""
    return pytest.mark.skipif(setting(variable) != "1", reason=f"billed: set {variable}=1 to run")


def required(variable: str, *fallbacks: str) -> str:
    """A setting an opted-in live test cannot run without: missing is a failure, not a skip."""
    for name in (variable, *fallbacks):
        value = setting(name)
        if value:
            return value
    pytest.fail(f"{variable} is required for this live test{' (or ' + ', '.join(fallbacks) + ')' if fallbacks else ''}")


def live_spec(machine_type: MachineType) -> MachineSpec:
    return MachineSpec(
        machine_id=uuid.uuid4().hex[:12], tenant_id="live", machine_type=machine_type,
        worker_token=LIVE_TOKEN_PREFIX + uuid.uuid4().hex,
    )  # fmt: skip


async def until_healthy(backend: Backend, handle: MachineHandle, timeout: float) -> None:
    async def probe() -> bool | None:
        return True if await backend.health(handle) else None

    await eventually(probe, timeout=timeout, every=2.0)
