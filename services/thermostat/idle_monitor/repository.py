"""MonitorRepository: every query the idle monitor runs, and the only part of it that touches the pool.

The monitor's memory per pod is the policy's MonitorState as JSON plus the last signal. The SQL lives in the
named blocks of queries.sql; rows become frozen `SavedState` values here and nowhere else. Leases are not
here: they go through the store's `LeaseStore`, the port every service shares.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import asyncpg

from thermostat.policy.idle.monitor_state import MonitorState
from thermostat.policy.idle.request_activity import RequestCounts
from thermostat.store.connections import borrow
from thermostat.store.sql import load_sql

_Q = load_sql(Path(__file__).with_name("queries.sql"))


@dataclass(frozen=True, slots=True, kw_only=True)
class SavedState:
    """SavedState is a pod's monitor state as the last tick left it."""

    state: MonitorState
    last_signal: str = ""
    last_signal_pod_id: str = ""
    last_tick_at: datetime | None = None
    ticked_by: str = ""
    """The replica whose tick wrote it (empty for a pod never ticked)."""


class MonitorRepository:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def load(self, pod_name: str) -> SavedState:
        """The pod's saved state; a fresh one for a pod never ticked."""
        # borrowed: an interrupted read (a caller's bound) drops its connection rather than wait on a dead link
        async with borrow(self._pool) as connection:
            row = await connection.fetchrow(*_Q.bind("load_state", pod_name=pod_name))
        return SavedState(state=MonitorState()) if row is None else _saved_state(row)

    async def save(self, pod_name: str, saved: SavedState) -> None:
        """Replace the pod's saved state."""
        await self._pool.execute(
            *_Q.bind(
                "save_state",
                pod_name=pod_name,
                state=json.dumps(saved.state.to_dict()),
                last_signal=saved.last_signal,
                last_signal_pod_id=saved.last_signal_pod_id,
                last_tick_at=saved.last_tick_at,
                ticked_by=saved.ticked_by,
            )
        )

    async def save_requests(
        self, pod_name: str, reporter: str, *, in_flight: int, events: int, live_seconds: float
    ) -> None:
        """Record one gateway replica's counts for the pod (policy/idle/request_activity)."""
        await self._pool.execute(
            *_Q.bind(
                "save_requests",
                pod_name=pod_name,
                reporter=reporter,
                in_flight=in_flight,
                events=events,
                live_seconds=live_seconds,
            )
        )

    async def load_requests(self, pod_name: str) -> RequestCounts:
        """Every gateway replica's counts for the pod; zeros when none ever reported."""
        async with borrow(self._pool) as connection:
            row = await connection.fetchrow(*_Q.bind("load_requests", pod_name=pod_name))
        assert row is not None  # an aggregate always answers one row
        return RequestCounts(in_flight=row["in_flight"], events=row["events"])


def _saved_state(row: asyncpg.Record) -> SavedState:
    return SavedState(
        state=MonitorState.from_dict(json.loads(row["state"])),
        last_signal=row["last_signal"],
        last_signal_pod_id=row["last_signal_pod_id"],
        last_tick_at=row["last_tick_at"],
        ticked_by=row["ticked_by"],
    )
