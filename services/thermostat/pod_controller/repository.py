"""The pod controller's one door to Postgres: every query it runs, each returning frozen values (style 13).

It owns queries.sql. The records it writes — billable actions (#2050), stops, wakes, readiness, measured
boots — never block or fail the action they record: each write is capped in time, and a write that fails
(a store blip) logs the full entry at ERROR — a level nothing filters — so the money-relevant fact survives
in the logs instead (#2050: the billable lines had rotated out of kubectl logs in minutes).

Every statement runs on a connection borrowed so that its deadline holds (store/connections.py): reads on a
read path (GET, WatchPod, history) within `read_timeout`, so a frozen store costs a GET that much and no
more — the first request after a freeze included — and every other statement within `timeout`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass, fields
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import Any, TypeVar

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from thermostat.policy.wake.readiness_fence import readiness_report_stands
from thermostat.policy.wake.stop_order import StopEntry
from thermostat.policy.wake.wake_eta import BootRecord
from thermostat.policy.wake.wake_result import WakeFailureKind, WakeOutcome, WakeResult
from thermostat.store.connections import borrow
from thermostat.store.shared_flight import InFlight, Stored
from thermostat.store.sql import load_sql

log = logging.getLogger("thermostat.pod_controller.records")
Q = load_sql(Path(__file__).with_name("queries.sql"))

T = TypeVar("T")


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


@dataclass(frozen=True, slots=True, kw_only=True)
class ActionRow:
    """ActionRow is a billable action as recorded: the entry, its id and when it was written."""

    id: str
    at: datetime
    pod_name: str
    action: str
    pod_id: str
    ok: bool
    trigger: str
    http_status: int | None = None
    gpu_id: str | None = None
    price_per_hour: float | None = None
    detail: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class WakeRow:
    """WakeRow is one wake in the history: requested, and completed with its outcome once it ended."""

    attempt_id: str
    pod_name: str
    requested_at: datetime
    completed_at: datetime | None = None
    outcome: str | None = None
    wake_outcome: str | None = None
    reason: str | None = None
    pod_id: str | None = None
    gpu_id: str | None = None
    price_per_hour: float | None = None
    candidates_considered: int | None = None
    last_provider_status: int | None = None
    trigger: str = "wake"


@dataclass(frozen=True, slots=True, kw_only=True)
class HistoryEntry:
    """HistoryEntry is one line of a pod's history, newest first; (at, id) is its place in the pages."""

    at: datetime
    id: str
    entry: ActionRow | WakeRow


@dataclass(frozen=True, slots=True, kw_only=True)
class WakeCompletion:
    """WakeCompletion is what the history keeps of a wake that ended (pod-control seed: PodWakeCompleted)."""

    outcome: str
    wake_outcome: str
    reason: str
    pod_id: str | None = None
    gpu_id: str | None = None
    price_per_hour: float | None = None
    candidates_considered: int | None = None
    last_provider_status: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class StopsAround:
    """StopsAround is the pod's stops a wake answers to, with the database's clock when they were read."""

    now: datetime
    stops: tuple[StopEntry, ...]


class ReadinessOutcome(StrEnum):
    WRITTEN = "written"
    UNCHANGED = "unchanged"
    # the report was about a process that ended: RunPod accepted an action of the pod since its observe
    REFUSED = "refused"


@dataclass(frozen=True, slots=True, kw_only=True)
class ReadinessWrite:
    """ReadinessWrite is what a readiness publish did, and the pod's incarnation on record when it was checked."""

    outcome: ReadinessOutcome
    on_record: int


class WakeResultCodec:
    """A wake's result as stored with its row, for callers joining from another replica: the WakeResult's
    fields by name, enums by value."""

    def encode(self, value: WakeResult) -> str:
        return json.dumps(asdict(value))

    def decode(self, text: str) -> WakeResult:
        data: dict[str, Any] = json.loads(text)
        known = {f.name: data[f.name] for f in fields(WakeResult) if f.name in data}
        known["outcome"] = WakeOutcome(known["outcome"])
        if known.get("failure_kind") is not None:
            known["failure_kind"] = WakeFailureKind(known["failure_kind"])
        return WakeResult(**known)


