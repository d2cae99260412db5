"""A REST route's JSON body read strictly: an object whose every key is a field the route takes, each of its type.

Envoy's gRPC-JSON transcoder drops a body field the request message does not define (proto3's JSON mapping;
Envoy has no option to refuse it), so `PUT /api/pods/qwen/budget {"daily": 5}` would answer 200 with no ceiling
set. The routes that take a JSON body therefore receive it raw (a google.api.HttpBody) and read it here; the
service then runs the typed RPC's logic on what was read. Refused, each naming what was wrong, and nothing read:

    bytes that are not UTF-8, not JSON, or JSON that is not an object  → `body: ...`
    a key no field has (either spelling)                               → `body.<key>: unknown field; known: ...`
    a field given twice (`daily_usd` and `dailyUsd`, or one key twice) → `body.<key>: given twice`
    null                                                               → `body.<key>: null is not a value ...`
    a value of the wrong JSON type, a number past a double's range     → `body.<key>: must be ...`
    a field the path binds, with another value than the path's         → `body.<key>: conflicts with the path ...`
    a string holding a NUL or a lone surrogate                         → `body.<key>: must not contain ...`

A field is spelled as the transcoder accepts it: its proto name (`daily_usd`) or its lowerCamel JSON name
(`dailyUsd`). A path-bound field repeated with the path's own value is accepted and ignored, as Envoy's
collision check does (reject_binding_body_field_collisions), so the path stays the only word on it. A bound field
the route names `folded` is the same value in any case (a pod's name is: the route resolves it case-insensitively,
so `{"name": "QWEN"}` on `/api/pods/qwen/budget` names the pod the path does).

Pure: bytes in, frozen values out.
"""

from __future__ import annotations

import json
import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType
from typing import TypeGuard

from thermostat.policy.common.echo import ECHO_CHARS, key_path


class JsonKind(StrEnum):
    NUMBER = "number"
    INTEGER = "integer"  # a JSON number written without a fraction or exponent, read exactly (an int64)
    STRING = "string"


@dataclass(frozen=True, slots=True)
class BodyField:
    """One field a body may carry: its proto name and the JSON type its value must have."""

    name: str
    kind: JsonKind

    @property
    def json_name(self) -> str:
        return lower_camel(self.name)


@dataclass(frozen=True, slots=True)
class BodyError:
    """A body refused: `detail` names the body or the field at fault."""

    detail: str


@dataclass(frozen=True, slots=True)
class BodyValues:
    """What a body set, by proto name; a field it left out is absent."""

    values: Mapping[str, float | int | str]


def lower_camel(name: str) -> str:
    """protoc's default JSON name of a field: `daily_usd` → `dailyUsd`."""
    first, *rest = name.split("_")
    return first + "".join(part[:1].upper() + part[1:] for part in rest)


class _Pairs(tuple[tuple[str, object], ...]):
    """A decoded JSON object as its key-value pairs in order, so a key given twice is seen."""


def _pairs(items: list[tuple[str, object]]) -> _Pairs:
    return _Pairs(items)


class _LongInteger:
    """An integer literal too long to convert (int() refuses over 4,300 digits): far outside an int64 and a double,
    so it is not finite to a NUMBER field and past the int64 range to an INTEGER one."""

    __slots__ = ()


_LONG_LITERAL = 400
"""Digits from which an integer literal is not converted. Shorter ones become plain ints: a body may hold
millions of them, so nothing heavier than an int is made for each (a float subclass with the exact value
cost ~12x the memory)."""
_LONG = _LongInteger()


def _int_literal(text: str) -> int | _LongInteger:
    return int(text) if len(text) < _LONG_LITERAL else _LONG


INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def _no_constant(name: str) -> object:
    raise ValueError(f"{name} is not JSON")


def is_object(value: object) -> TypeGuard[Sequence[tuple[str, object]]]:
    """A decoded JSON object (its pairs, for read_pairs)."""
    return isinstance(value, _Pairs)


def kind_of(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, float | int | _LongInteger):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, _Pairs):
        return "an object"
    return "an array"


KEY_ECHO_CHARS = ECHO_CHARS
"""The most of a body key a detail repeats: a key is the caller's bytes, and the detail travels in a header."""


def unknown_field(key: str, fields: Sequence[BodyField], where: str = "body") -> BodyError:
    """A key no field of `fields` has, named under `where`."""
    known = ", ".join(f.name for f in fields) or "none"
    return BodyError(f"{key_path(key, where)}: unknown field; known: {known}")


def decode_json(data: bytes) -> object | BodyError:
    """The body decoded, objects as their pairs in order (is_object), or why it is not JSON."""
    return _decode(data)


