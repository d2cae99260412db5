"""Hooks: the one injection object deterministic ordering tests pass in, awaited at the points two actors race.

Everything else a test varies is an ordinary injection point of the engine (the clock, the sleep, the backends,
the lease clock, a store behind a fault-injecting proxy). What remains here cannot be reached from outside: a test
that must hold a run between two of its own statements (a cancel landing between the claim and the send, a
completion racing a batch's statement) parks it on one of these. Production passes none: every hook is None and
costs one attribute read. The parts that await them say which, by name, at the statement it precedes.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass


@dataclass(kw_only=True)
class Hooks:
    """Test seams at the points two actors race: each is awaited, if set, before the named statement."""

    before_complete: Callable[[str], Awaitable[None]] | None = None  # runner: by job id
    before_send: Callable[[str], Awaitable[None]] | None = None  # runner, before mark_sent: dispatched claims only
    before_execute: Callable[[str], Awaitable[None]] | None = None  # runner, before the worker call, every job
    before_wait: Callable[[str], Awaitable[None]] | None = None  # waits: a sync or WaitJob wait, before it registers
    before_place: Callable[[], Awaitable[None]] | None = None  # placement: every pass, before it takes the lock
