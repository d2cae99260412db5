"""Warm-machine choice: the tenant's own warm machine on the current image, session affinity first."""

from __future__ import annotations

import pytest

from tests.unit.policy.pool.conftest import catalogue, cpu, machine
from thermostat.policy.pool.machines import Machine, MachineState
from thermostat.policy.pool.warm_choice import choose_warm_machine

S = MachineState


def choose(machines: list[Machine], session_id: str | None = None) -> str | None:
    chosen = choose_warm_machine(
        machines=machines, tenant_id="acme", machine_type="cpu", session_id=session_id, catalogue=catalogue(cpu())
    )
    return None if chosen is None else chosen.id


@pytest.mark.parametrize(
    ("machines", "session", "chosen"),
    [
        pytest.param([], None, None, id="no-machine"),
        pytest.param([machine("m", S.WARM)], None, "m", id="warm-machine-chosen"),
        pytest.param([machine("m", S.BUSY)], None, None, id="busy-machine-never-chosen"),
        pytest.param([machine("m", S.STARTING)], None, None, id="starting-machine-not-trusted-yet"),
        pytest.param([machine("m", S.STOPPING)], None, None, id="stopping-machine-never-chosen"),
        pytest.param([machine("m", S.WARM, tenant_id="other")], None, None, id="another-tenants-machine-never-chosen"),
        pytest.param([machine("m", S.WARM, machine_type="gpu")], None, None, id="another-types-machine-never-chosen"),
        pytest.param([machine("m", S.WARM, image="worker:v0")], None, None, id="stale-image-machine-never-chosen"),
        pytest.param(
            [machine("a", S.WARM, idle_since=10), machine("b", S.WARM, idle_since=20, last_session_id="s1")],
            "s1",
            "b",
            id="session-affinity-first",
        ),
        pytest.param(
            [machine("a", S.WARM, idle_since=20), machine("b", S.WARM, idle_since=10, last_session_id="s1")],
            "s1",
            "b",
            id="affinity-beats-recency",
        ),
        pytest.param(
            [machine("a", S.WARM, idle_since=10), machine("b", S.WARM, idle_since=20)],
            None,
            "b",
            id="most-recently-active-next",
        ),
        pytest.param(
            [machine("a", S.WARM, idle_since=10), machine("b", S.WARM, idle_since=20, last_session_id="s2")],
            "s1",
            "b",
            id="no-affine-machine-falls-back-to-recency",
        ),
        pytest.param(
            [machine("b", S.BUSY, last_session_id="s1"), machine("a", S.WARM)],
            "s1",
            "a",
            id="busy-affine-machine-not-waited-for",
        ),
        pytest.param([machine("b", S.WARM), machine("a", S.WARM)], None, "a", id="id-breaks-a-tie"),
    ],
)
def test_warm_machine_choice(machines: list[Machine], session: str | None, chosen: str | None) -> None:
    """A job goes to its tenant's warm machine of its type on the current image, affinity then recency."""
    assert choose(machines, session) == chosen
