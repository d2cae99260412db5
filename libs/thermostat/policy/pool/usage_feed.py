"""How far a usage-feed reader may be given the pool's usage events without skipping one for good.

Usage positions come from a sequence taken inside the transaction that makes a job terminal, so they become
visible in commit order, not in position order: with two dispatchers finishing jobs at once, 7 can be visible
while 6 is still in flight. A reader that stored 7 would never read 6. So a page stops before a missing
position while the row after the gap is younger than the settle window (the missing one may still commit);
once the window has passed the gap is permanent (a rolled-back transaction or a replayed usage insert
consumed the number) and the page reads through it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta


@dataclass(frozen=True, slots=True, kw_only=True)
class Recorded:
    """A visible usage row: its position and when it was recorded (the database clock, at its insert)."""

    position: int
    recorded_at: datetime


def readable_count(*, after: int, rows: Sequence[Recorded], now: datetime, settle: timedelta) -> int:
    """How many of `rows` (visible rows after `after`, in position order) the reader may take."""
    expected = after + 1
    for index, row in enumerate(rows):
        if row.position != expected and now - row.recorded_at < settle:
            return index
        expected = row.position + 1
    return len(rows)
