"""The monitor's budget stop: which pods it stops when metering says the budget is exhausted."""

from __future__ import annotations

from thermostat.policy.common.pod_model import Lookup, PodObservation, PodStatus
from thermostat.policy.idle.budget_stop import budget_stop_targets


def pod(pod_id: str, status: PodStatus) -> PodObservation:
    return PodObservation(lookup=Lookup.FOUND, pod_id=pod_id, status=status, gpu_count=1)


def test_an_exhausted_budget_stops_every_billing_pod() -> None:
    pods = [pod("a", PodStatus.RUNNING), pod("b", PodStatus.STARTING), pod("c", PodStatus.PROVISIONING)]
    assert budget_stop_targets(pods, True) == ("a", "b", "c")


def test_pods_that_do_not_bill_are_not_stopped() -> None:
    assert budget_stop_targets([pod("a", PodStatus.EXITED), pod("b", PodStatus.RUNNING)], True) == ("b",)


def test_a_budget_not_exhausted_stops_nothing() -> None:
    assert budget_stop_targets([pod("a", PodStatus.RUNNING)], False) == ()


def test_an_unreadable_budget_stops_nothing() -> None:
    assert budget_stop_targets([pod("a", PodStatus.RUNNING)], None) == ()
