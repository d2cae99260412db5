"""The durable records: billable actions (#2050), readiness and measured boots.

Writing a record never blocks or fails the action it records: each write is capped in time, and a write
that fails (a store blip) logs the full entry at ERROR — a level nothing filters — so the money-relevant
fact survives in the logs instead (#2050: the billable lines had rotated out of kubectl logs in minutes).
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import asyncpg

from thermostat.policy.wake.wake_eta import BootRecord
from thermostat.store.sql import load_sql

log = logging.getLogger("thermostat.pod_controller.records")
Q = load_sql(Path(__file__).with_name("queries.sql"))


@dataclass(frozen=True, slots=True, kw_only=True)
class ActionEntry:
    """ActionEntry is one billable call: Start, Create, Terminate or Stop, accepted (ok) or refused."""

    pod_name: str
    action: str
    pod_id: str
    ok: bool
    trigger: str
    http_status: int | None = None
    gpu_id: str | None = None
    price_per_hour: float | None = None
    detail: str | None = None
    stop_id: uuid.UUID | None = None


class PodRecords:
    def __init__(self, pool: asyncpg.Pool, *, timeout: float = 10.0) -> None:
        self.pool = pool
        self.timeout = timeout

    async def record_action(self, entry: ActionEntry) -> None:
        """Append a billable action; on failure log it whole at ERROR and carry on."""
        log.info(
            "billable %s pod=%s ok=%s gpu=%s price=%s status=%s trigger=%s", entry.action, entry.pod_id, entry.ok,
            entry.gpu_id, entry.price_per_hour, entry.http_status, entry.trigger,
        )
        try:
            # shielded: an action issued during shutdown or by a cancelled caller is still recorded
            await asyncio.shield(asyncio.wait_for(self.pool.execute(
                Q["insert_action"], uuid.uuid4(), entry.pod_name, entry.action, entry.pod_id, entry.gpu_id,
                entry.price_per_hour, entry.http_status, entry.ok, entry.trigger, entry.detail, entry.stop_id,
            ), self.timeout))
        except Exception as error:
            log.error("billable action NOT persisted (%s): %s", type(error).__name__,
                      json.dumps(asdict(entry), default=str))

    async def begin_stop(self, pod_name: str, trigger: str) -> uuid.UUID | None:
        """Write that a stop is issued, ordered against the pod's wakes; None when the store refused (the stop
        goes ahead all the same, and its Stop record then orders it)."""
        stop_id = uuid.uuid4()

        async def write() -> None:
            async with self.pool.acquire() as conn, conn.transaction():
                await conn.execute(Q["pod_order_lock"], pod_name)
                await conn.execute(Q["begin_stop"], stop_id, pod_name, trigger)

        try:
            await asyncio.shield(asyncio.wait_for(write(), self.timeout))
        except Exception as error:
            log.error("pod %s: %s stop issued, NOT written before the call (%s)", pod_name, trigger,
                      type(error).__name__)
            return None
        return stop_id

    async def settle_stop(self, stop_id: uuid.UUID, accepted_pod_ids: list[str]) -> None:
        """Write that a stop's answers are all in: a wake waiting on it goes on."""
        try:
            await asyncio.shield(asyncio.wait_for(
                self.pool.execute(Q["settle_stop"], stop_id, accepted_pod_ids), self.timeout))
        except Exception as error:
            # a wake waiting on it waits out the settle bound instead
            log.error("stop %s: settlement NOT written (%s); accepted: %s", stop_id, type(error).__name__,
                      ", ".join(accepted_pod_ids) or "none")

    async def set_readiness(self, pod_name: str, pod_id: str, ready_since: datetime) -> bool:
        """Publish readiness; True when it changed (then the boot it ends is measured)."""
        async with self.pool.acquire() as conn, conn.transaction():
            changed = await conn.fetchval(Q["set_readiness"], pod_name, pod_id, ready_since)
            if changed:
                wake = await conn.fetchrow(Q["latest_wake_before"], pod_name, ready_since, pod_id)
                if wake is not None:
                    duration = (ready_since - wake["requested_at"]).total_seconds()
                    if duration >= 0:
                        gpu_id = wake["gpu_id"] or await conn.fetchval(Q["created_gpu"], pod_name, pod_id) or ""
                        await conn.execute(Q["insert_boot"], pod_name, pod_id, gpu_id, wake["attempt_id"],
                                           ready_since, duration)
            return bool(changed)

    async def clear_readiness(self, pod_name: str, pod_id: str | None = None) -> None:
        await self.pool.execute(Q["clear_readiness"], pod_name, pod_id)

    async def readiness(self, pod_name: str, pod_id: str) -> datetime | None:
        """When the monitor first saw this pod's vLLM answer since it came up; None while not ready."""
        ready: datetime | None = await self.pool.fetchval(Q["readiness"], pod_name, pod_id)
        return ready

    async def recent_boots(self, pod_name: str, limit: int = 50) -> list[BootRecord]:
        """The pod's measured wake → ready durations, oldest first (the ETA policy picks what predicts)."""
        rows = await self.pool.fetch(Q["recent_boots"], pod_name, limit)
        return [BootRecord(gpu_id=r["gpu_id"] or None, wake_to_ready_seconds=float(r["duration_seconds"]))
                for r in reversed(rows)]

    async def newest_wake(self, pod_name: str) -> asyncpg.Record | None:
        return await self.pool.fetchrow(Q["newest_wake"], pod_name)

    async def history_page(
        self, pod_name: str, *, before: tuple[datetime, str] | None, limit: int
    ) -> list[dict[str, Any]]:
        at, id_ = before if before else (None, None)
        rows = await self.pool.fetch(Q["history_page"], pod_name, at, id_, limit)
        return [{"kind": r["kind"], "at": r["at"], "id": r["id"], "row": json.loads(r["row"])} for r in rows]
