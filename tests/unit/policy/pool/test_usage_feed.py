"""A usage page never passes a position that a transaction still in flight could fill."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from thermostat.policy.pool.usage_feed import Recorded, readable_count

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
SETTLE = timedelta(seconds=10)


def rows(*spec: tuple[int, float]) -> list[Recorded]:
    """(position, seconds ago) pairs."""
    return [Recorded(position=p, recorded_at=NOW - timedelta(seconds=ago)) for p, ago in spec]


def count(after: int, *spec: tuple[int, float]) -> int:
    return readable_count(after=after, rows=rows(*spec), now=NOW, settle=SETTLE)


def test_consecutive_positions_are_all_readable() -> None:
    assert count(0, (1, 0), (2, 0), (3, 0)) == 3


def test_a_fresh_gap_stops_the_page_before_it() -> None:
    """6 missing while 7 was recorded a second ago: 6 may still commit, so the page ends at 5."""
    assert count(4, (5, 1), (7, 1), (8, 1)) == 1


def test_a_fresh_gap_right_after_the_stored_position_gives_an_empty_page() -> None:
    assert count(4, (6, 1)) == 0


def test_a_gap_older_than_the_settle_window_is_read_through() -> None:
    """A number a rolled-back transaction consumed never arrives: after the window the page goes on."""
    assert count(4, (5, 30), (7, 10), (8, 1)) == 3


def test_a_later_fresh_gap_stops_the_page_there() -> None:
    assert count(0, (1, 60), (3, 60), (4, 2), (6, 2)) == 3


def test_no_rows_reads_nothing() -> None:
    assert count(9) == 0
