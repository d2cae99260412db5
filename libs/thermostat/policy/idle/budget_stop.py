"""Which pods the monitor stops because the pod's budget is exhausted (issue 12: within one tick).

Metering judges the budget (policy/metering/budget.py); the monitor asks it once per tick while a pod of
the volume bills, and stops every pod that bills when it says exhausted:

    exhausted   pods observed                           stop
    no / unknown  any                                   none (an unreadable budget stops nothing: the wake
                                                        path is where an unknown budget refuses)
    yes         PROVISIONING / STARTING / RUNNING       each of them, trigger budget
    yes         none billing                            none
"""

from __future__ import annotations

from collections.abc import Sequence

from thermostat.policy.common.pod_model import PodObservation, PodStatus

BILLING = frozenset({PodStatus.PROVISIONING, PodStatus.STARTING, PodStatus.RUNNING})


def billing_pods(observations: Sequence[PodObservation]) -> tuple[str, ...]:
    """The pods of the volume that bill now (the budget is worth asking about only while one does)."""
    return tuple(o.pod_id for o in observations if o.status in BILLING)


def budget_stop_targets(observations: Sequence[PodObservation], exhausted: bool | None) -> tuple[str, ...]:
    """The pods to stop for the budget (the table above)."""
    return billing_pods(observations) if exhausted else ()