WAKE_RESULTS = WakeResultCodec()


class PodRepository:
    """Every query of the pod controller; its wake rows are the `FlightRows` of the wakes' shared flight."""

    def __init__(self, pool: asyncpg.Pool, *, timeout: float = 10.0, read_timeout: float = 1.5) -> None:
        self._pool = pool
        self.timeout = timeout
        self.read_timeout = read_timeout

    async def _run(self, statement: Callable[[PoolConnectionProxy], Awaitable[T]], timeout: float) -> T:
        async with asyncio.timeout(timeout), borrow(self._pool) as connection:
            return await statement(connection)

    async def _read(self, statement: Callable[[PoolConnectionProxy], Awaitable[T]]) -> T:
        return await self._run(statement, self.read_timeout)

    # ---- billable actions and stops

    async def record_action(self, entry: ActionEntry) -> None:
        """Append a billable action; on failure log it whole at ERROR and carry on."""
        log.info(
            "billable %s pod=%s ok=%s gpu=%s price=%s status=%s trigger=%s",
            entry.action,
            entry.pod_id,
            entry.ok,
            entry.gpu_id,
            entry.price_per_hour,
            entry.http_status,
            entry.trigger,
        )
        try:
            # shielded: an action issued during shutdown or by a cancelled caller is still recorded
            await asyncio.shield(self._run(lambda c: self._insert_action(c, entry), self.timeout))
        except Exception as error:
            log.error(
                "billable action NOT persisted (%s): %s", type(error).__name__, json.dumps(asdict(entry), default=str)
            )

    @staticmethod
    async def _insert_action(conn: PoolConnectionProxy, entry: ActionEntry) -> None:
        async with conn.transaction():
            await conn.execute(*Q.bind("feed_lock"))
            # the entry's fields are the statement's parameters, by name
            await conn.execute(*Q.bind("insert_action", id=uuid.uuid4(), **asdict(entry)))

    async def billing_pod_ids(self, pod_name: str) -> list[str]:
        """The pods of the name the record bills (policy/wake/pod_gone.py)."""
        rows = await self._read(lambda c: c.fetch(*Q.bind("billing_pod_ids", pod_name=pod_name)))
        return [str(r["pod_id"]) for r in rows]

    async def record_gone(self, pod_name: str, pod_id: str, detail: str) -> bool:
        """Record the pod confirmed gone, once; False when its billing was already closed on record."""

        async def write(conn: PoolConnectionProxy) -> bool:
            async with conn.transaction():
                await conn.execute(*Q.bind("feed_lock"))
                gone = Q.bind("insert_gone", id=uuid.uuid4(), pod_name=pod_name, pod_id=pod_id, detail=detail)
                return await conn.fetchval(*gone) is not None

        return await asyncio.shield(self._run(write, self.timeout))

    async def billable_actions(self, after_position: int, limit: int) -> tuple[list[tuple[int, ActionRow]], int]:
        """The feed: actions after `after_position` in position order, and the newest position (its head)."""

        async def read(conn: PoolConnectionProxy) -> tuple[list[tuple[int, ActionRow]], int]:
            # head first: every row read below it is at or before it, so the head never trails the page
            head: int = await conn.fetchval(*Q.bind("billable_head"))
            rows = await conn.fetch(*Q.bind("billable_actions_after", after=after_position, limit=limit))
            return [(r["position"], _action_row(dict(r))) for r in rows], max(head, rows[-1]["position"] if rows else 0)

        return await self._run(read, self.timeout)

    async def begin_stop(self, pod_name: str, trigger: str) -> uuid.UUID | None:
        """Write that a stop is issued, ordered against the pod's wakes; None when the store refused (the stop
        goes ahead all the same, and its Stop record then orders it)."""
        stop_id = uuid.uuid4()

        async def write(conn: PoolConnectionProxy) -> None:
            async with conn.transaction():
                await conn.execute(*Q.bind("pod_order_lock", pod_name=pod_name))
                await conn.execute(*Q.bind("begin_stop", stop_id=stop_id, pod_name=pod_name, trigger=trigger))

        try:
            await asyncio.shield(self._run(write, self.timeout))
        except Exception as error:
            log.error(
                "pod %s: %s stop issued, NOT written before the call (%s)", pod_name, trigger, type(error).__name__
            )
            return None
        return stop_id

    async def settle_stop(self, stop_id: uuid.UUID, accepted_pod_ids: list[str]) -> None:
        """Write that a stop's answers are all in: a wake waiting on it goes on."""
        try:
            await asyncio.shield(
                self._run(
                    lambda c: c.execute(*Q.bind("settle_stop", stop_id=stop_id, accepted_pod_ids=accepted_pod_ids)),
                    self.timeout,
                )
            )
        except Exception as error:
            # a wake waiting on it waits out the settle bound instead
            log.error(
                "stop %s: settlement NOT written (%s); accepted: %s",
                stop_id,
                type(error).__name__,
                ", ".join(accepted_pod_ids) or "none",
            )

    async def stops_around(self, pod_name: str, requested_at: datetime, settle_seconds: float) -> StopsAround | None:
        """The stops a wake requested at `requested_at` answers to; None when there are none."""
        around = Q.bind(
            "stops_around_wake", pod_name=pod_name, requested_at=requested_at, settle_seconds=settle_seconds
        )
        rows = await self._run(lambda c: c.fetch(*around), self.timeout)
        if not rows:
            return None
        return StopsAround(
            now=rows[0]["now"],
            stops=tuple(
                StopEntry(
                    issued_at=r["issued_at"],
                    trigger=r["trigger"],
                    settled=r["settled"],
                    accepted_pod_ids=tuple(r["accepted_pod_ids"]),
                )
                for r in rows
            ),
        )

    # ---- wakes

    async def db_now(self) -> datetime:
        """The database's clock: what wakes and stops are ordered by. Bounded as a read: a wake asked while
        the store does not answer is refused before anything is written."""
        now: datetime = await self._read(lambda c: c.fetchval(*Q.bind("db_now")))
        return now

    async def last_accepted_action(self, pod_name: str, pod_id: str) -> str | None:
        """The last billable call RunPod accepted naming `pod_id` (None: none on record)."""
        action: str | None = await self._run(
            lambda c: c.fetchval(*Q.bind("last_accepted_action", pod_name=pod_name, pod_id=pod_id)), self.timeout
        )
        return action

    async def last_rate(self, pod_name: str, pod_id: str) -> float | None:
        """The newest rate (USD/h) on record for `pod_id`, the one metering prices its next start at."""
        rate: float | None = await self._run(
            lambda c: c.fetchval(*Q.bind("last_rate", pod_name=pod_name, pod_id=pod_id)), self.timeout
        )
        return rate

    async def abandon_wakes(self, pod_name: str) -> list[uuid.UUID]:
        """Close the pod's wakes left open by a replica that stopped; their attempt ids."""
        rows = await self._run(lambda c: c.fetch(*Q.bind("abandon_wakes", pod_name=pod_name)), self.timeout)
        return [r["attempt_id"] for r in rows]

    async def insert_wake(self, attempt: uuid.UUID, pod_name: str, holder: str, trigger: str = "wake") -> datetime:
        """Write the Requested row with what asked for it, stamped under the pod's order lock; when it was
        requested."""

        async def write(conn: PoolConnectionProxy) -> datetime:
            async with conn.transaction():
                await conn.execute(*Q.bind("pod_order_lock", pod_name=pod_name))
                requested_at: datetime = await conn.fetchval(
                    *Q.bind("insert_wake", attempt_id=attempt, pod_name=pod_name, holder=holder, trigger=trigger)
                )
                return requested_at

        return await self._run(write, self.timeout)

    async def complete_wake(self, attempt: uuid.UUID, completion: WakeCompletion, result: WakeResult | None) -> bool:
        """Close the wake's row with its outcome and its callers' result; False when no open row was there."""
        encoded = WAKE_RESULTS.encode(result) if result is not None else None
        complete = Q.bind("complete_wake", attempt_id=attempt, result=encoded, **asdict(completion))
        status = await self._run(lambda conn: conn.execute(*complete), self.timeout)
        return bool(status != "UPDATE 0")

    async def completed_since(self, pod_name: str, arrival: datetime) -> WakeResult | None:
        """The result of a wake of the pod that completed at or after `arrival`."""
        row = await self._run(
            lambda c: c.fetchrow(*Q.bind("wake_completed_since", pod_name=pod_name, arrival=arrival)), self.timeout
        )
        return WAKE_RESULTS.decode(row["result"]) if row is not None and row["result"] is not None else None

    async def in_flight(self, pod_name: str) -> InFlight | None:
        """The pod's wake some replica runs now (its row is open)."""
        row = await self._run(lambda c: c.fetchrow(*Q.bind("in_flight_wake", pod_name=pod_name)), self.timeout)
        return InFlight(flight_id=row["attempt_id"], holder=row["holder"]) if row is not None else None

    async def stored(self, attempt: uuid.UUID) -> Stored[WakeResult]:
        """A wake's row as a joiner polls it: completed yet, and the result its callers got."""
        row = await self._run(lambda c: c.fetchrow(*Q.bind("wake_result", attempt_id=attempt)), self.timeout)
        if row is None or row["completed_at"] is None:
            return Stored(completed=False)
        return Stored(completed=True, result=WAKE_RESULTS.decode(row["result"]) if row["result"] else None)

    async def newest_wake(self, pod_name: str) -> WakeRow | None:
        row = await self._read(lambda c: c.fetchrow(*Q.bind("newest_wake", pod_name=pod_name)))
        return _wake_row(dict(row)) if row is not None else None

    # ---- readiness and boots

    async def set_readiness(
        self, pod_name: str, pod_id: str, ready_since: datetime, incarnation: int | None
    ) -> ReadinessWrite:
        """Publish readiness observed at `incarnation` unless the pod's process ended since (readiness_fence);
        when it changed, the boot it ends is measured."""

        async def write(conn: PoolConnectionProxy) -> ReadinessWrite:
            async with conn.transaction():
                # Actions are inserted under the feed lock: holding it, no accepted stop or start of the pod can
                # commit between the check and the write, and one that committed before is read below. (Without
                # it a stop committing meanwhile, and its readiness clear running before this write commits,
                # would leave the stale readiness in place.)
                await conn.execute(*Q.bind("feed_lock"))
                on_record = await conn.fetchval(*Q.bind("incarnation", pod_name=pod_name, pod_id=pod_id))
                if not readiness_report_stands(incarnation, on_record):
                    return ReadinessWrite(outcome=ReadinessOutcome.REFUSED, on_record=on_record)
                changed = await conn.fetchval(
                    *Q.bind("set_readiness", pod_name=pod_name, pod_id=pod_id, ready_since=ready_since)
                )
                if changed:
                    wake = await conn.fetchrow(
                        *Q.bind("latest_wake_before", pod_name=pod_name, ready_since=ready_since, pod_id=pod_id)
                    )
                    if wake is not None:
                        duration = (ready_since - wake["requested_at"]).total_seconds()
                        if duration >= 0:
                            created = Q.bind("created_gpu", pod_name=pod_name, pod_id=pod_id)
                            gpu_id = wake["gpu_id"] or await conn.fetchval(*created) or ""
                            await conn.execute(
                                *Q.bind(
                                    "insert_boot",
                                    pod_name=pod_name,
                                    pod_id=pod_id,
                                    gpu_id=gpu_id,
                                    attempt_id=wake["attempt_id"],
                                    ready_at=ready_since,
                                    duration_seconds=duration,
                                )
                            )
                return ReadinessWrite(
                    outcome=ReadinessOutcome.WRITTEN if changed else ReadinessOutcome.UNCHANGED, on_record=on_record
                )

        return await self._run(write, self.timeout)

    async def clear_readiness(self, pod_name: str, pod_id: str | None = None) -> None:
        await self._run(lambda c: c.execute(*Q.bind("clear_readiness", pod_name=pod_name, pod_id=pod_id)), self.timeout)

    async def readiness(self, pod_name: str, pod_id: str) -> datetime | None:
        """When the monitor first saw this pod's vLLM answer since it came up; None while not ready."""
        ready: datetime | None = await self._read(
            lambda c: c.fetchval(*Q.bind("readiness", pod_name=pod_name, pod_id=pod_id))
        )
        return ready

    async def incarnations(self, pod_name: str, pod_ids: Sequence[str]) -> dict[str, int]:
        """Per pod id, the position of its newest accepted start, create, stop or terminate; 0 for none."""
        rows = await self._read(lambda c: c.fetch(*Q.bind("incarnations", pod_name=pod_name, pod_ids=list(pod_ids))))
        found = {str(r["pod_id"]): int(r["incarnation"]) for r in rows}
        return {pod_id: found.get(pod_id, 0) for pod_id in pod_ids}

    async def recent_boots(self, pod_name: str, limit: int = 50) -> list[BootRecord]:
        """The pod's measured wake → ready durations, oldest first (the ETA policy picks what predicts)."""
        rows = await self._read(lambda c: c.fetch(*Q.bind("recent_boots", pod_name=pod_name, limit=limit)))
        return [
            BootRecord(gpu_id=r["gpu_id"] or None, wake_to_ready_seconds=float(r["duration_seconds"]))
            for r in reversed(rows)
        ]

    async def known_pod_names(self) -> frozenset[str]:
        """Every pod name the store holds an action of (a pod configured once; the orphan sweep's names)."""
        rows = await self._run(lambda c: c.fetch(*Q.bind("known_pod_names")), self.timeout)
        return frozenset(r["pod_name"] for r in rows)

    # ---- history

    async def history_page(
        self, pod_name: str, *, before: tuple[datetime, str] | None, limit: int
    ) -> list[HistoryEntry]:
        at, id_ = before if before else (None, None)
        page = Q.bind("history_page", pod_name=pod_name, before_at=at, before_id=id_, limit=limit)
        rows = await self._read(lambda c: c.fetch(*page))
        return [
            HistoryEntry(
                at=r["at"],
                id=r["id"],
                entry=_action_row(json.loads(r["row"])) if r["kind"] == "action" else _wake_row(json.loads(r["row"])),
            )
            for r in rows
        ]


