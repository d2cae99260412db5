"""Rotation at the fleet cap: when tenants with demand outnumber the slots, holders take turns, one rule each."""

from __future__ import annotations

import pytest

from tests.unit.policy.pool.conftest import catalogue, cpu, machine
from thermostat.policy.pool.fair_share import FairShareDecision, plan_fair_share
from thermostat.policy.pool.machine_type import Catalogue
from thermostat.policy.pool.machines import Machine, MachineState
from thermostat.policy.pool.placement import Demand, plan_placement, wait_places
from thermostat.policy.pool.queue_order import QueuedJob
from thermostat.policy.pool.rotation import measured_boots, min_tenure, wait_line

S = MachineState
BOOT = 20.0  # every holder's measured boot below, so its default tenure


def held(id: str, tenant: str, seconds: float | None, state: MachineState = S.BUSY, **fields: object) -> Machine:
    """A machine of `tenant` that has held its slot `seconds` since its boot (None: still booting)."""
    boot = None if seconds is None else BOOT
    return machine(id, state, tenant_id=tenant, held_seconds=seconds, boot_seconds=boot, **fields)


def decide(
    machines: list[Machine],
    *,
    queued: dict[str, int],
    held_back: dict[str, int],
    cap: int = 1,
    waits: dict[str, tuple[int, int]] | None = None,
    types: Catalogue | None = None,
) -> FairShareDecision:
    return plan_fair_share(
        queued=queued,
        held_back=held_back,
        machines=machines,
        max_workers_total=cap,
        waits=waits,
        catalogue=types or catalogue(cpu()),
    )


def given(decision: FairShareDecision) -> list[tuple[str, str, str]]:
    """(machine, how, to tenant) for every machine the decision takes a slot from."""
    return [
        *((y.machine_id, "now", y.to_tenant) for y in decision.retire_now),
        *((y.machine_id, "mark", y.to_tenant) for y in decision.mark),
        *((y.machine_id, "keep", y.to_tenant) for y in decision.keep),
    ]


INCIDENT = {"queued": {"heavy": 14, "light": 1}, "held_back": {"heavy": 14, "light": 1}}
"""Cap 1: heavy holds the slot with fourteen more queued; light submitted one job (issue 35 item 1)."""


@pytest.mark.parametrize(
    ("machines", "expected"),
    [
        pytest.param([held("h1", "heavy", 25)], [("h1", "mark", "light")], id="past-its-tenure-the-holder-rotates"),
        pytest.param([held("h1", "heavy", 5)], [], id="within-its-tenure-it-keeps-the-slot"),
        pytest.param([held("h1", "heavy", None)], [], id="a-booting-machine-is-never-rotated"),
        pytest.param([held("h1", "heavy", 25, S.WARM)], [("h1", "now", "light")], id="an-idle-holder-goes-at-once"),
        pytest.param(
            [held("h1", "heavy", 2, yield_to="light")],
            [("h1", "keep", "light")],
            id="a-mark-already-made-is-kept-whatever-the-tenure",
        ),
        pytest.param(
            [held("h1", "heavy", 25, S.STOPPING, yield_to="light")], [], id="a-stopping-holder-is-the-slot-on-its-way"
        ),
    ],
)
def test_at_a_cap_of_one_the_holder_gives_its_slot_after_its_tenure(
    machines: list[Machine], expected: list[tuple[str, str, str]]
) -> None:
    """The incident: nobody is over its share (1), so heavy's machine is retired after its current job once it has
    held the slot for its tenure (its type's measured boot by default), and light boots in its place."""
    assert given(decide(machines, **INCIDENT)) == expected


def test_a_rotation_is_marked_as_one_for_the_holders_turn() -> None:
    """A rotation's yield says so: the engine records the holder's turn, so it queues behind those waiting."""
    [rotation] = decide([held("h1", "heavy", 25)], **INCIDENT).mark
    assert (rotation.tenant_id, rotation.to_tenant, rotation.rotation) == ("heavy", "light", True)


def test_no_rotation_while_a_tenant_is_over_its_share() -> None:
    """A tenant over its share donates (fair_share's rule); the holder at its share is not rotated."""
    machines = [held("a1", "a", 60), held("a2", "a", 60), held("b1", "b", 90)]
    decision = decide(machines, queued={"a": 9, "b": 9, "c": 1}, held_back={"c": 1}, cap=3)
    assert [(m, how) for m, how, _ in given(decision)] == [("a1", "mark")]
    assert not decision.mark[0].rotation


def test_the_holder_that_has_held_its_slot_longest_rotates_first() -> None:
    """Cap 2 with three tenants: both holders are past their tenure, the one holding longer gives its slot."""
    machines = [held("a1", "a", 30), held("b1", "b", 90)]
    decision = decide(machines, queued={"a": 9, "b": 9, "c": 1}, held_back={"a": 9, "b": 9, "c": 1}, cap=2)
    assert given(decision) == [("b1", "mark", "c")]


def test_one_slot_per_waiting_tenant_and_one_per_holder() -> None:
    """Two tenants wait at a cap of 2 held by a and b: each holder gives one slot, the longest-held first."""
    machines = [held("a1", "a", 30), held("b1", "b", 90)]
    queued = {"a": 9, "b": 9, "c": 5, "d": 5}
    decision = decide(machines, queued=queued, held_back=queued, cap=2, waits={"c": (0, 7), "d": (0, 3)})
    assert given(decision) == [("b1", "mark", "d"), ("a1", "mark", "c")]