def _decode(data: bytes) -> object | BodyError:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return BodyError("body: not UTF-8 text; a JSON object is expected")
    if not text.strip():
        return BodyError("body: empty; a JSON object is expected")
    try:
        decoded: object = json.loads(
            text, object_pairs_hook=_pairs, parse_int=_int_literal, parse_constant=_no_constant
        )
    except json.JSONDecodeError as error:
        return BodyError(f"body: not JSON ({error.msg} at line {error.lineno} column {error.colno})")
    except RecursionError:
        return BodyError("body: not JSON (nested too deeply)")
    except ValueError as error:  # NaN or Infinity, which JSON has no literal for
        return BodyError(f"body: not JSON ({error})")
    return decoded


def _checked(key: str, value: object, field: BodyField, where: str = "body") -> float | int | str | BodyError:
    named = key_path(key, where)
    if value is None:
        return BodyError(f"{named}: null is not a value; leave the field out to leave it unset")
    if field.kind is JsonKind.INTEGER:
        if isinstance(value, _LongInteger) or (
            isinstance(value, int) and not isinstance(value, bool) and not INT64_MIN <= value <= INT64_MAX
        ):
            return BodyError(f"{named}: must be a 64-bit integer")
        if not isinstance(value, int) or isinstance(value, bool):
            return BodyError(f"{named}: must be a JSON integer, not {kind_of(value)}")
        return value
    if field.kind is JsonKind.NUMBER:
        if isinstance(value, _LongInteger):
            return BodyError(f"{named}: must be a finite number")
        if not isinstance(value, float | int) or isinstance(value, bool):
            return BodyError(f"{named}: must be a JSON number, not {kind_of(value)}")
        try:
            number = float(value)
        except OverflowError:  # an integer literal past a double's range
            return BodyError(f"{named}: must be a finite number")
        if not math.isfinite(number):
            return BodyError(f"{named}: must be a finite number")
        return number
    if not isinstance(value, str):
        return BodyError(f"{named}: must be a JSON string, not {kind_of(value)}")
    if "\x00" in value:  # as the typed RPCs refuse it (chassis/text_fields.py): Postgres text cannot hold one
        return BodyError(f"{named}: must not contain a NUL character (U+0000)")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate (a "\ud800" escape): not text, and not sendable in a status
        return BodyError(f"{named}: is not valid Unicode text (a lone surrogate)")
    return value


def _same_as_path(value: object, path_value: str, *, folded: bool) -> bool:
    if folded and isinstance(value, str):
        return value.casefold() == path_value.casefold()
    return value == path_value


def read_json_object(
    data: bytes,
    fields: Sequence[BodyField],
    *,
    bound: Mapping[str, str] | None = None,
    folded: Collection[str] = (),
) -> BodyValues | BodyError:
    """The body's values by proto name, or the first thing wrong with it (in the body's order).

    `bound` is each field the route's path binds (proto name) and the path's value for it; `folded` names the bound
    fields whose value the path matches whatever its case."""
    decoded = _decode(data)
    if isinstance(decoded, BodyError):
        return decoded
    if not isinstance(decoded, _Pairs):
        return BodyError(f"body: must be a JSON object, not {kind_of(decoded)}")
    return read_pairs(decoded, fields, bound=bound, folded=folded)


def read_pairs(
    decoded: object,
    fields: Sequence[BodyField],
    *,
    where: str = "body",
    bound: Mapping[str, str] | None = None,
    folded: Collection[str] = (),
) -> BodyValues | BodyError:
    """An object decode_json gave (the body, or one inside it that the detail names `where`) read as
    read_json_object reads a body."""
    if not isinstance(decoded, _Pairs):
        return BodyError(f"{where}: must be a JSON object, not {kind_of(decoded)}")
    by_spelling = {spelling: f for f in fields for spelling in (f.name, f.json_name)}
    bound_by_spelling = {spelling: n for n in (bound or {}) for spelling in (n, lower_camel(n))}
    values: dict[str, float | int | str] = {}
    seen: dict[str, str] = {}  # proto name → the key it was given as
    for key, value in decoded:
        name = by_spelling[key].name if key in by_spelling else bound_by_spelling.get(key)
        if name is None:
            return unknown_field(key, fields, where)
        if name in seen:
            return BodyError(f"{key_path(key, where)}: given twice (as {seen[name]} and {key})")
        seen[name] = key
        if key not in by_spelling:  # a field the path binds: the path's value or nothing
            path_value = (bound or {})[name]
            if not _same_as_path(value, path_value, folded=name in folded):
                shown = f"{key_path(key, where)}: conflicts with the path's {name} {json.dumps(path_value)}"
                return BodyError(f"{shown}; leave it out of the body")
            continue
        checked = _checked(key, value, by_spelling[key], where)
        if isinstance(checked, BodyError):
            return checked
        values[name] = checked
    return BodyValues(values=MappingProxyType(values))
