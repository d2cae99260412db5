"""A submit's options, read from query parameters (REST) or typed fields (gRPC), checked before queueing.

The worker-pool seed: "machine_type (required), priority (default 0, higher runs first; a 64-bit integer), session_id
and timeout_seconds (both optional). timeout_seconds can shorten the machine type's job_timeout_seconds but
not extend it. POST /v1/jobs/sync also takes wait_seconds (default 300), which bounds the wait and not the
job, and is cut to the type's boot_timeout_seconds plus job_timeout_seconds. Both times must be positive
and finite; anything else is a 422 and no job is queued."

Decisions beyond the worker-pool seed's words:
- A `timeout_seconds` above the type's job timeout is not an error: it is cut to the type's (it "cannot
  extend" the timeout), so a caller need not know the catalogue's figure.
- `wait_seconds` is cut to boot + the job's own (possibly shortened) timeout: past that the job has ended
  one way or another, so waiting longer only holds a connection open.
- An unknown `machine_type` is its own error kind, so the service can say which types exist.
- Numbers in query strings are plain decimals: "+5", "1_0", "0x10" and non-ASCII digits are refused
  (Python's int() and float() would take some of them).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from thermostat.policy.common.echo import ECHO_CHARS, cut, quoted
from thermostat.policy.pool.machine_type import Catalogue, MachineType

DEFAULT_PRIORITY = 0
DEFAULT_WAIT_SECONDS = 300.0
MAX_SESSION_ID_LENGTH = 256
INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1

_INTEGER = re.compile(r"-?[0-9]{1,19}")
_DECIMAL = re.compile(r"[0-9]+(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?|\.[0-9]+(?:[eE][-+]?[0-9]+)?")


class SubmitErrorKind(StrEnum):
    """SubmitErrorKind tells the service which answer a refused submit gets (all 422 in the worker-pool seed's API)."""

    MISSING = "missing"
    INVALID = "invalid"
    UNKNOWN_MACHINE_TYPE = "unknown_machine_type"


@dataclass(frozen=True, slots=True, kw_only=True)
class SubmitError:
    """SubmitError names the parameter at fault; nothing is queued."""

    kind: SubmitErrorKind
    parameter: str
    message: str

    @property
    def detail(self) -> str:
        return f"{self.parameter}: {self.message}"


@dataclass(frozen=True, slots=True, kw_only=True)
class SubmitOptions:
    """SubmitOptions are a valid submit's settings, with the timeouts already cut to the machine type."""

    machine_type: MachineType
    priority: int
    session_id: str | None
    timeout_seconds: float
    wait_seconds: float | None  # None for an asynchronous submit


def decide_submit_options(
    *,
    catalogue: Catalogue,
    machine_type: str | None,
    priority: int = DEFAULT_PRIORITY,
    session_id: str | None = None,
    timeout_seconds: float | None = None,
    wait_seconds: float | None = None,
    sync: bool = False,
) -> SubmitOptions | SubmitError:
    """Typed options (the gRPC path, and the REST path after `parse_submit_query`) checked and cut."""
    if not machine_type:
        return SubmitError(kind=SubmitErrorKind.MISSING, parameter="machine_type", message="is required")
    if not INT64_MIN <= priority <= INT64_MAX:
        return _invalid("priority", "must be a 64-bit integer")
    if session_id is not None and len(session_id) > MAX_SESSION_ID_LENGTH:
        return _invalid("session_id", f"must be at most {MAX_SESSION_ID_LENGTH} characters")
    for parameter, value in (("timeout_seconds", timeout_seconds), ("wait_seconds", wait_seconds)):
        if value is not None and (not math.isfinite(value) or value <= 0):
            return _invalid(parameter, f"must be a positive finite number of seconds, got {value}")
    chosen = catalogue.get(machine_type)
    if chosen is None:
        return unknown_machine_type(machine_type, catalogue)
    timeout = min(timeout_seconds or chosen.job_timeout_seconds, chosen.job_timeout_seconds)
    wait = None
    if sync:
        wait = min(wait_seconds or DEFAULT_WAIT_SECONDS, chosen.boot_timeout_seconds + timeout)
    return SubmitOptions(
        machine_type=chosen,
        priority=priority,
        session_id=session_id or None,
        timeout_seconds=timeout,
        wait_seconds=wait,
    )


def parse_submit_query(query: Mapping[str, str], *, catalogue: Catalogue, sync: bool) -> SubmitOptions | SubmitError:
    """REST query parameters (strings) to options; a parameter given but blank counts as given and invalid."""
    priority = DEFAULT_PRIORITY
    if "priority" in query:
        raw = query["priority"].strip()
        if not _INTEGER.fullmatch(raw) or not INT64_MIN <= int(raw) <= INT64_MAX:
            return _invalid("priority", f"must be a 64-bit integer, got {quoted(query['priority'])}")
        priority = int(raw)
    times: dict[str, float | None] = {"timeout_seconds": None, "wait_seconds": None}
    for parameter in times:
        if parameter in query:
            raw_time = query[parameter]
            parsed = _seconds(raw_time)
            if parsed is None:
                return _invalid(parameter, f"must be a positive finite number of seconds, got {quoted(raw_time)}")
            times[parameter] = parsed
    return decide_submit_options(
        catalogue=catalogue,
        machine_type=query.get("machine_type", "").strip() or None,
        priority=priority,
        session_id=query.get("session_id") or None,
        timeout_seconds=times["timeout_seconds"],
        wait_seconds=times["wait_seconds"] if sync else None,
        sync=sync,
    )


NAME_ECHO_CHARS = ECHO_CHARS
"""The most of an unknown name an error repeats: it is the caller's text, and the error travels in a header."""


def unknown_machine_type(name: str, catalogue: Catalogue) -> SubmitError:
    """Refused in the original strata-pool package's words, `unknown machine type: '<name>'`, which its clients
    match on (GET /v1/machine-types lists the types there are); the name is cut, as it travels in a header."""
    shown = cut(name, NAME_ECHO_CHARS)
    return SubmitError(
        kind=SubmitErrorKind.UNKNOWN_MACHINE_TYPE,
        parameter="machine_type",
        message=f"unknown machine type: {shown!r}",
    )


def _seconds(raw: str) -> float | None:
    text = raw.strip()
    if not _DECIMAL.fullmatch(text):
        return None
    value = float(text)
    return value if math.isfinite(value) and value > 0 else None


def _invalid(parameter: str, message: str) -> SubmitError:
    return SubmitError(kind=SubmitErrorKind.INVALID, parameter=parameter, message=message)
