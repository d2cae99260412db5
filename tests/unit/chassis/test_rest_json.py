"""The one rule for absent values in the REST JSON a service writes (chassis/rest_json.py), one test per rule."""

from __future__ import annotations

import json

from thermostat.chassis.rest_json import rest_json, rest_value
from thermostat.metering.v1 import metering_pb2
from thermostat.pods.v1 import pods_pb2

FEED_ABSENT = {"thermostat.metering.v1.FeedStatus": ("error",)}


def test_a_64_bit_integer_prints_as_a_json_number() -> None:
    """The transcoder prints "41"; the rule prints 41."""
    feed = rest_value(metering_pb2.FeedStatus(position=41, head_position=2**40), absent=FEED_ABSENT)
    assert (feed["position"], feed["headPosition"]) == (41, 2**40)


def test_an_unset_message_field_prints_null() -> None:
    """A time not reached yet (the ledger's first read) is null, not left out."""
    assert rest_value(metering_pb2.FeedStatus(), absent=FEED_ABSENT)["lastReadAt"] is None


def test_a_set_timestamp_prints_as_rfc_3339() -> None:
    feed = metering_pb2.FeedStatus()
    feed.last_read_at.FromSeconds(0)
    assert rest_value(feed, absent=FEED_ABSENT)["lastReadAt"] == "1970-01-01T00:00:00Z"


def test_an_empty_field_the_type_names_absent_prints_null_and_others_keep_their_zero() -> None:
    """error "" is no error (null); lag_events 0 is a count (0)."""
    feed = rest_value(metering_pb2.FeedStatus(source="s"), absent=FEED_ABSENT)
    assert (feed["error"], feed["lagEvents"], feed["source"]) == (None, 0, "s")


def test_an_unset_oneof_member_prints_null() -> None:
    """A history entry is an action or a wake: the other one is null."""
    entry = pods_pb2.HistoryEntry(action=pods_pb2.PodAction(action="Stop"))
    printed = rest_value(entry, absent={})
    assert printed["wake"] is None and printed["action"]["action"] == "Stop"


def test_proto_field_names_when_asked() -> None:
    assert "head_position" in rest_value(metering_pb2.FeedStatus(), absent={}, camel=False)


def test_the_http_body_is_compact_json() -> None:
    body = rest_json(metering_pb2.GetLedgerStatusResponse(feeds=[metering_pb2.FeedStatus()]), absent=FEED_ABSENT)
    assert body.content_type == "application/json"
    assert json.loads(body.data)["feeds"][0]["error"] is None
