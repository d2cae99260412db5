"""Termination guard: a stale pod is terminated only once its replacement serves (pod-control seed: Wake part 1c)."""

from __future__ import annotations

import pytest

from thermostat.policy.common.pod_model import PodStatus
from thermostat.policy.wake.termination_guard import TerminationRefusal, check_termination, may_terminate

OURS = "bjn7d94ej9"


def test_a_stale_pod_on_our_volume_is_terminated_once_a_different_replacement_is_running() -> None:
    """All four conditions hold: ids present and distinct, volume ours, replacement RUNNING."""
    assert may_terminate(
        stale_id="old", replacement_id="new", stale_volume=OURS, our_volume=OURS, replacement_status=PodStatus.RUNNING
    )
    assert (
        check_termination(
            stale_id="old",
            replacement_id="new",
            stale_volume=OURS,
            our_volume=OURS,
            replacement_status=PodStatus.RUNNING,
        ).refusal
        is None
    )


@pytest.mark.parametrize(
    ("stale_id", "replacement_id", "stale_volume", "our_volume", "status", "refusal"),
    [
        pytest.param("", "new", OURS, OURS, PodStatus.RUNNING, TerminationRefusal.BLANK_ID, id="blank-stale"),
        pytest.param("old", "  ", OURS, OURS, PodStatus.RUNNING, TerminationRefusal.BLANK_ID, id="blank-replacement"),
        pytest.param("same", "same", OURS, OURS, PodStatus.RUNNING, TerminationRefusal.SAME_POD, id="same-id"),
        pytest.param("Same", "same ", OURS, OURS, PodStatus.RUNNING, TerminationRefusal.SAME_POD, id="same-id-case"),
        pytest.param(
            "old", "new", "other-vol", OURS, PodStatus.RUNNING, TerminationRefusal.FOREIGN_VOLUME, id="other-volume"
        ),
        pytest.param(
            "old", "new", OURS.upper(), OURS, PodStatus.RUNNING, TerminationRefusal.FOREIGN_VOLUME, id="volume-case"
        ),
        pytest.param("old", "new", None, OURS, PodStatus.RUNNING, TerminationRefusal.FOREIGN_VOLUME, id="no-volume"),
        pytest.param("old", "new", "", "", PodStatus.RUNNING, TerminationRefusal.FOREIGN_VOLUME, id="both-blank"),
        pytest.param(
            "old", "new", OURS, OURS, PodStatus.STARTING, TerminationRefusal.REPLACEMENT_NOT_RUNNING, id="starting"
        ),
        pytest.param(
            "old", "new", OURS, OURS, PodStatus.UNKNOWN, TerminationRefusal.REPLACEMENT_NOT_RUNNING, id="unknown"
        ),
        pytest.param(
            "old", "new", OURS, OURS, PodStatus.EXITED, TerminationRefusal.REPLACEMENT_NOT_RUNNING, id="exited"
        ),
    ],
)
def test_termination_is_refused_unless_every_condition_holds(
    stale_id: str,
    replacement_id: str,
    stale_volume: str | None,
    our_volume: str,
    status: PodStatus,
    refusal: TerminationRefusal,
) -> None:
    """Never the replacement itself, never another volume's pod, never before the replacement runs."""
    decision = check_termination(
        stale_id=stale_id,
        replacement_id=replacement_id,
        stale_volume=stale_volume,
        our_volume=our_volume,
        replacement_status=status,
    )
    assert (decision.allowed, decision.refusal) == (False, refusal)
    assert not may_terminate(
        stale_id=stale_id,
        replacement_id=replacement_id,
        stale_volume=stale_volume,
        our_volume=our_volume,
        replacement_status=status,
    )
