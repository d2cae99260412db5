"""What a command prints: JSON on stdout for scripts (`--json`), a table for people, and errors on stderr.

Every value the client returns — a protobuf message, a dataclass, a dict — becomes plain JSON the same way
(`plain`): proto field names in snake_case, as the pool's `/v1` routes print them, timestamps in RFC 3339, a
message field that is unset left out.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from google.protobuf import timestamp_pb2
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message
from rich.console import Console
from rich.table import Table
from rich.text import Text


def plain(value: Any) -> Any:
    """`value` as JSON-ready dicts, lists and scalars."""
    if isinstance(value, Message):
        return _message(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat().replace("+00:00", "Z")
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if hasattr(value, "value") and hasattr(value, "name") and not isinstance(value, (int, str)):
        return plain(value.value)  # an Enum
    return value


def _message(message: Message) -> Any:
    """A message as JSON the way the pool's REST routes print one: every field without presence, an optional or
    message field only when set, int64 as a number (json_format would print a string), enums by name."""
    if isinstance(message, timestamp_pb2.Timestamp):
        return message.ToJsonString()
    result: dict[str, Any] = {}
    for field in message.DESCRIPTOR.fields:
        if field.has_presence and not message.HasField(field.name):
            continue
        value = getattr(message, field.name)
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            result[field.name] = {str(k): _scalar(field, v) for k, v in value.items()}
        elif field.is_repeated:
            result[field.name] = [_scalar(field, v) for v in value]
        else:
            result[field.name] = _scalar(field, value)
    return result


def _scalar(field: Any, value: Any) -> Any:  # a FieldDescriptor (the upb one is typed apart)
    if isinstance(value, Message):
        return _message(value)
    if field.type == FieldDescriptor.TYPE_ENUM and field.enum_type is not None:
        number = int(value)
        named = field.enum_type.values_by_number.get(number)
        return named.name if named is not None else number
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return value


def cell(value: Any) -> str:
    """One table cell: empty for none, yes/no, a float without trailing zeros (120, 0.5), JSON for structures."""
    if value is None or value == "":
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.6g}" if math.isfinite(value) else str(value)
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"))
    return str(value)


def _literal(value: Any) -> Text:
    """A cell as the text it is: a table's plain string would be read as rich markup, so a server's words in
    brackets (a budget refusal's `[budget=daily limit_usd=…]`) vanished as a style and a `[/…]` crashed the CLI."""
    return Text(cell(value))


def usd(value: Any) -> str:
    """An amount of money in USD, to the cent; empty when absent."""
    return "" if value is None else f"{float(value):.2f}"


def hours(seconds: Any) -> str:
    """Seconds as hours, to the hundredth."""
    return f"{float(seconds or 0) / 3600:.2f}"


def epoch(seconds: Any) -> str:
    """Epoch seconds (the pool's times) as a short UTC time."""
    if seconds in (None, "", 0, 0.0):
        return ""
    return datetime.fromtimestamp(float(seconds), UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def when(rfc3339: Any) -> str:
    """An RFC 3339 time (a protobuf Timestamp in JSON) as a short UTC time."""
    if not rfc3339:
        return ""
    return datetime.fromisoformat(str(rfc3339).replace("Z", "+00:00")).astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def _width() -> int | None:
    """The terminal's width on a terminal (rich finds it); elsewhere (a pipe, a log) COLUMNS or wide enough that
    a table keeps one line per row."""
    if sys.stdout.isatty() or os.environ.get("COLUMNS"):
        return None
    return 240


class Output:
    """Where a command's results go; `json_mode` picks JSON over tables."""

    def __init__(self, *, json_mode: bool, stdout: Console | None = None, stderr: Console | None = None) -> None:
        self.json_mode = json_mode
        self.stdout = stdout or Console(highlight=False, soft_wrap=False, width=_width())
        self.stderr = stderr or Console(stderr=True, highlight=False)

    def json(self, value: Any) -> None:
        """`value` as indented JSON on stdout, never styled (a pipe reads exactly this)."""
        sys.stdout.write(json.dumps(plain(value), indent=2, sort_keys=False) + "\n")
        sys.stdout.flush()

    def json_line(self, value: Any) -> None:
        """`value` as one line of JSON (a stream: one object per line)."""
        sys.stdout.write(json.dumps(plain(value), separators=(",", ":")) + "\n")
        sys.stdout.flush()

    def table(self, columns: Sequence[str], rows: Iterable[Sequence[Any]], *, title: str | None = None) -> None:
        table = Table(title=title, show_lines=False, header_style="bold")
        for column in columns:
            table.add_column(column)
        for row in rows:
            table.add_row(*(_literal(v) for v in row))
        self.stdout.print(table)

    def fields(self, pairs: Iterable[tuple[str, Any]], *, title: str | None = None) -> None:
        """One record as a two-column table (field, value)."""
        table = Table(title=title, show_header=False, box=None, pad_edge=False)
        table.add_column(style="bold")
        table.add_column()
        for name, value in pairs:
            table.add_row(name, _literal(value))
        self.stdout.print(table)

    def note(self, text: str) -> None:
        """A line for people on stderr (kept off stdout, which scripts read)."""
        self.stderr.print(text, markup=False)

    def error(self, code: str, detail: str) -> None:
        """An error on stderr: a JSON object under `--json`, else one line."""
        if self.json_mode:
            sys.stderr.write(json.dumps({"error": {"code": code, "detail": detail}}) + "\n")
        else:
            self.stderr.print(f"error: {detail} ({code})", markup=False, highlight=False)
