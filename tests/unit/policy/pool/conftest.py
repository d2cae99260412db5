"""Shared builders for the pool policy tables."""

from __future__ import annotations

from typing import Any

from thermostat.policy.pool.machine_type import Catalogue, MachineType
from thermostat.policy.pool.machines import Machine, MachineState


def catalogue(*types: MachineType) -> Catalogue:
    return Catalogue(types=types)


def cpu(**fields: Any) -> MachineType:
    return MachineType(**{"name": "cpu", "image": "worker:v1", **fields})


def machine(id: str, state: MachineState = MachineState.WARM, **fields: Any) -> Machine:
    values: dict[str, Any] = {"tenant_id": "acme", "machine_type": "cpu", "image": "worker:v1", **fields}
    return Machine(id=id, state=state, **values)
