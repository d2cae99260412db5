"""The engine's events: what one part tells the others, as values, through one small synchronous bus.

A part emits an event where something happened that another part acts on; it never reaches into that part.
Handlers are plain functions wired by the facade (dispatcher.py) and run at once, in registration order, inside
`emit` (no await between the emit and the handlers: an event changes the receivers' state exactly where the old
inline code did).

- `JobFinished`: this process's completion answered with the finished job (waits hand it to a sync wait here).
- `JobChanged`: a job ended or moved outside a wait's sight (cancel, reclaim, a failed boot, a lost send): waits
  wake its waiters, who read it.
- `MachineFreed`: a machine of this process went idle (warm) with no next job: intake lets the key's next submit
  claim it (its batch gathering goes out at once); under a fleet cap placement runs (fair share may give the slot).
- `MachineBooted`: a machine of this process answered its boot: under a fleet cap placement runs (fair share never
  takes a booting machine, so a tenant waiting at the cap may need this one).
- `SlotFreed`: a machine stopped or failed to boot: a tenant's cap slot is free, so intake forgets what it expected
  of the next submit (its outlooks).
- `CatalogueChanged`: another catalogue applies (caps may have changed): intake forgets its outlooks.
- `PlacementWanted`: queued work may be placeable now: placement runs (or runs again after the pass in flight).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from ..repository import Finished


@dataclass(frozen=True, slots=True)
class JobFinished:
    job_id: str
    finished: Finished


@dataclass(frozen=True, slots=True)
class JobChanged:
    job_id: str


@dataclass(frozen=True, slots=True)
class MachineFreed:
    tenant_id: str
    machine_type: str
    image: str


@dataclass(frozen=True, slots=True)
class MachineBooted:
    machine_id: str


@dataclass(frozen=True, slots=True)
class SlotFreed:
    pass


@dataclass(frozen=True, slots=True)
class CatalogueChanged:
    version: int


@dataclass(frozen=True, slots=True)
class PlacementWanted:
    pass


SLOT_FREED = SlotFreed()
PLACEMENT_WANTED = PlacementWanted()

E = TypeVar("E")


class Events:
    """The bus: `on(kind, handler)` at wiring time, `emit(event)` from the parts."""

    def __init__(self) -> None:
        self._handlers: dict[type[Any], list[Callable[[Any], None]]] = {}

    def on(self, kind: type[E], handler: Callable[[E], None]) -> None:
        self._handlers.setdefault(kind, []).append(handler)

    def emit(self, event: object) -> None:
        for handler in self._handlers.get(type(event), ()):
            handler(event)
