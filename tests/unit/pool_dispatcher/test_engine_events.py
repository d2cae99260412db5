"""The pool engine's event bus: a part's event reaches every handler of its kind at once, in wiring order."""

from __future__ import annotations

from thermostat.pool_dispatcher.engine.events import (
    PLACEMENT_WANTED,
    SLOT_FREED,
    Events,
    JobChanged,
    MachineFreed,
    PlacementWanted,
    SlotFreed,
)


def test_an_event_reaches_each_handler_of_its_kind_in_the_order_they_were_wired() -> None:
    """Handlers run inside emit (no await between): the receivers' state has changed when emit returns."""
    events, heard = Events(), []
    events.on(MachineFreed, lambda e: heard.append(("intake", e.machine_type)))
    events.on(MachineFreed, lambda e: heard.append(("second", e.image)))
    events.emit(MachineFreed("acme", "sleepy", "img"))
    assert heard == [("intake", "sleepy"), ("second", "img")]


def test_an_event_reaches_no_handler_of_another_kind() -> None:
    events, heard = Events(), []
    events.on(SlotFreed, lambda e: heard.append(e))
    events.emit(PLACEMENT_WANTED)
    events.emit(JobChanged("job"))
    assert heard == []
    events.emit(SLOT_FREED)
    assert heard == [SLOT_FREED]


def test_an_event_nobody_wired_is_dropped() -> None:
    Events().emit(PlacementWanted())
