"""The monitor's memory per pod in Postgres: the policy's MonitorState as JSON plus the last signal."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import asyncpg

from thermostat.policy.idle.monitor_state import MonitorState
from thermostat.store.sql import load_sql

Q = load_sql(Path(__file__).with_name("queries.sql"))


@dataclass(frozen=True, slots=True, kw_only=True)
class SavedState:
    state: MonitorState
    last_signal: str = ""
    last_signal_pod_id: str = ""
    last_tick_at: datetime | None = None


class MonitorStateStore:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def load(self, pod_name: str) -> SavedState:
        row = await self.pool.fetchrow(Q["load_state"], pod_name)
        if row is None:
            return SavedState(state=MonitorState())
        return SavedState(state=MonitorState.from_dict(json.loads(row["state"])), last_signal=row["last_signal"],
                          last_signal_pod_id=row["last_signal_pod_id"], last_tick_at=row["last_tick_at"])

    async def save(self, pod_name: str, saved: SavedState, ticked_by: str) -> None:
        await self.pool.execute(Q["save_state"], pod_name, json.dumps(saved.state.to_dict()), saved.last_signal,
                                saved.last_signal_pod_id, saved.last_tick_at, ticked_by)
