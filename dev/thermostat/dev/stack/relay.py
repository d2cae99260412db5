"""How `make run` prints its children's lines: on a terminal, one short human line per event; elsewhere as they are.

The services log one JSON object per line (chassis/logs.py), the format of their own logs and of anything that
reads `make run`'s output through a pipe. Relayed to an operator's terminal as is, every line was about 190
characters of time, service, logger and request id around a message of 60 (issue 35). On a terminal, `human`
keeps what an operator reads: the time of day, the level when it is not INFO, the message, the fields a line
adds of its own, and an exception's last line (the whole one stays in the JSON a pipe gets).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping

from thermostat.chassis.registry import SERVICES

NAME_WIDTH = max(14, *(len(service.name) for service in SERVICES))
"""The column every relayed line's name fills (a replica's `#2` may run over), so the lines align."""
STACK_PREFIX = f"{'devstack':<{NAME_WIDTH}} | "

FRAME = frozenset({"time", "level", "service", "logger", "message", "request_id", "traceparent", "exception"})
"""What every JSON line carries: said by the prefix, or left to the JSON logs."""

LOGS_ENV = "THERMOSTAT_STACK_LOGS"
"""`json`: the children's lines as they are, also on a terminal; `human`: short lines, also through a pipe."""


def human_logs(environ: Mapping[str, str], *, terminal: bool) -> bool:
    """Whether the stack prints short lines: on a terminal unless THERMOSTAT_STACK_LOGS says otherwise; ValueError
    naming the variable for any other value."""
    value = environ.get(LOGS_ENV, "").strip().lower()
    if value not in ("", "json", "human"):
        raise ValueError(f"{LOGS_ENV}: {value!r} is neither json nor human")
    return value == "human" or (terminal and value != "json")


def human(line: str) -> str:
    """`12:55:13 pod qwen: configured; watching it`, `12:56:38 WARNING runpod POST /pods … -> 503: …`; a line that
    is not a service's JSON (a simulator's, gRPC's own) comes back unchanged."""
    if not line.startswith("{"):
        return line
    try:
        entry = json.loads(line)
    except ValueError:
        return line
    if not isinstance(entry, dict) or "message" not in entry:
        return line
    stamp = str(entry.get("time", ""))
    clock = stamp[11:19] if len(stamp) >= 19 else stamp
    level = str(entry.get("level", "INFO"))
    parts = [clock] if clock else []
    if level != "INFO":
        parts.append(level)
    parts.append(str(entry["message"]))
    extras = " ".join(f"{k}={v}" for k, v in entry.items() if k not in FRAME)
    if extras:
        parts.append(f"({extras})")
    exception = str(entry.get("exception") or "").strip()
    if exception:
        parts.append("| " + exception.splitlines()[-1])
    return " ".join(parts)


def terminal() -> bool:
    """Whether this process's standard output is a terminal."""
    return os.isatty(1)
