"""Fair share at the fleet cap: which machines give their slot to a tenant the fleet cap holds back, one rule each."""

from __future__ import annotations

import pytest

from tests.unit.policy.pool.conftest import catalogue, cpu, machine
from thermostat.policy.pool.fair_share import FairShareDecision, fair_share, plan_fair_share, tenants_with_demand
from thermostat.policy.pool.machines import Machine, MachineState
from thermostat.policy.pool.placement import DeferReason, Demand, plan_placement
from thermostat.policy.pool.queue_order import QueuedJob

S = MachineState


def a(id: str, state: MachineState = S.BUSY, **fields: object) -> Machine:
    return machine(id, state, tenant_id="a", **fields)


def b(id: str, state: MachineState = S.BUSY, **fields: object) -> Machine:
    return machine(id, state, tenant_id="b", **fields)


def decide(
    machines: list[Machine], *, queued: dict[str, int], held_back: dict[str, int], cap: int | None = 2
) -> FairShareDecision:
    return plan_fair_share(queued=queued, held_back=held_back, machines=machines, max_workers_total=cap)


def ids(decision: FairShareDecision) -> dict[str, tuple[str, ...]]:
    return {
        "now": tuple(y.machine_id for y in decision.retire_now),
        "mark": tuple(y.machine_id for y in decision.mark),
        "keep": tuple(y.machine_id for y in decision.keep),
        "clear": decision.clear,
    }


NOTHING = {"now": (), "mark": (), "keep": (), "clear": ()}


@pytest.mark.parametrize(
    ("cap", "tenants", "share"),
    [
        pytest.param(2, 1, 2, id="one-tenant-gets-the-whole-cap"),
        pytest.param(2, 2, 1, id="two-tenants-split-it"),
        pytest.param(2, 3, 1, id="rounded-up-so-tenants-at-their-share-never-trade"),
        pytest.param(5, 2, 3, id="odd-cap-rounds-up"),
        pytest.param(4, 0, 4, id="no-tenant-with-demand-is-one"),
    ],
)
def test_the_share_is_the_cap_over_the_tenants_with_demand_rounded_up(cap: int, tenants: int, share: int) -> None:
    """A tenant's share is ceil(cap / tenants with demand)."""
    assert fair_share(max_workers_total=cap, tenants=tenants) == share


def test_a_tenant_has_demand_with_a_queued_job_or_a_busy_machine() -> None:
    """Queued jobs and running jobs are demand; an idle machine is not."""
    machines = [a("a1", S.BUSY), machine("c1", S.WARM, tenant_id="c")]
    assert tenants_with_demand(queued={"b": 1, "d": 0}, machines=machines) == {"a", "b"}


@pytest.mark.parametrize(
    ("machines", "queued", "held_back", "cap", "expected"),
    [
        pytest.param([a("a1"), a("a2")], {"a": 500, "b": 1}, {"b": 1}, None, NOTHING, id="no-fleet-cap-no-retirement"),
        pytest.param([a("a1"), a("a2")], {"a": 500}, {"a": 498}, 2, NOTHING, id="only-the-backlog-waits-nothing-moves"),
        pytest.param(
            [a("a1"), a("a2")],
            {"a": 500, "b": 1},
            {"b": 1},
            2,
            {**NOTHING, "mark": ("a1",)},
            id="a-busy-machine-over-share-retires-after-its-job",
        ),
        pytest.param(
            [a("a1"), a("a2", S.WARM)],
            {"a": 500, "b": 1},
            {"b": 1},
            2,
            {**NOTHING, "now": ("a2",)},
            id="an-idle-machine-goes-before-a-busy-one-at-once",
        ),
        pytest.param(
            [a("a1", S.STARTING), a("a2", S.STARTING)],
            {"a": 500, "b": 1},
            {"b": 1},
            2,
            NOTHING,
            id="a-starting-machine-is-never-chosen",
        ),
        pytest.param(
            [a("a1"), b("b1")],
            {"a": 500, "b": 5},
            {"a": 498, "b": 4},
            2,
            NOTHING,
            id="tenants-at-their-share-keep-their-machines",
        ),
        pytest.param(
            [a("a1"), a("a2"), machine("c1", tenant_id="c")],
            {"a": 9, "b": 1, "c": 1},
            {"b": 1},
            3,
            {**NOTHING, "mark": ("a1",)},
            id="only-the-tenant-over-its-share-gives",
        ),
        pytest.param(
            [a("a1"), machine("c1", S.WARM, tenant_id="c")],
            {"a": 9, "b": 1},
            {"b": 1},
            2,
            {**NOTHING, "now": ("c1",)},
            id="an-idle-machine-of-a-tenant-without-demand-gives-first",
        ),
        pytest.param(
            [a("a1"), a("a2"), a("a3"), a("a4")],
            {"a": 9, "b": 1},
            {"b": 1},
            4,
            {**NOTHING, "mark": ("a1",)},
            id="only-as-many-slots-as-the-waiting-jobs-need",
        ),
        pytest.param(
            [a("a1"), a("a2"), a("a3"), a("a4")],
            {"a": 9, "b": 5},
            {"b": 5},
            4,
            {**NOTHING, "mark": ("a1", "a2")},
            id="at-most-up-to-the-waiting-tenants-share",
        ),
    ],
)
def test_a_machine_over_its_tenants_share_gives_its_slot_to_a_tenant_waiting_at_the_cap(
    machines: list[Machine],
    queued: dict[str, int],
    held_back: dict[str, int],
    cap: int | None,
    expected: dict[str, tuple[str, ...]],
) -> None:
    """While a tenant below its share waits at the fleet cap, a machine of a tenant over its share is retired: an
    idle one now, a busy one after its current job (never mid-job, never a boot)."""
    assert ids(decide(machines, queued=queued, held_back=held_back, cap=cap)) == expected


