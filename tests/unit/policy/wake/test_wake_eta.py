"""Wake ETA: the median of recent measured wake → ready durations, never a hardcoded constant (#2093)."""

from __future__ import annotations

import pytest

from thermostat.policy.wake.wake_eta import BootRecord, estimate_eta, select_boot_durations


def test_no_history_has_no_eta() -> None:
    """Without a measured boot there is nothing honest to promise (READY_BY_MIN = 9 was a stale constant)."""
    assert estimate_eta((), 0.0) is None


@pytest.mark.parametrize(
    ("durations", "elapsed", "eta"),
    [
        pytest.param((540.0,), 0.0, 540.0, id="one-boot"),
        pytest.param((172.0, 540.0, 200.0), 0.0, 200.0, id="odd-count-median"),
        pytest.param((172.0, 540.0), 0.0, 356.0, id="even-count-averages-the-middle"),
        pytest.param((300.0, 300.0, 300.0), 120.0, 180.0, id="elapsed-is-subtracted"),
        pytest.param((300.0,), 400.0, 0.0, id="overdue-floors-at-zero"),
    ],
)
def test_the_eta_is_the_median_boot_minus_the_time_already_waited(
    durations: tuple[float, ...], elapsed: float, eta: float
) -> None:
    """median(recent boots) − elapsed, floored at 0."""
    assert estimate_eta(durations, elapsed) == eta


def test_only_the_most_recent_boots_count() -> None:
    """Old boots age out: the last five decide (the GPU fleet changes)."""
    old_slow = (900.0,) * 10
    recent_fast = (170.0, 175.0, 180.0, 185.0, 190.0)
    assert estimate_eta(old_slow + recent_fast, 0.0) == 180.0


@pytest.mark.parametrize(
    "bad",
    [pytest.param(-5.0, id="negative"), pytest.param(float("nan"), id="nan"), pytest.param(float("inf"), id="inf")],
)
def test_unusable_durations_are_ignored(bad: float) -> None:
    """A clock-skewed or corrupt record does not move the estimate."""
    assert estimate_eta((bad, 200.0), 0.0) == 200.0
    assert estimate_eta((bad,), 0.0) is None


def test_boots_on_the_allocated_gpu_type_decide_once_it_is_known() -> None:
    """Nine minutes on one GPU, three on an A100 (2026-09-09 vs 2026-09-12): the GPU type matters."""
    records = (
        BootRecord(gpu_id="NVIDIA RTX 4090", wake_to_ready_seconds=540.0),
        BootRecord(gpu_id="NVIDIA A100 80GB PCIe", wake_to_ready_seconds=172.0),
        BootRecord(gpu_id="NVIDIA RTX 4090", wake_to_ready_seconds=560.0),
    )
    assert select_boot_durations(records, "NVIDIA RTX 4090") == (540.0, 560.0)
    assert select_boot_durations(records, "NVIDIA A100 80GB PCIe") == (172.0,)


def test_an_unknown_gpu_type_uses_every_boot_of_the_pod() -> None:
    """Before the wake has placed a GPU, the pod's whole history is the best estimate."""
    records = (
        BootRecord(gpu_id="a", wake_to_ready_seconds=100.0),
        BootRecord(gpu_id=None, wake_to_ready_seconds=300.0),
    )
    assert select_boot_durations(records, None) == (100.0, 300.0)


def test_a_gpu_type_never_measured_has_no_history() -> None:
    """Another GPU's boots would promise the wrong time, so a new type starts with no ETA."""
    records = (BootRecord(gpu_id="a", wake_to_ready_seconds=100.0),)
    assert estimate_eta(select_boot_durations(records, "b"), 0.0) is None
