"""Wake decision: what one observed pod asks the wake to do next (pod-control seed: Wake part 1c)."""

from __future__ import annotations

import pytest

from thermostat.policy.common.pod_model import Lookup, PodObservation, PodStatus
from thermostat.policy.wake.wake_decision import WakeAction, decide


def found(status: PodStatus, *, gpus: int = 1, started: bool = False) -> PodObservation:
    return PodObservation(lookup=Lookup.FOUND, pod_id="p1", status=status, gpu_count=gpus, start_attempted=started)


def test_an_unreadable_observation_waits_and_repolls() -> None:
    """A failed GET is never "no pod": creating on it would bill a second pod next to a live one (#1998)."""
    assert decide(PodObservation(lookup=Lookup.UNREADABLE, pod_id="p1")) is WakeAction.WAIT_AND_REPOLL


def test_an_affirmative_not_found_creates_a_replacement() -> None:
    """Only a positive NotFound says the pod is gone (the round still re-confirms it on the volume)."""
    assert decide(PodObservation(lookup=Lookup.NOT_FOUND, pod_id="p1")) is WakeAction.CREATE_REPLACEMENT


@pytest.mark.parametrize(
    ("observation", "action"),
    [
        pytest.param(found(PodStatus.RUNNING, gpus=1), WakeAction.DONE, id="running-with-gpu-done"),
        pytest.param(found(PodStatus.RUNNING, gpus=2), WakeAction.DONE, id="running-with-gpus-done"),
        pytest.param(found(PodStatus.EXITED), WakeAction.START_EXISTING, id="exited-before-start-starts"),
        pytest.param(found(PodStatus.ERROR), WakeAction.START_EXISTING, id="error-before-start-starts"),
        pytest.param(
            found(PodStatus.EXITED, started=True), WakeAction.CREATE_REPLACEMENT, id="exited-after-start-replaces"
        ),
        pytest.param(
            found(PodStatus.ERROR, started=True), WakeAction.CREATE_REPLACEMENT, id="error-after-start-replaces"
        ),
        pytest.param(
            found(PodStatus.RUNNING, gpus=0), WakeAction.CREATE_REPLACEMENT, id="running-without-gpu-replaces"
        ),
        pytest.param(found(PodStatus.TERMINATED), WakeAction.CREATE_REPLACEMENT, id="terminated-replaces"),
        pytest.param(
            found(PodStatus.TERMINATED, started=True), WakeAction.CREATE_REPLACEMENT, id="terminated-after-start"
        ),
        pytest.param(found(PodStatus.PROVISIONING), WakeAction.WAIT_AND_REPOLL, id="provisioning-waits"),
        pytest.param(found(PodStatus.STARTING), WakeAction.WAIT_AND_REPOLL, id="starting-waits"),
        pytest.param(found(PodStatus.UNKNOWN), WakeAction.WAIT_AND_REPOLL, id="unknown-waits"),
        pytest.param(
            found(PodStatus.STARTING, gpus=0, started=True), WakeAction.WAIT_AND_REPOLL, id="starting-after-start"
        ),
    ],
)
def test_a_found_pod_is_decided_by_status_gpus_and_whether_we_started_it(
    observation: PodObservation, action: WakeAction
) -> None:
    """Serving → done · stopped, untried → start · start failed, no GPU, terminated → replace · in flight → wait."""
    assert decide(observation) is action