def test_the_decision_names_the_waiting_tenant_and_the_share() -> None:
    """Each retirement says whose machine gives its slot to whom, for the log line and the mark."""
    decision = decide([a("a1"), a("a2")], queued={"a": 500, "b": 1}, held_back={"b": 1})
    [given] = decision.mark
    assert (given.tenant_id, given.to_tenant, given.now, decision.share) == ("a", "b", False, 1)


def test_a_machine_already_marked_is_chosen_again_so_two_passes_mark_one() -> None:
    """A second pass (another process, after the first committed) sees the mark and writes nothing new."""
    first = decide([a("a1"), a("a2")], queued={"a": 500, "b": 1}, held_back={"b": 1})
    [given] = first.mark
    marked = [a(given.machine_id, yield_to="b"), *(a(m) for m in ("a1", "a2") if m != given.machine_id)]
    assert ids(decide(marked, queued={"a": 500, "b": 1}, held_back={"b": 1})) == {**NOTHING, "keep": ("a1",)}


def test_a_stopping_machine_is_a_slot_on_its_way() -> None:
    """Once the marked machine's job ended it is stopping: the slot is coming, nothing else retires."""
    machines = [a("a1", S.STOPPING, yield_to="b"), a("a2")]
    assert ids(decide(machines, queued={"a": 498, "b": 1}, held_back={"b": 1})) == NOTHING


@pytest.mark.parametrize(
    ("held_back", "cap"),
    [
        pytest.param({}, 2, id="the-waiting-job-was-cancelled"),
        pytest.param({"b": 0}, 2, id="nothing-held-back-any-more"),
        pytest.param({"b": 1}, None, id="the-fleet-cap-was-lifted"),
    ],
)
def test_a_mark_no_longer_needed_is_cleared(held_back: dict[str, int], cap: int | None) -> None:
    """A tenant whose demand disappeared leaves no mark behind: the machine goes on with its backlog."""
    machines = [a("a1", yield_to="b"), a("a2")]
    assert ids(decide(machines, queued={"a": 498}, held_back=held_back, cap=cap)) == {**NOTHING, "clear": ("a1",)}


def test_a_marked_machine_that_went_idle_is_retired_now() -> None:
    """Its job was cancelled before it was sent: still needed, it retires at once rather than waiting."""
    machines = [a("a1", S.WARM, yield_to="b"), a("a2")]
    assert ids(decide(machines, queued={"a": 498, "b": 1}, held_back={"b": 1})) == {**NOTHING, "now": ("a1",)}


def demand(tenant: str, queued: int, seq: int) -> Demand:
    return Demand(
        tenant_id=tenant, machine_type="cpu", queued=queued, head=QueuedJob(id=tenant, priority=0, sequence=seq)
    )


@pytest.mark.parametrize(
    ("machines", "starts"),
    [
        pytest.param([a("a1"), a("a2", S.STOPPING, yield_to="b")], [], id="the-fleet-is-full-until-the-stop-lands"),
        pytest.param([a("a1")], ["b"], id="the-freed-slot-goes-to-the-tenant-below-its-share"),
        pytest.param([], ["b", "a"], id="two-free-slots-split-by-share-not-by-queue-order"),
    ],
)
def test_at_the_fleet_cap_a_tenant_below_its_share_is_served_first(machines: list[Machine], starts: list[str]) -> None:
    """Placement gives the slot a retirement freed to the waiting tenant, not back to the backlog ahead of it."""
    plan = plan_placement(
        demand=[demand("a", 498, 1), demand("b", 1, 900)],
        machines=machines,
        catalogue=catalogue(cpu()),
        max_workers_total=2,
    )
    assert sorted(s.tenant_id for s in plan.starts) == sorted(starts)
    assert all(d.reason is DeferReason.FLEET_CAP for d in plan.deferred)