def _moment(value: object) -> datetime | None:
    """A timestamp read from a row: JSON carries it as ISO text, a column as a datetime."""
    if value is None or isinstance(value, datetime):
        return value
    return datetime.fromisoformat(str(value))


def _wake_row(row: dict[str, Any]) -> WakeRow:
    requested_at = _moment(row["requested_at"])
    assert requested_at is not None
    return WakeRow(
        attempt_id=str(row["attempt_id"]),
        pod_name=row["pod_name"],
        requested_at=requested_at,
        completed_at=_moment(row.get("completed_at")),
        outcome=row.get("outcome"),
        wake_outcome=row.get("wake_outcome"),
        reason=row.get("reason"),
        pod_id=row.get("pod_id"),
        gpu_id=row.get("gpu_id"),
        price_per_hour=row.get("price_per_hour"),
        candidates_considered=row.get("candidates_considered"),
        last_provider_status=row.get("last_provider_status"),
        trigger=row.get("trigger") or "wake",
    )


def _action_row(row: dict[str, Any]) -> ActionRow:
    at = _moment(row["at"])
    assert at is not None
    return ActionRow(
        id=str(row["id"]),
        at=at,
        pod_name=row["pod_name"],
        action=row["action"],
        pod_id=row["pod_id"],
        ok=bool(row["ok"]),
        trigger=row["trigger"],
        http_status=row.get("http_status"),
        gpu_id=row.get("gpu_id"),
        price_per_hour=row.get("price_per_hour"),
        detail=row.get("detail"),
    )