def test_a_tenant_below_its_share_is_not_rotated_out() -> None:
    """Cap 4, three tenants (share 2): only a, at its share, gives; b holds one, below its share, and waits too."""
    machines = [held("a1", "a", 30), held("a2", "a", 40), held("b1", "b", 900), held("c1", "c", 10)]
    queued = {"a": 9, "b": 9, "c": 9}
    decision = decide(machines, queued=queued, held_back=queued, cap=4, waits={"b": (0, 5), "c": (0, 6)})
    assert given(decision) == [("a2", "mark", "b")]


def test_a_tenant_waiting_only_behind_its_own_backlog_rotates_nobody() -> None:
    """Heavy alone: its backlog is held back at the cap, but nobody else waits, so it keeps its slot."""
    assert given(decide([held("h1", "heavy", 900)], queued={"heavy": 14}, held_back={"heavy": 14})) == []


@pytest.mark.parametrize(
    ("setting", "held_for", "rotates"),
    [
        pytest.param(None, 19.0, False, id="unset-the-measured-boot-not-yet-held"),
        pytest.param(None, 20.0, True, id="unset-the-measured-boot-held"),
        pytest.param(60.0, 30.0, False, id="set-the-setting-wins-over-the-boot"),
        pytest.param(0.0, 0.0, True, id="zero-rotates-after-every-job"),
    ],
)
def test_the_minimum_tenure_is_the_types_setting_else_its_measured_boot(
    setting: float | None, held_for: float, rotates: bool
) -> None:
    """`min_tenure_seconds` when set, else the mean boot of the type's machines in the fleet."""
    decision = decide([held("h1", "heavy", held_for)], **INCIDENT, types=catalogue(cpu(min_tenure_seconds=setting)))
    assert bool(decision.mark) is rotates


def test_the_measured_boot_is_the_mean_of_the_types_booted_machines() -> None:
    """Booting machines have no boot yet; a type without one measured has a tenure of 0 (nothing to amortize)."""
    machines = [
        machine("a", boot_seconds=10.0),
        machine("b", boot_seconds=30.0),
        machine("c", S.STARTING),
        machine("g", machine_type="gpu", boot_seconds=120.0),
    ]
    measured = measured_boots(machines)
    assert measured == {"cpu": 20.0, "gpu": 120.0}
    assert min_tenure("other", catalogue(cpu()), measured) == 0.0


def demand(tenant: str, seq: int, *, turn: int = 0, priority: int = 0, queued: int = 1) -> Demand:
    head = QueuedJob(id=f"{tenant}-{seq}", priority=priority, sequence=seq)
    return Demand(tenant_id=tenant, machine_type="cpu", queued=queued, head=head, turn=turn)


@pytest.mark.parametrize(
    ("groups", "line"),
    [
        pytest.param([demand("heavy", 1), demand("light", 16)], ["heavy", "light"], id="first-queued-job-first"),
        pytest.param(
            [demand("heavy", 1, turn=20), demand("light", 16)], ["light", "heavy"], id="rotated-out-waits-from-its-turn"
        ),
        pytest.param(
            [demand("heavy", 30, turn=20), demand("light", 16)], ["light", "heavy"], id="an-old-turn-is-no-head-start"
        ),
        pytest.param(
            [demand("heavy", 1, turn=20), demand("light", 16, priority=-1)],
            ["heavy", "light"],
            id="priority-before-the-wait",
        ),
    ],
)
def test_the_tenant_that_has_waited_longest_is_first_in_line(groups: list[Demand], line: list[str]) -> None:
    """A tenant's wait begins at its first queued job, or at its last rotation out if later."""
    assert wait_line(["light", "heavy"], wait_places(groups)) == line


def test_the_slot_a_rotation_freed_goes_to_the_tenant_waiting_not_back_to_the_holder() -> None:
    """Heavy's machine is gone; both are below their share, and heavy's older backlog waits from its turn."""
    plan = plan_placement(
        demand=[demand("heavy", 1, turn=20, queued=13), demand("light", 16)],
        machines=[],
        catalogue=catalogue(cpu()),
        max_workers_total=1,
    )
    assert [s.tenant_id for s in plan.starts] == ["light"]


def test_ten_light_tenants_take_the_slot_in_the_order_they_came() -> None:
    """One heavy tenant rotated out and ten light ones waiting: the freed slot goes to the first light submitter."""
    groups = [demand("heavy", 1, turn=100, queued=50), *(demand(f"light{i}", 90 - i) for i in range(10))]
    assert wait_line([g.tenant_id for g in groups], wait_places(groups))[:2] == ["light9", "light8"]
    assert wait_line([g.tenant_id for g in groups], wait_places(groups))[-1] == "heavy"


@pytest.mark.parametrize(
    ("machines", "recheck"),
    [
        pytest.param([held("h1", "heavy", 5)], 15.0, id="when-the-holders-tenure-ends"),
        pytest.param([held("h1", "heavy", None, S.STARTING)], 20.0, id="a-booting-holder-its-whole-tenure"),
        pytest.param([held("h1", "heavy", 19.99)], 0.05, id="never-sooner-than-the-floor"),
        pytest.param([held("h1", "heavy", 25)], None, id="none-once-it-rotated"),
        pytest.param([held("h1", "heavy", 25, yield_to="light")], None, id="none-for-a-holder-already-marked"),
    ],
)
def test_a_tenant_waiting_for_a_tenure_asks_to_be_placed_again_when_it_ends(
    machines: list[Machine], recheck: float | None
) -> None:
    """Nothing else runs a placement pass when a holder's tenure ends, so the decision says when to place again."""
    types = catalogue(cpu(min_tenure_seconds=BOOT))
    assert decide(machines, **INCIDENT, types=types).recheck_seconds == pytest.approx(recheck)
