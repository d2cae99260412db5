"""Orphan sweep: a listed machine is an orphan only when it carries the pool's name and the store knows
neither its machine id nor its provider id."""

from __future__ import annotations

import pytest

from thermostat.policy.pool.orphans import ListedMachine, Orphan, find_orphans, machine_id_in_name, to_terminate

PREFIX = "thermostat"
KNOWN = "0b6f5c2e-3a41-4d7e-9c55-1f2a3b4c5d6e"
STRAY = "7d1e2f3a-4b5c-4d6e-8f70-819203a4b5c6"


def orphans(
    *listed: ListedMachine, ids: tuple[str, ...] = (KNOWN,), providers: tuple[str, ...] = ()
) -> tuple[Orphan, ...]:
    return find_orphans(listed=listed, known_machine_ids=ids, known_provider_ids=providers, prefix=PREFIX)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        pytest.param(f"thermostat-cpu-{KNOWN}", KNOWN, id="pool-name-gives-its-machine-id"),
        pytest.param(f"thermostat-gpu-a100-{KNOWN}", KNOWN, id="type-with-dashes"),
        pytest.param(f"thermostat-cpu-{KNOWN.upper()}", KNOWN, id="upper-case-id-normalised"),
        pytest.param(f"other-cpu-{KNOWN}", None, id="another-prefix-not-ours"),
        pytest.param(f"thermostat-{KNOWN}", None, id="no-type-not-ours"),
        pytest.param("thermostat-cpu-not-a-uuid-at-all-but-thirty-six", None, id="no-uuid-not-ours"),
        pytest.param(f"thermostatx-cpu-{KNOWN}", None, id="prefix-must-end-at-a-dash"),
        pytest.param("", None, id="empty-name"),
    ],
)
def test_machine_id_is_read_only_from_names_the_pool_gives(name: str, expected: str | None) -> None:
    assert machine_id_in_name(name, prefix=PREFIX) == expected


def test_a_pool_named_machine_unknown_to_the_store_is_an_orphan() -> None:
    stray = ListedMachine(provider_id="pod-9", name=f"thermostat-cpu-{STRAY}")
    assert orphans(stray) == (Orphan(provider_id="pod-9", name=stray.name, machine_id=STRAY, machine_type="cpu"),)


def test_a_starting_machine_whose_provider_id_is_not_recorded_yet_is_known_by_its_machine_id() -> None:
    """The row is inserted before the boot: the id in the name is enough, the provider id may be missing."""
    assert orphans(ListedMachine(provider_id="pod-new", name=f"thermostat-cpu-{KNOWN}"), providers=()) == ()


def test_a_machine_whose_provider_id_the_store_holds_is_known_whatever_its_name() -> None:
    renamed = ListedMachine(provider_id="pod-1", name=f"thermostat-cpu-{STRAY}")
    assert orphans(renamed, providers=("pod-1",)) == ()


def test_machines_not_named_by_the_pool_are_never_orphans() -> None:
    """Other pods of the account (the pod controller's model pods, hand-made ones) are not the pool's."""
    assert orphans(ListedMachine(provider_id="pod-2", name="llama-70b"), ids=()) == ()


def test_only_the_unknown_machines_of_a_listing_are_orphans() -> None:
    known = ListedMachine(provider_id="pod-1", name=f"thermostat-cpu-{KNOWN}")
    stray = ListedMachine(provider_id="pod-9", name=f"thermostat-cpu-{STRAY}")
    assert [orphan.provider_id for orphan in orphans(known, stray)] == ["pod-9"]


def test_an_orphan_is_terminated_only_when_the_previous_pass_found_it_too() -> None:
    """A machine whose row was deleted between the listing and the store read (a stop in flight) is found once,
    then no longer listed: it is never terminated; a real orphan is, on its second pass."""
    first = Orphan(provider_id="pod-9", name=f"thermostat-cpu-{STRAY}", machine_id=STRAY, machine_type="cpu")
    other = Orphan(provider_id="pod-8", name=f"thermostat-cpu-{KNOWN}", machine_id=KNOWN, machine_type="cpu")
    assert to_terminate(current=(first,), previous=()) == ()
    assert to_terminate(current=(first,), previous=(first, other)) == (first,)
    assert to_terminate(current=(), previous=(first,)) == ()
