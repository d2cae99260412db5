"""The stall guard's table, one named row per rule (policy/idle/stall_guard.py)."""

from __future__ import annotations

import pytest

from thermostat.policy.idle.stall_guard import StallReason, StallStep, advance_stall
from thermostat.policy.idle.vllm_metrics import PodActivity, parse_vllm_metrics

R = StallReason
ON = 30


def activity(active: int | None, completed: float | None) -> PodActivity:
    return PodActivity(active=active, completed=completed)


@pytest.mark.parametrize(
    ("ticks", "scrape", "baseline", "threshold", "expected"),
    [
        pytest.param(7, activity(1, 5.0), 5.0, 0, StallStep(ticks=0, reason=R.OFF), id="guard-off-counts-nothing"),
        pytest.param(7, None, 5.0, ON, StallStep(ticks=7, reason=R.NO_ANSWER), id="no-answer-keeps-the-count"),
        pytest.param(
            7, activity(None, None), 5.0, ON, StallStep(ticks=7, reason=R.NO_ANSWER), id="not-vllm-keeps-the-count"
        ),
        pytest.param(7, activity(0, 5.0), 5.0, ON, StallStep(ticks=0, reason=R.NOT_IN_FLIGHT), id="gauges-zero-reset"),
        pytest.param(
            7, activity(1, None), None, ON, StallStep(ticks=0, reason=R.NO_COUNTER), id="no-counter-family-keeps-seed"
        ),
        pytest.param(7, activity(1, 5.0), None, ON, StallStep(ticks=0, reason=R.NO_BASELINE), id="no-baseline-reset"),
        pytest.param(
            7, activity(1, 6.0), 5.0, ON, StallStep(ticks=0, reason=R.COUNTER_ADVANCED), id="counter-advance-resets"
        ),
        pytest.param(
            7,
            activity(1, 2.0),
            5.0,
            ON,
            StallStep(ticks=0, reason=R.COUNTER_WENT_BACKWARDS),
            id="counter-backwards-restart-resets",
        ),
        pytest.param(
            7,
            activity(2, 5.0),
            5.0,
            ON,
            StallStep(ticks=8, reason=R.COUNTER_UNCHANGED),
            id="unchanged-counter-adds-one",
        ),
    ],
)
def test_each_row_of_the_stall_table(
    ticks: int, scrape: PodActivity | None, baseline: float | None, threshold: int, expected: StallStep
) -> None:
    assert advance_stall(ticks, scrape, baseline, threshold=threshold) == expected


@pytest.mark.parametrize(
    ("ticks", "threshold", "stalled"),
    [
        pytest.param(29, 30, False, id="one-short"),
        pytest.param(30, 30, True, id="at-the-threshold"),
        pytest.param(31, 30, True, id="past-the-threshold"),
        pytest.param(99, 0, False, id="guard-off-never-stalled"),
    ],
)
def test_stalled_once_the_count_reaches_the_threshold(ticks: int, threshold: int, stalled: bool) -> None:
    assert StallStep(ticks=ticks, reason=R.COUNTER_UNCHANGED).stalled(threshold) is stalled


def test_the_exposition_of_an_aborted_stream_counts_as_a_stall() -> None:
    """vllm#29928's scrape: Running 1 while generation_tokens stands still, read through the real parser."""
    text = (
        'vllm:num_requests_running{model_name="qwen"} 1.0\n'
        'vllm:num_requests_waiting{model_name="qwen"} 0.0\n'
        'vllm:generation_tokens_total{model_name="qwen"} 18422.0\n'
    )
    scrape = parse_vllm_metrics(text)
    assert (scrape.running, scrape.waiting) == (1, 0)
    assert advance_stall(3, scrape, 18422.0, threshold=ON) == StallStep(ticks=4, reason=R.COUNTER_UNCHANGED)
