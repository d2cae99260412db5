"""REST JSON a service writes itself (a `*Json` RPC answering google.api.HttpBody), under the one rule for absent
values (docs/api.md, "Absent values"): every field is printed; a value that is not there prints `null` — an unset
message field (a time not reached yet), an unset optional or oneof member, and a plain string or number the
message type says is empty when absent (`absent`: type full name → field names); 64-bit integers print as JSON
numbers, never as strings (the transcoder's proto3 JSON mapping prints them as strings)."""

from __future__ import annotations

import base64
import json
from collections.abc import Collection, Mapping
from typing import Any

from google.api import httpbody_pb2
from google.protobuf import descriptor, message, timestamp_pb2

Absent = Mapping[str, Collection[str]]


def rest_value(msg: message.Message, *, absent: Absent, camel: bool = True) -> dict[str, Any]:
    """`msg` as a JSON object under the rule above; keys are JSON names (lowerCamelCase) unless `camel` is False."""
    out: dict[str, Any] = {}
    empty_means_none = absent.get(msg.DESCRIPTOR.full_name, ())
    field: Any  # upb's FieldDescriptor or Python's: the stubs type them apart
    for field in msg.DESCRIPTOR.fields:
        key = field.json_name if camel else field.name
        value = getattr(msg, field.name)
        if field.is_repeated:
            out[key] = [_one(field, item, absent, camel) for item in value]
        elif (field.has_presence and not msg.HasField(field.name)) or (field.name in empty_means_none and not value):
            out[key] = None
        else:
            out[key] = _one(field, value, absent, camel)
    return out


def _one(field: Any, value: Any, absent: Absent, camel: bool) -> Any:  # a FieldDescriptor (upb's or Python's)
    if field.type == descriptor.FieldDescriptor.TYPE_MESSAGE:
        if isinstance(value, timestamp_pb2.Timestamp):
            return value.ToJsonString()
        return rest_value(value, absent=absent, camel=camel)
    if field.type == descriptor.FieldDescriptor.TYPE_ENUM:
        return field.enum_type.values_by_number[value].name if value in field.enum_type.values_by_number else value
    if field.type == descriptor.FieldDescriptor.TYPE_BYTES:
        return base64.b64encode(value).decode()
    return value


def rest_json(msg: message.Message, *, absent: Absent, camel: bool = True) -> httpbody_pb2.HttpBody:
    """The HttpBody a `*Json` RPC answers: `msg` printed by rest_value."""
    text = json.dumps(rest_value(msg, absent=absent, camel=camel), separators=(",", ":"), allow_nan=False)
    return httpbody_pb2.HttpBody(content_type="application/json", data=text.encode())
