"""Adoption: a pod RunPod bills after an abandoned wake is put on record as the call that must have started it."""

from __future__ import annotations

from thermostat.policy.wake.adoption import Adopted, unrecorded_call


def test_a_pod_never_on_record_was_created_by_the_abandoned_wake() -> None:
    assert unrecorded_call(None) is Adopted.CREATE


def test_a_pod_the_record_says_stopped_was_started_by_the_abandoned_wake() -> None:
    assert unrecorded_call("Stop") is Adopted.START


def test_a_pod_the_record_says_terminated_and_yet_billing_was_started_again() -> None:
    assert unrecorded_call("Terminate") is Adopted.START


def test_a_pod_the_record_already_says_bills_needs_nothing() -> None:
    assert unrecorded_call("Create") is None
    assert unrecorded_call("Start") is None


def test_a_pod_the_record_says_gone_and_yet_billing_was_started_again() -> None:
    """A Gone record closed its billing: a pod running after it was started by the abandoned wake."""
    assert unrecorded_call("Gone") is Adopted.START
