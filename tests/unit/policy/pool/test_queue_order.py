"""Queue order: priority descending, then first in, first out."""

from __future__ import annotations

import pytest

from thermostat.policy.pool.queue_order import QueuedJob, in_queue_order


@pytest.mark.parametrize(
    ("jobs", "order"),
    [
        pytest.param([("a", 0, 1), ("b", 5, 2)], ["b", "a"], id="higher-priority-first"),
        pytest.param([("a", 0, 2), ("b", 0, 1)], ["b", "a"], id="fifo-within-a-priority"),
        pytest.param([("a", -1, 1), ("b", 0, 2)], ["b", "a"], id="negative-priority-after-default"),
        pytest.param([("b", 0, 1), ("a", 0, 1)], ["a", "b"], id="id-breaks-a-tie"),
        pytest.param([("a", 0, 1), ("b", 2**63 - 1, 9), ("c", 1, 3), ("d", 1, 2)], ["b", "d", "c", "a"], id="mixed"),
    ],
)
def test_queue_order_is_priority_desc_then_fifo(jobs: list[tuple[str, int, int]], order: list[str]) -> None:
    """Jobs leave the queue by priority, highest first, then in the order they were queued."""
    queued = [QueuedJob(id=i, priority=p, sequence=s) for i, p, s in jobs]
    assert [job.id for job in in_queue_order(queued)] == order
