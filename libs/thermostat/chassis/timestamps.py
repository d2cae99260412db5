"""datetime ↔ google.protobuf.Timestamp, in UTC both ways.

A Timestamp field of a message cannot be assigned, only filled: `stamp(response.ready_since, at)`.
"""

from __future__ import annotations

from datetime import UTC, datetime

from google.protobuf.timestamp_pb2 import Timestamp


def stamp(field: Timestamp, at: datetime) -> None:
    """Fill the message field `field` with the instant `at` (timezone-aware)."""
    field.FromDatetime(at.astimezone(UTC))


def to_timestamp(at: datetime | None) -> Timestamp | None:
    if at is None:
        return None
    timestamp = Timestamp()
    stamp(timestamp, at)
    return timestamp


def from_timestamp(timestamp: Timestamp) -> datetime:
    """The instant as an aware datetime in UTC."""
    return timestamp.ToDatetime(tzinfo=UTC)
