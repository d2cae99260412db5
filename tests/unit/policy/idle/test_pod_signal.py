"""Per-pod signal and the aggregate over every pod on the volume (pod-control seed: Fail closed on cost, #1998)."""

from __future__ import annotations

import pytest

from thermostat.policy.common.pod_model import Lookup, PodObservation, PodStatus, VolumeLookup
from thermostat.policy.idle.activity import ActivityReason
from thermostat.policy.idle.pod_signal import (
    AggregateSignal,
    PodReading,
    PodSignal,
    PodVerdict,
    aggregate_signal,
    classify_pod,
)
from thermostat.policy.idle.vllm_metrics import PodActivity

IDLE_SCRAPE = PodActivity(active=0, completed=10.0)


def observed(status: PodStatus, *, lookup: Lookup = Lookup.FOUND) -> PodObservation:
    return PodObservation(lookup=lookup, pod_id="p1", status=status, gpu_count=1)


def reading(observation: PodObservation | None = None, scrape: PodActivity | None = None) -> PodReading:
    return PodReading(pod_id="p1", observation=observation, scrape=scrape)


@pytest.mark.parametrize(
    ("scrape", "baseline", "signal"),
    [
        pytest.param(PodActivity(active=1, completed=10.0), 10.0, PodSignal.BUSY, id="in-flight-busy"),
        pytest.param(PodActivity(active=0, completed=11.0), 10.0, PodSignal.BUSY, id="advanced-busy"),
        pytest.param(IDLE_SCRAPE, 10.0, PodSignal.IDLE, id="steady-idle"),
        pytest.param(IDLE_SCRAPE, None, PodSignal.BUSY, id="first-scrape-busy"),
        pytest.param(PodActivity(active=0), None, PodSignal.IDLE, id="gauge-only-idle"),
    ],
)
def test_a_pod_whose_metrics_answer_is_busy_or_idle(
    scrape: PodActivity, baseline: float | None, signal: PodSignal
) -> None:
    """/metrics wins over the control plane whenever vLLM answered."""
    verdict = classify_pod(reading(observed(PodStatus.EXITED), scrape), baseline)
    assert verdict.signal is signal
    assert verdict.answered


@pytest.mark.parametrize(
    ("observation", "signal"),
    [
        pytest.param(observed(PodStatus.RUNNING), PodSignal.UNREACHABLE_BUT_RUNNING, id="running"),
        pytest.param(observed(PodStatus.PROVISIONING), PodSignal.BOOTING, id="provisioning"),
        pytest.param(observed(PodStatus.STARTING), PodSignal.BOOTING, id="starting"),
        pytest.param(observed(PodStatus.EXITED), PodSignal.NOT_RUNNING, id="exited"),
        pytest.param(observed(PodStatus.ERROR), PodSignal.NOT_RUNNING, id="error"),
        pytest.param(observed(PodStatus.TERMINATED), PodSignal.NOT_RUNNING, id="terminated"),
        pytest.param(observed(PodStatus.UNKNOWN), PodSignal.UNKNOWN, id="unknown-status"),
        pytest.param(observed(PodStatus.UNKNOWN, lookup=Lookup.UNREADABLE), PodSignal.UNKNOWN, id="unreadable"),
        pytest.param(observed(PodStatus.UNKNOWN, lookup=Lookup.NOT_FOUND), PodSignal.UNKNOWN, id="not-found"),
        pytest.param(None, PodSignal.UNKNOWN, id="not-observed"),
    ],
)
def test_unreachable_metrics_fall_back_to_the_control_plane(
    observation: PodObservation | None, signal: PodSignal
) -> None:
    """Running → UnreachableButRunning; Provisioning/Starting → Booting; Exited/Error/Terminated → NotRunning."""
    assert classify_pod(reading(observation, None), 10.0).signal is signal


def test_a_scrape_without_any_vllm_family_is_treated_as_unreachable() -> None:
    """A proxy page answered with 200 is not vLLM answering: the control plane decides."""
    verdict = classify_pod(reading(observed(PodStatus.RUNNING), PodActivity()), 10.0)
    assert verdict.signal is PodSignal.UNREACHABLE_BUT_RUNNING
    assert not verdict.answered


