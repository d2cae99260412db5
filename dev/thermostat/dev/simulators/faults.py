"""Scripted failure injection for the simulator: the next N requests on a route misbehave in a chosen way.

Each kind is an answer the seeds say a client must survive: a bare (non-problem) 404 from a proxy page or a
base URL missing /v2, a 2xx with a body that is not JSON, a 429 with Retry-After, a request that hangs past
the client timeout, and a create that RunPod committed but whose answer was a gateway 5xx (the pod exists
and bills; the caller saw a failure).

A `FaultMix` is the chaos version: a share of every API request fails, each in a kind drawn from a seeded
random source, and the mix counts what it injected by kind.
"""

from __future__ import annotations

import asyncio
import json
import random
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from http import HTTPStatus

from thermostat.dev.simulators.serving import RecordedRequest

BODY_KINDS = ("problem", "text", "malformed", "json", "empty")


@dataclass(slots=True, kw_only=True)
class Hold:
    """Hold parks a matching request until the test releases it, so a test can order it against another call.

    `after_commit` False parks it before RunPod acts (the call is in flight, nothing changed yet); True parks
    the answer after the state changed (RunPod acted, the caller has not heard). In-process only.
    """

    after_commit: bool = False
    arrived: threading.Event = field(default_factory=threading.Event)
    released: threading.Event = field(default_factory=threading.Event)

    def release(self) -> None:
        self.released.set()

    async def reached(self, timeout: float = 10.0) -> None:
        """Wait (without blocking the event loop) until a request is parked here."""
        if not await asyncio.to_thread(self.arrived.wait, timeout):
            raise AssertionError(f"no request reached the hold within {timeout} s")

    def park(self, stopping: threading.Event) -> None:
        self.arrived.set()
        while not self.released.wait(0.05) and not stopping.is_set():
            pass


@dataclass(slots=True, kw_only=True)
class Fault:
    """Fault is one scripted misbehaviour.

    `path` is a glob over the raw request path (`/v2/pods/*`); `remaining` None means every matching request.
    With `status` None and no hang the request is only delayed, then served normally. `commit_then_fail`
    serves the request (state changes happen) and then answers `status` (502 by default) instead.
    """

    path: str
    method: str = "*"
    remaining: int | None = 1
    status: int | None = None
    body: str = "problem"
    json_body: object = None
    retry_after: str | None = None
    delay_seconds: float = 0.0
    hang: bool = False
    commit_then_fail: bool = False
    hold: Hold | None = None
    kind: str = ""  # the FaultMix kind this fault was drawn as ("" for a scripted one)

    def __post_init__(self) -> None:
        if self.body not in BODY_KINDS:
            raise ValueError(f"body must be one of {BODY_KINDS}")
        if self.remaining is not None and self.remaining < 1:
            raise ValueError("remaining must be at least 1 (or None for every request)")
        if self.commit_then_fail and self.status is None:
            self.status = 502

    def matches(self, method: str, path: str) -> bool:
        return (self.method == "*" or self.method.upper() == method) and fnmatchcase(path, self.path)

    def response(self) -> tuple[int, dict[str, str], bytes]:
        status = self.status or 500
        headers: dict[str, str] = {}
        if self.retry_after is not None:
            headers["Retry-After"] = self.retry_after
        if self.body == "problem":
            headers["Content-Type"] = "application/problem+json"
            content = json.dumps({"title": _phrase(status), "status": status, "detail": "injected fault"}).encode()
        elif self.body == "text":
            headers["Content-Type"] = "text/plain; charset=utf-8"
            content = f"{status} {_phrase(status).lower()}\n".encode()
        elif self.body == "malformed":
            headers["Content-Type"] = "application/json"
            content = b'{"id": "trunc'
        elif self.body == "json":
            headers["Content-Type"] = "application/json"
            content = json.dumps(self.json_body).encode()
        else:
            content = b""
        return status, headers, content

    def to_json(self) -> dict[str, object]:
        return {
            "method": self.method,
            "path": self.path,
            "remaining": self.remaining,
            "status": self.status,
            "body": self.body,
            "json": self.json_body,
            "retryAfter": self.retry_after,
            "delaySeconds": self.delay_seconds,
            "hang": self.hang,
            "commitThenFail": self.commit_then_fail,
            "hold": self.hold is not None,
            "kind": self.kind,
        }


