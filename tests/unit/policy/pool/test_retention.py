"""Retention: the oldest finished rows past the horizon go, in bounded batches; a pruned job's id says it expired."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from thermostat.policy.pool.retention import (
    NO_SUCH_JOB,
    BatchSize,
    Candidate,
    horizon,
    job_id_minted_at,
    mint_job_id,
    missing_job_detail,
    pause_after,
    prunable_prefix,
)

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
DAY = timedelta(hours=24)
HORIZON = horizon(now=NOW, retention=DAY)


def job(hours_ago: float) -> Candidate:
    return Candidate(ended_at=NOW - timedelta(hours=hours_ago))


def event(position: int, hours_ago: float) -> Candidate:
    return Candidate(ended_at=NOW - timedelta(hours=hours_ago), position=position)


def minted(*, hours_ago: float) -> uuid.UUID:
    return mint_job_id(now=NOW - timedelta(hours=hours_ago), random=bytes(10))


def test_the_horizon_is_now_less_the_retention() -> None:
    assert datetime(2026, 11, 30, 12, 0, tzinfo=UTC) == HORIZON


@pytest.mark.parametrize(
    ("rows", "acknowledged", "count"),
    [
        pytest.param([job(30), job(25)], None, 2, id="jobs-ended-before-the-horizon-go"),
        pytest.param([job(30), job(23), job(25)], None, 1, id="a-job-inside-its-retention-ends-the-batch"),
        pytest.param([job(24)], None, 0, id="a-job-ended-exactly-at-the-horizon-is-kept"),
        pytest.param([], None, 0, id="no-candidates-prune-nothing"),
        pytest.param([event(1, 30), event(2, 30)], 2, 2, id="acknowledged-old-events-go"),
        pytest.param([event(1, 30), event(2, 30), event(3, 30)], 2, 2, id="an-unacknowledged-event-ends-the-batch"),
        pytest.param([event(1, 30), event(2, 1)], 9, 1, id="an-acknowledged-event-inside-its-retention-is-kept"),
        pytest.param([event(1, 30)], None, 0, id="a-feed-never-acknowledged-keeps-every-event"),
        pytest.param([event(1, 30)], 0, 0, id="an-acknowledgement-of-nothing-keeps-every-event"),
    ],
)
def test_the_prunable_prefix(rows: list[Candidate], acknowledged: int | None, count: int) -> None:
    """Oldest first, the leading run past its retention (and, for a feed, acknowledged by the ledger) goes."""
    assert prunable_prefix(rows, horizon=HORIZON, acknowledged=acknowledged) == count


@pytest.mark.parametrize(
    ("took", "rows"),
    [
        pytest.param(0.2, 250, id="a-slow-batch-halves-the-next"),
        pytest.param(0.01, 1000, id="a-fast-batch-doubles-the-next"),
        pytest.param(0.04, 500, id="a-batch-near-the-target-keeps-its-size"),
    ],
)
def test_the_next_batch_follows_how_long_this_one_took(took: float, rows: int) -> None:
    """Each statement stays near its target duration on any hardware."""
    assert BatchSize(rows=500, target_seconds=0.05).after(took).rows == rows


@pytest.mark.parametrize(
    ("start", "took", "rows"),
    [
        pytest.param(60, 1.0, 50, id="never-below-the-floor"),
        pytest.param(4000, 0.0, 5000, id="never-above-the-ceiling"),
    ],
)
def test_the_batch_size_stays_within_its_bounds(start: int, took: float, rows: int) -> None:
    assert BatchSize(rows=start, floor=50, ceiling=5000).after(took).rows == rows


@pytest.mark.parametrize(
    ("most", "expected"),
    [
        pytest.param(1000, BatchSize(rows=100, floor=50, ceiling=1000), id="a-tenth-of-the-bound-to-start"),
        pytest.param(200, BatchSize(rows=50, floor=50, ceiling=200), id="never-under-the-floor-to-start"),
        pytest.param(10, BatchSize(rows=10, floor=10, ceiling=10), id="a-bound-under-the-floor-is-every-batch"),
    ],
)
def test_a_batch_bound_is_the_ceiling(most: int, expected: BatchSize) -> None:
    """POOL_PRUNE_BATCH_ROWS bounds every statement; the first batch is smaller, and grows while it is quick."""
    assert BatchSize.at_most(most) == expected


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param({"rows": 10, "floor": 50}, id="rows-under-the-floor"),
        pytest.param({"rows": 6000}, id="rows-over-the-ceiling"),
        pytest.param({"rows": 0, "floor": 0}, id="no-rows"),
        pytest.param({"target_seconds": 0}, id="no-target"),
    ],
)
def test_a_batch_size_outside_its_bounds_is_refused(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError, match=r"batch rows|target_seconds"):
        BatchSize(**bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("prunable", "pause"),
    [
        pytest.param(500, 0.03, id="a-full-batch-waits-as-long-as-it-took"),
        pytest.param(499, 60.0, id="a-short-batch-waits-the-interval"),
        pytest.param(0, 60.0, id="an-empty-batch-waits-the-interval"),
    ],
)
def test_the_pause_after_a_batch(prunable: int, pause: float) -> None:
    """Catching up, the pruner holds the store at most half the time; caught up, it waits for the next pass."""
    assert pause_after(prunable=prunable, asked=500, took_seconds=0.03, interval_seconds=60.0) == pause


def test_a_minted_job_id_is_a_uuid7_carrying_its_millisecond() -> None:
    job_id = mint_job_id(now=NOW, random=bytes(range(10)))
    assert job_id.version == 7 and job_id.variant == uuid.RFC_4122
    assert job_id_minted_at(job_id) == NOW


def test_minted_ids_order_by_their_time() -> None:
    """Ids grow with time, so the primary key's inserts land at its right edge rather than anywhere."""
    earlier = mint_job_id(now=NOW, random=b"\xff" * 10)
    later = mint_job_id(now=NOW + timedelta(milliseconds=1), random=bytes(10))
    assert earlier < later


def test_minting_takes_ten_random_bytes() -> None:
    with pytest.raises(ValueError, match="10 random bytes"):
        mint_job_id(now=NOW, random=bytes(9))


def test_an_id_of_another_version_carries_no_time() -> None:
    assert job_id_minted_at(uuid.UUID("2b6c0f6e-6a0e-4c8e-9b1e-3f3c2a1d0e9f")) is None


@pytest.mark.parametrize(
    ("job_id", "expired"),
    [
        pytest.param(minted(hours_ago=25), True, id="minted-before-the-horizon"),
        pytest.param(minted(hours_ago=23), False, id="minted-within-it"),
        pytest.param(uuid.UUID("2b6c0f6e-6a0e-4c8e-9b1e-3f3c2a1d0e9f"), False, id="a-uuid4-of-before-retention"),
    ],
)
def test_a_missing_job_says_it_expired_only_when_it_could_have_been_pruned(job_id: uuid.UUID, expired: bool) -> None:
    """A job is pruned at the earliest a retention after its submit: an id minted since then never existed."""
    detail = missing_job_detail(job_id, now=NOW, retention=DAY)
    if expired:
        assert detail == f"job {job_id} expired: finished jobs and their results are kept 24 hours"
    else:
        assert detail == NO_SUCH_JOB
