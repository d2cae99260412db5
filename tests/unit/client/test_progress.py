"""A pod view read as a wake's phase and ETA: one named test per rule."""

from __future__ import annotations

import pytest
from google.protobuf import timestamp_pb2

from thermostat.client import Phase
from thermostat.client.progress import goes_forward, progress_of
from thermostat.pods.v1 import pods_pb2


def view(status: str, *, pod_id: str = "p-1", running: bool = True, ready: bool = False, eta: float | None = None):  # type: ignore[no-untyped-def]
    pod = pods_pb2.GetPodResponse(name="qwen", status=status, pod_id=pod_id, is_running=running)
    if ready:
        pod.ready_since.CopyFrom(timestamp_pb2.Timestamp(seconds=1_700_000_000))
    if eta is not None:
        pod.eta_seconds = eta
    return pod


def test_a_running_pod_with_ready_since_is_ready() -> None:
    step = progress_of(view("RUNNING", ready=True))
    assert (step.phase, step.eta_seconds, step.detail) == (Phase.READY, 0.0, "qwen is ready")


def test_a_running_pod_without_ready_since_is_still_loading_its_model() -> None:
    step = progress_of(view("RUNNING", eta=42.0))
    assert (step.phase, step.eta_seconds) == (Phase.LOADING, 42.0)
    assert step.detail == "qwen is loading the model; ready in about 42 s"


def test_provisioning_and_starting_are_their_own_phases() -> None:
    assert progress_of(view("PROVISIONING")).phase == Phase.PROVISIONING
    assert progress_of(view("STARTING")).phase == Phase.STARTING


def test_without_boot_history_there_is_no_eta_and_the_detail_says_so() -> None:
    step = progress_of(view("STARTING"))
    assert step.eta_seconds is None and "no estimate yet" in step.detail


def test_a_long_eta_reads_in_minutes() -> None:
    assert progress_of(view("RUNNING", eta=540.0)).detail.endswith("ready in about 9 min")


def test_an_exited_or_absent_pod_is_down() -> None:
    assert progress_of(view("EXITED", running=False)).phase == Phase.DOWN
    assert progress_of(view("TERMINATED", running=False)).phase == Phase.DOWN
    absent = progress_of(view("", pod_id="", running=False))
    assert absent.phase == Phase.DOWN and absent.detail == "qwen is not running (no pod)"


def test_a_ready_since_on_a_pod_that_no_longer_runs_is_not_ready() -> None:
    assert progress_of(view("EXITED", running=False, ready=True)).phase == Phase.DOWN


def test_the_view_travels_with_the_step() -> None:
    pod = view("RUNNING")
    assert progress_of(pod).pod is pod


@pytest.mark.parametrize(
    ("reported", "seen", "shown"),
    [
        pytest.param(Phase.WAKING, Phase.WAKING, True, id="waking-then-the-wakes-answer"),
        pytest.param(Phase.WAKING, Phase.PROVISIONING, True, id="waking-then-provisioning"),
        pytest.param(Phase.PROVISIONING, Phase.LOADING, True, id="a-phase-may-be-skipped"),
        pytest.param(Phase.LOADING, Phase.LOADING, True, id="the-same-phase-with-an-eta"),
        pytest.param(Phase.LOADING, Phase.READY, True, id="loading-then-ready"),
        pytest.param(Phase.WAKING, Phase.READY, True, id="an-already-running-pod"),
        pytest.param(Phase.LOADING, Phase.WAKING, False, id="loading-then-waking-goes-back"),
        pytest.param(Phase.STARTING, Phase.PROVISIONING, False, id="a-wake-asked-again-goes-back"),
        pytest.param(Phase.READY, Phase.LOADING, False, id="nothing-after-ready"),
        pytest.param(Phase.LOADING, Phase.DOWN, False, id="down-is-never-a-step"),
    ],
)
def test_a_phase_once_reported_is_never_followed_by_an_earlier_one(reported: Phase, seen: Phase, shown: bool) -> None:
    """Phases go waking, provisioning, starting, loading, ready: a step may repeat one or skip ahead, never go back."""
    assert goes_forward(reported, seen) is shown