def fault_from_json(data: Mapping[str, object]) -> Fault:
    path = data.get("path")
    if not isinstance(path, str) or not path:
        raise ValueError("a fault needs a path glob")
    remaining = data.get("remaining", data.get("count", 1))
    status = data.get("status")
    retry_after = data.get("retryAfter")
    delay = data.get("delaySeconds", 0.0)
    if remaining is not None and not isinstance(remaining, int):
        raise ValueError("remaining must be an integer or null")
    if status is not None and not isinstance(status, int):
        raise ValueError("status must be an integer")
    if not isinstance(delay, int | float):
        raise ValueError("delaySeconds must be a number")
    return Fault(
        path=path,
        method=str(data.get("method", "*")).upper(),
        remaining=remaining,
        status=status,
        body=str(data.get("body", "problem")),
        json_body=data.get("json"),
        retry_after=None if retry_after is None else str(retry_after),
        delay_seconds=float(delay),
        hang=bool(data.get("hang", False)),
        commit_then_fail=bool(data.get("commitThenFail", False)),
    )


@dataclass(frozen=True, slots=True)
class ServedFault:
    """A request the simulator answered with a fault instead of (or after) serving it."""

    request: RecordedRequest
    fault: Fault


# The ways a RunPod call fails that a client must survive (issue 14's chaos run): a gateway 5xx, a 429 with
# Retry-After, a request that hangs past the client timeout, a bare (non-problem) 404, a 2xx whose body is cut
# off after RunPod acted, and a create RunPod committed whose answer was a gateway 5xx.
MIX_KINDS = ("5xx", "429", "timeout", "bare-404", "malformed-json", "commit-then-5xx")


@dataclass(slots=True, kw_only=True)
class FaultMix:
    """FaultMix fails `rate` of the requests under `prefix`, each in a kind drawn at random (seeded).

    `commit-then-5xx` is drawn only for a create (POST `create_path`), for half of the failed creates; any other
    request draws among the rest.
    `counts` says how many of each kind were injected.
    """

    rate: float
    seed: int = 0
    kinds: tuple[str, ...] = MIX_KINDS
    prefix: str = "/v2/"
    create_path: str = "/v2/pods"
    retry_after: str = "1"
    counts: dict[str, int] = field(default_factory=dict)
    _random: random.Random = field(init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        if not 0.0 <= self.rate <= 1.0:
            raise ValueError("rate must be between 0 and 1")
        unknown = set(self.kinds) - set(MIX_KINDS)
        if unknown or not self.kinds:
            raise ValueError(f"kinds must be a non-empty subset of {MIX_KINDS}")
        self._random = random.Random(self.seed)  # noqa: S311 -- a repeatable draw, not a secret

    def draw(self, method: str, path: str) -> Fault | None:
        if not path.startswith(self.prefix):
            return None
        is_create = method == "POST" and path == self.create_path
        kinds = [k for k in self.kinds if k != "commit-then-5xx"]
        committed = is_create and "commit-then-5xx" in self.kinds
        with self._lock:
            if self._random.random() >= self.rate:
                return None
            # a failed create is the committed one half the time: creates are few, and it is the fault that
            # bills a second pod when a client gets it wrong
            if committed and (not kinds or self._random.random() < 0.5):
                kind = "commit-then-5xx"
            elif kinds:
                kind = self._random.choice(kinds)
            else:
                return None
            self.counts[kind] = self.counts.get(kind, 0) + 1
        return self._fault(kind, method, path)

    def _fault(self, kind: str, method: str, path: str) -> Fault:
        if kind == "5xx":
            return Fault(path=path, method=method, status=502, body="text", kind=kind)
        if kind == "429":
            return Fault(path=path, method=method, status=429, retry_after=self.retry_after, kind=kind)
        if kind == "timeout":
            return Fault(path=path, method=method, hang=True, kind=kind)
        if kind == "bare-404":
            return Fault(path=path, method=method, status=404, body="text", kind=kind)
        if kind == "malformed-json":
            # the request is served (a start or a create happened) and its answer arrives cut off
            return Fault(path=path, method=method, status=200, body="malformed", commit_then_fail=True, kind=kind)
        return Fault(path=path, method=method, commit_then_fail=True, kind=kind)


def _phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Error"
