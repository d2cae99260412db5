"""Placement: start machines for unserved demand within the tenant cap and the fleet cap."""

from __future__ import annotations

import pytest

from tests.unit.policy.pool.conftest import catalogue, cpu, machine
from thermostat.policy.pool.machines import Machine, MachineState
from thermostat.policy.pool.placement import DeferReason, Demand, PlacementPlan, placement_may_act, plan_placement
from thermostat.policy.pool.queue_order import QueuedJob

S = MachineState


def demand(queued: int, *, tenant: str = "acme", machine_type: str = "cpu", priority: int = 0, seq: int = 1) -> Demand:
    head = QueuedJob(id=f"{tenant}-{seq}", priority=priority, sequence=seq)
    return Demand(tenant_id=tenant, machine_type=machine_type, queued=queued, head=head)


def plan(
    wanted: list[Demand],
    machines: list[Machine],
    *,
    max_workers: int | None = None,
    total: int | None = None,
    image: str = "worker:v1",
) -> PlacementPlan:
    return plan_placement(
        demand=wanted,
        machines=machines,
        catalogue=catalogue(cpu(max_workers=max_workers, image=image)),
        max_workers_total=total,
    )


@pytest.mark.parametrize(
    ("queued", "machines", "starts"),
    [
        pytest.param(1, [], 1, id="no-machine-starts-one"),
        pytest.param(3, [], 3, id="one-machine-per-queued-job"),
        pytest.param(1, [machine("m1", S.WARM)], 0, id="warm-machine-takes-it"),
        pytest.param(1, [machine("m1", S.STARTING)], 0, id="starting-machine-will-take-it"),
        pytest.param(2, [machine("m1", S.STARTING)], 1, id="starting-machine-covers-one"),
        pytest.param(1, [machine("m1", S.BUSY)], 1, id="busy-machine-does-not-absorb-demand"),
        pytest.param(1, [machine("m1", S.STOPPING)], 1, id="stopping-machine-does-not-absorb-demand"),
        pytest.param(1, [machine("m1", S.WARM, tenant_id="other")], 1, id="other-tenants-warm-machine-is-not-ours"),
        pytest.param(1, [machine("m1", S.WARM, image="worker:v0")], 1, id="stale-image-machine-takes-no-new-work"),
        pytest.param(0, [], 0, id="no-demand-no-start"),
    ],
)
def test_demand_not_covered_by_warm_or_starting_machines_starts_machines(
    queued: int, machines: list[Machine], starts: int
) -> None:
    """Each queued job not covered by a warm or starting machine of the tenant's type starts one."""
    result = plan([demand(queued)], machines)
    assert len(result.starts) == starts
    assert all((s.tenant_id, s.machine_type, s.image) == ("acme", "cpu", "worker:v1") for s in result.starts)
    assert result.deferred == ()


@pytest.mark.parametrize(
    ("queued", "machines", "starts", "deferred"),
    [
        pytest.param(5, [], 2, 3, id="cap-limits-new-machines"),
        pytest.param(2, [machine("m1", S.BUSY)], 1, 1, id="busy-machines-count"),
        pytest.param(1, [machine("m1", S.BUSY), machine("m2", S.BUSY)], 0, 1, id="at-cap-nothing-starts"),
        pytest.param(
            1, [machine("m1", S.STOPPING), machine("m2", S.STOPPING)], 1, 0, id="stopping-machines-do-not-count"
        ),
        pytest.param(
            1,
            [machine("m1", S.BUSY, tenant_id="b"), machine("m2", S.BUSY, tenant_id="b")],
            1,
            0,
            id="cap-is-per-tenant",
        ),
    ],
)
def test_tenant_cap_limits_a_tenants_machines_of_a_type(
    queued: int, machines: list[Machine], starts: int, deferred: int
) -> None:
    """max_workers caps one tenant's starting, warm and busy machines of the type; the rest waits."""
    result = plan([demand(queued)], machines, max_workers=2)
    assert len(result.starts) == starts
    assert sum(d.count for d in result.deferred if d.reason is DeferReason.TENANT_CAP) == deferred
    assert not result.fleet_cap_hit


