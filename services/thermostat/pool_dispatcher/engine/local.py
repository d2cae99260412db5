"""Local: what one process knows of its pool that no row holds, in one value the facade owns and hands the parts.

A part reads and keeps its entries here rather than in its own fields, so no part writes another's state: the
runner stamps a machine idle where the reaper reads it, a shutdown's drain is one flag every part sees.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

from thermostat.policy.pool.submit_batch import Outlook


class WantsPlacement(Protocol):
    """Placement's poke, the one call a part below it makes upward: queued work may be placeable now, so a pass runs
    (or runs again after the pass in flight); `at_cap`: only under a fleet cap (a machine gone idle, or just booted,
    may be the slot a waiting tenant needs). The facade hands it to the parts; placement.py's `poke` is what it does.
    """

    def __call__(self, *, at_cap: bool = False) -> None: ...


class SubmitKey(NamedTuple):
    """What one submit statement or batch is about: the tenant's jobs of one machine type and image."""

    tenant_id: str
    machine_type: str
    image: str


@dataclass(eq=False, slots=True)
class Local:
    # machine id → when it went idle here (monotonic), for the reaper
    idle: dict[str, float] = field(default_factory=dict)
    # what the last submit of each key said of the next (thermostat.policy.pool.submit_batch)
    outlooks: dict[SubmitKey, Outlook] = field(default_factory=dict)
    # machine id → the token of the task that drives it (drivers.py)
    driving: dict[str, object] = field(default_factory=dict)
    # machines whose boot began here and ended on an unexpected error: never booted again (placement)
    boot_died: set[str] = field(default_factory=set)
    # each key's batches sent and not yet answered, and how many went out (a completion racing one)
    batches_out: dict[SubmitKey, set[asyncio.Task[None]]] = field(default_factory=dict)
    batches_sent: dict[SubmitKey, int] = field(default_factory=dict)
    # a shutdown's drain began: no submit, no placement, and a finished job's machine takes no next job here
    draining: bool = False