@pytest.mark.parametrize(
    ("observation", "baseline", "ended"),
    [
        pytest.param(observed(PodStatus.RUNNING), 10.0, False, id="running-blip-keeps"),
        pytest.param(observed(PodStatus.UNKNOWN, lookup=Lookup.UNREADABLE), 10.0, False, id="unknown-keeps"),
        pytest.param(None, 10.0, False, id="unobserved-keeps"),
        pytest.param(observed(PodStatus.STARTING), None, True, id="startup-drops"),
        pytest.param(observed(PodStatus.PROVISIONING), None, True, id="provisioning-drops"),
        pytest.param(observed(PodStatus.EXITED), None, True, id="down-drops"),
    ],
)
def test_the_baseline_survives_a_blip_and_dies_with_the_process(
    observation: PodObservation | None, baseline: float | None, ended: bool
) -> None:
    """Kept across an unreachable tick; dropped on a confirmed down/startup observation (pod-control seed:
    Baseline lifetime)."""
    verdict = classify_pod(reading(observation, None), 10.0)
    assert (verdict.baseline, verdict.process_ended) == (baseline, ended)


def test_a_scrape_carries_its_activity_reason_and_new_baseline() -> None:
    """The verdict names the activity rule and the counter the next tick compares with."""
    verdict = classify_pod(reading(None, PodActivity(active=0, completed=12.0)), 10.0)
    assert verdict == PodVerdict(
        pod_id="p1", signal=PodSignal.BUSY, reason=ActivityReason.COUNTER_ADVANCED, baseline=12.0, answered=True
    )


def verdicts(*signals: PodSignal) -> tuple[PodVerdict, ...]:
    return tuple(PodVerdict(pod_id=f"p{i}", signal=signal) for i, signal in enumerate(signals, start=1))


def volume(*pod_ids: str) -> VolumeLookup:
    return VolumeLookup(lookup=Lookup.FOUND, pod_ids=pod_ids)


S = PodSignal


@pytest.mark.parametrize(
    ("signals", "expected"),
    [
        pytest.param((S.IDLE, S.BUSY), AggregateSignal(signal=S.BUSY, pod_id="p2"), id="busy-beats-idle"),
        pytest.param(
            (S.UNREACHABLE_BUT_RUNNING, S.BUSY), AggregateSignal(signal=S.BUSY, pod_id="p2"), id="busy-beats-dead"
        ),
        pytest.param((S.BOOTING, S.IDLE), AggregateSignal(signal=S.IDLE, pod_id="p2"), id="idle-beats-booting"),
        pytest.param(
            (S.BOOTING, S.UNREACHABLE_BUT_RUNNING),
            AggregateSignal(signal=S.UNREACHABLE_BUT_RUNNING, pod_id="p2"),
            id="unreachable-running-beats-booting",
        ),
        pytest.param(
            (S.IDLE, S.UNREACHABLE_BUT_RUNNING), AggregateSignal(signal=S.IDLE, pod_id="p1"), id="tie-first-idle"
        ),
        pytest.param(
            (S.UNREACHABLE_BUT_RUNNING, S.IDLE),
            AggregateSignal(signal=S.UNREACHABLE_BUT_RUNNING, pod_id="p1"),
            id="tie-first-unreachable",
        ),
        pytest.param((S.UNKNOWN, S.BOOTING), AggregateSignal(signal=S.BOOTING, pod_id="p2"), id="booting-beats-unk"),
        pytest.param(
            (S.NOT_RUNNING, S.UNKNOWN), AggregateSignal(signal=S.UNKNOWN, pod_id="p2"), id="unknown-beats-not-running"
        ),
        pytest.param(
            (S.NOT_RUNNING, S.NOT_RUNNING), AggregateSignal(signal=S.NOT_RUNNING, pod_id="p1"), id="all-not-running"
        ),
        pytest.param((S.NOT_RUNNING, S.IDLE), AggregateSignal(signal=S.IDLE, pod_id="p2"), id="stale-pod-listed-first"),
    ],
)
def test_the_aggregate_is_the_highest_priority_signal_named_by_its_first_pod(
    signals: tuple[PodSignal, ...], expected: AggregateSignal
) -> None:
    """Busy > Idle/UnreachableButRunning > Booting > Unknown > NotRunning, ties to the first pod listed."""
    pods = verdicts(*signals)
    assert aggregate_signal(volume(*(v.pod_id for v in pods)), pods) == expected


def test_a_volume_with_no_pod_attached_is_not_running() -> None:
    """NotFound is the only affirmative absence."""
    nothing = VolumeLookup(lookup=Lookup.NOT_FOUND)
    assert aggregate_signal(nothing, ()) == AggregateSignal(signal=S.NOT_RUNNING, pod_id=None)


def test_an_unreadable_volume_lookup_is_unknown_never_nothing_to_stop() -> None:
    """A failed list is a blip, not a verdict (#1998)."""
    unreadable = VolumeLookup(lookup=Lookup.UNREADABLE)
    assert aggregate_signal(unreadable, ()) == AggregateSignal(signal=S.UNKNOWN, pod_id=None)