@pytest.mark.parametrize(
    ("machines", "starts"),
    [
        pytest.param([], 3, id="room-for-three"),
        pytest.param([machine("x", S.BUSY, tenant_id="b")], 2, id="other-tenants-count"),
        pytest.param([machine("x", S.STOPPING, tenant_id="b")], 2, id="stopping-machines-count"),
        pytest.param([machine("x", S.STOPPED, tenant_id="b")], 3, id="stopped-machines-do-not-count"),
        pytest.param([machine(f"x{i}", S.WARM, tenant_id="b") for i in range(3)], 0, id="full-fleet-starts-nothing"),
    ],
)
def test_fleet_cap_counts_every_machine_at_a_provider_stopping_included(machines: list[Machine], starts: int) -> None:
    """POOL_MAX_WORKERS_TOTAL caps the whole fleet; a stopping machine still bills, so it counts."""
    result = plan([demand(5)], machines, total=3)
    assert len(result.starts) == starts
    assert result.fleet_cap_hit
    assert sum(d.count for d in result.deferred) == 5 - starts


def test_fleet_cap_serves_demand_in_queue_order() -> None:
    """When the fleet cap binds, the group whose first job is first in line gets the slot."""
    wanted = [
        demand(1, tenant="late", seq=9),
        demand(1, tenant="urgent", priority=5, seq=10),
        demand(1, tenant="early", seq=2),
    ]
    result = plan(wanted, [], total=2)
    assert [s.tenant_id for s in result.starts] == ["urgent", "early"]
    assert [(d.tenant_id, d.reason) for d in result.deferred] == [("late", DeferReason.FLEET_CAP)]


def test_fleet_cap_not_hit_without_a_ceiling() -> None:
    """Unset POOL_MAX_WORKERS_TOTAL means no ceiling and no warning."""
    result = plan([demand(50)], [machine(f"m{i}", S.BUSY) for i in range(100)])
    assert len(result.starts) == 50
    assert not result.fleet_cap_hit


def test_removed_type_gets_no_machine() -> None:
    """Demand for a type no longer in the catalogue starts nothing (its jobs fail with the reason)."""
    result = plan([demand(2, machine_type="gone")], [])
    assert result == PlacementPlan()


def test_idle_stale_machine_is_retired_to_make_room_under_the_tenant_cap() -> None:
    """An image change under max_workers 1: the idle old-image machine is retired now and a new one starts."""
    result = plan([demand(1)], [machine("old", S.WARM, image="worker:v0")], max_workers=1)
    assert result.retire == ("old",)
    assert [s.image for s in result.starts] == ["worker:v1"]
    assert result.deferred == ()


def test_busy_stale_machine_is_never_retired_for_room() -> None:
    """A stale machine running a job finishes it; the new machine waits for the tenant cap."""
    result = plan([demand(1)], [machine("old", S.BUSY, image="worker:v0")], max_workers=1)
    assert (result.retire, result.starts) == ((), ())
    assert [d.reason for d in result.deferred] == [DeferReason.TENANT_CAP]


def test_stale_machine_is_not_retired_when_there_is_room() -> None:
    """With room under the cap the old machine is left to the cool-down."""
    result = plan([demand(1)], [machine("old", S.WARM, image="worker:v0")], max_workers=2)
    assert result.retire == ()
    assert len(result.starts) == 1


def test_retired_stale_machine_still_counts_against_the_fleet_cap() -> None:
    """Retiring frees the tenant's slot at once, the fleet's only once the machine is gone."""
    result = plan([demand(1)], [machine("old", S.WARM, image="worker:v0")], max_workers=1, total=1)
    assert result.retire == ("old",)
    assert result.starts == ()
    assert result.fleet_cap_hit


@pytest.mark.parametrize(
    ("live", "idle", "max_workers", "acts"),
    [
        pytest.param(0, 0, 4, True, id="no-machine-yet-places"),
        pytest.param(3, 0, 4, True, id="room-under-the-tenant-cap-places"),
        pytest.param(4, 0, 4, False, id="every-allowed-machine-busy-or-starting-skips"),
        pytest.param(4, 1, 4, True, id="an-idle-machine-at-the-cap-places"),
        pytest.param(9, 0, None, True, id="no-tenant-cap-always-places"),
    ],
)
def test_a_queued_submit_places_only_when_placement_can_act(
    live: int, idle: int, max_workers: int | None, acts: bool
) -> None:
    assert placement_may_act(live_machines=live, idle_machines=idle, max_workers=max_workers) is acts
