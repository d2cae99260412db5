"""Hints: start one machine for the tenant unless one is warm or starting, within both caps."""

from __future__ import annotations

import pytest

from tests.unit.policy.pool.conftest import catalogue, cpu, machine
from thermostat.policy.pool.hint import HintDecision, HintReason, decide_hint
from thermostat.policy.pool.machines import Machine, MachineState
from thermostat.policy.pool.submit_options import SubmitError, SubmitErrorKind

S = MachineState


@pytest.mark.parametrize(
    ("machines", "max_workers", "total", "started", "reason"),
    [
        pytest.param([], None, None, True, None, id="nothing-running-starts-one"),
        pytest.param([machine("m", S.WARM)], None, None, False, HintReason.NO_DEMAND, id="warm-machine-no-demand"),
        pytest.param(
            [machine("m", S.STARTING)], None, None, False, HintReason.NO_DEMAND, id="starting-machine-no-demand"
        ),
        pytest.param([machine("m", S.BUSY)], None, None, True, None, id="busy-machine-is-not-warm"),
        pytest.param([machine("m", S.WARM, tenant_id="b")], None, None, True, None, id="other-tenants-machine"),
        pytest.param([machine("m", S.WARM, image="worker:v0")], None, None, True, None, id="stale-machine-is-not-warm"),
        pytest.param([machine("m", S.BUSY)], 1, None, False, HintReason.TENANT_CAP, id="tenant-cap"),
        pytest.param([machine("m", S.BUSY, tenant_id="b")], None, 1, False, HintReason.FLEET_CAP, id="fleet-cap"),
        pytest.param(
            [machine("m", S.STOPPING, tenant_id="b")],
            None,
            1,
            False,
            HintReason.FLEET_CAP,
            id="fleet-cap-counts-stopping",
        ),
    ],
)
def test_hint_decision(
    machines: list[Machine], max_workers: int | None, total: int | None, started: bool, reason: HintReason | None
) -> None:
    """A hint starts a machine unless one is warm or starting; caps answer tenant_cap or fleet_cap."""
    machine_type = cpu(max_workers=max_workers)
    decision = decide_hint(
        tenant_id="acme",
        machine_type="cpu",
        machines=machines,
        catalogue=catalogue(machine_type),
        max_workers_total=total,
    )
    assert isinstance(decision, HintDecision)
    assert (decision.started, decision.reason) == (started, reason)
    assert len(decision.plan.starts) == (1 if started else 0)


def test_repeated_hint_is_free() -> None:
    """Once the hinted machine is starting, the same hint starts nothing more."""
    machine_type = cpu()
    first = decide_hint(
        tenant_id="acme", machine_type="cpu", machines=[], catalogue=catalogue(machine_type), max_workers_total=None
    )
    assert isinstance(first, HintDecision)
    assert first.started
    again = decide_hint(
        tenant_id="acme",
        machine_type="cpu",
        machines=[machine("m", S.STARTING)],
        catalogue=catalogue(machine_type),
        max_workers_total=None,
    )
    assert isinstance(again, HintDecision)
    assert (again.started, again.reason) == (False, HintReason.NO_DEMAND)


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        pytest.param("", SubmitErrorKind.MISSING, id="machine-type-missing"),
        pytest.param("gpu", SubmitErrorKind.UNKNOWN_MACHINE_TYPE, id="machine-type-not-in-catalogue"),
    ],
)
def test_hint_machine_type_is_checked_like_a_submits(name: str, kind: SubmitErrorKind) -> None:
    """A hint names a machine type of the catalogue, or it is refused naming machine_type."""
    result = decide_hint(
        tenant_id="acme", machine_type=name, machines=[], catalogue=catalogue(cpu()), max_workers_total=None
    )
    assert isinstance(result, SubmitError)
    assert (result.kind, result.parameter) == (kind, "machine_type")
