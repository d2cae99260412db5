"""The pool's machines in Postgres (machines.sql): placement's lock and counts, a machine's insert, boot, ready,
retire and stop, its health misses, and the reads of the fleet.

Every statement that writes an owned row takes the process's `Owner` (instance id and lease term) and matches both.
Placement's statements (`lock_placement`, `demand`, `fleet`, `insert_machine`) run in one transaction the caller
holds, on its connection. The machine token is read only where a worker call needs it.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from pathlib import Path

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from thermostat.store.connections import borrow
from thermostat.store.sql import load_sql

from .values import (
    Assignment,
    Demand,
    FleetMachine,
    MachineHold,
    Owner,
    OwnMachine,
    StartingMachine,
    WorkerView,
    one,
    text,
    trace_of,
)

Conn = asyncpg.Connection | PoolConnectionProxy
Q = load_sql(Path(__file__).with_name("machines.sql"))

PLACEMENT_LOCK = "lock_placement"


class MachineRepository:
    """The pool_machines rows (and the orphan stops the sweep records)."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def machine_address(self, machine_id: str) -> tuple[str | None, str] | None:
        async with borrow(self.pool) as c:
            row = await c.fetchrow(*Q.bind("machine_address", machine_id=uuid.UUID(machine_id)))
        return None if row is None else (row["endpoint"], row["token"])

    async def lock_placement(self, c: Conn) -> None:
        await c.execute(*Q.bind(PLACEMENT_LOCK))

    async def demand(self, c: Conn) -> list[Demand]:
        rows = await c.fetch(*Q.bind("demand"))
        return [Demand.from_row(r) for r in rows]

    async def fleet(self, c: Conn | None = None) -> list[FleetMachine]:
        if c is None:
            async with borrow(self.pool) as own:
                rows = await own.fetch(*Q.bind("fleet"))
        else:
            rows = await c.fetch(*Q.bind("fleet"))
        return [FleetMachine.from_row(r) for r in rows]

    async def insert_machine(
        self,
        c: Conn,
        *,
        machine_id: str,
        tenant_id: str,
        machine_type: str,
        image: str,
        backend: str,
        token: str,
        owner: Owner,
        cool_down_seconds: float,
        assign_job: bool,
    ) -> tuple[str | None, dict[str, str]]:
        """Insert a starting machine; returns the id of the queued job assigned to it, if any, and its trace."""
        row = one(
            await c.fetchrow(
                *Q.bind(
                    "insert_machine",
                    machine_id=uuid.UUID(machine_id),
                    tenant_id=tenant_id,
                    machine_type=machine_type,
                    image=image,
                    backend=backend,
                    token=token,
                    assign_job=assign_job,
                    cool_down_seconds=cool_down_seconds,
                    **owner.params(),
                )
            )
        )
        return text(row["job_id"]), trace_of(row)

    async def record_started(
        self, machine_id: str, *, provider_id: str, endpoint: str, region: str | None, owner: Owner
    ) -> bool:
        async with borrow(self.pool) as c:
            started = Q.bind(
                "record_started",
                machine_id=uuid.UUID(machine_id),
                provider_id=provider_id,
                endpoint=endpoint,
                region=region,
                **owner.params(),
            )
            row = await c.fetchrow(*started)
        return row is not None

    async def machine_ready(self, machine_id: str, owner: Owner) -> tuple[str | None, Assignment | None]:
        async with borrow(self.pool) as c:
            row = await c.fetchrow(*Q.bind("machine_ready", machine_id=uuid.UUID(machine_id), **owner.params()))
        if row is None:
            return None, None
        return row["machine_state"], (None if row["id"] is None else Assignment.from_row(row, machine_id))

    async def boot_failed(self, machine_id: str, owner: Owner, reason: str) -> dict[str, str]:
        """Forget the machine; its dispatched job's new state by id (queued carrying `reason`, or failed: its
        type is gone)."""
        async with borrow(self.pool) as c:
            failed = Q.bind("boot_failed", machine_id=uuid.UUID(machine_id), reason=reason, **owner.params())
            rows = await c.fetch(*failed)
        return {str(r["id"]): r["state"] for r in rows}

    async def machine_hold(self, machine_id: str, owner: Owner) -> MachineHold | None:
        """The machine and its live job under this owner (None: the machine is no longer ours)."""
        async with borrow(self.pool) as c:
            row = await c.fetchrow(*Q.bind("machine_hold", machine_id=uuid.UUID(machine_id), **owner.params()))
        if row is None:
            return None
        return MachineHold.from_row(row, machine_id)

    async def known_machines(self) -> tuple[list[str], list[str]]:
        """(machine ids, provider ids) of every machine row, whichever process owns it."""
        async with borrow(self.pool) as c:
            rows = await c.fetch(*Q.bind("known_machines"))
        return [row["id"] for row in rows], [row["provider_id"] for row in rows if row["provider_id"] is not None]

    async def record_orphan_stop(
        self, *, backend: str, provider_id: str, name: str, machine_id: str, machine_type: str, stopped_by: str
    ) -> None:
        async with borrow(self.pool) as c:
            await c.execute(
                *Q.bind(
                    "record_orphan_stop",
                    backend=backend,
                    provider_id=provider_id,
                    name=name,
                    machine_id=uuid.UUID(machine_id),
                    stopped_by=stopped_by,
                    machine_type=machine_type,
                )
            )

    async def machine_backend(self, machine_id: str) -> str | None:
        async with borrow(self.pool) as c:
            backend: str | None = await c.fetchval(*Q.bind("machine_backend", machine_id=uuid.UUID(machine_id)))
        return backend

    async def retire(
        self, machine_id: str, owner: Owner, *, reason: str, states: Sequence[str] = ("warm",)
    ) -> tuple[bool, str | None]:
        """Set the machine stopping if it is in one of `states`; (retired, provider id)."""
        async with borrow(self.pool) as c:
            retire = Q.bind(
                "retire", machine_id=uuid.UUID(machine_id), reason=reason, states=list(states), **owner.params()
            )
            row = await c.fetchrow(*retire)
        return (False, None) if row is None else (True, row["provider_id"])

    async def yield_machine(
        self, c: Conn, machine_id: str, owner: Owner, *, to_tenant: str | None, mark_busy: bool, reason: str
    ) -> tuple[str | None, str | None]:
        """Retire a warm machine now (this process's to stop) or, with `mark_busy`, mark a busy one to give its slot
        to `to_tenant` after its job, in the caller's placement transaction; (its state after, provider id), or
        (None, None) when it was neither."""
        row = await c.fetchrow(
            *Q.bind(
                "yield_machine",
                machine_id=uuid.UUID(machine_id),
                to_tenant=to_tenant,
                mark_busy=mark_busy,
                reason=reason,
                **owner.params(),
            )
        )
        return (None, None) if row is None else (row["state"], row["provider_id"])

    async def record_turn(self, c: Conn, tenant_id: str) -> None:
        """The tenant was rotated out at the fleet cap: its wait for a slot begins now (pool_fair_turns)."""
        await c.execute(*Q.bind("record_turn", tenant_id=tenant_id))

    async def unyield(self, c: Conn, machine_ids: Sequence[str] | None) -> list[str]:
        """Clear the marks of these machines (None: of every machine); the ids cleared."""
        ids = None if machine_ids is None else [uuid.UUID(m) for m in machine_ids]
        rows = await c.fetch(*Q.bind("unyield", machine_ids=ids))
        return [str(r["id"]) for r in rows]

    async def stopping(self, owner: Owner) -> list[tuple[str, str | None]]:
        async with borrow(self.pool) as c:
            rows = await c.fetch(*Q.bind("stopping", **owner.params()))
        return [(str(r["id"]), r["provider_id"]) for r in rows]

    async def forget_machine(self, machine_id: str, owner: Owner) -> None:
        async with borrow(self.pool) as c:
            await c.execute(*Q.bind("forget_machine", machine_id=uuid.UUID(machine_id), **owner.params()))

    async def record_misses(self, misses: dict[str, int], owner: Owner) -> None:
        if not misses:
            return
        async with borrow(self.pool) as c:
            rows = [{"machine_id": uuid.UUID(m), "health_misses": n, **owner.params()} for m, n in misses.items()]
            await c.executemany(*Q.bind_many("record_misses", rows))

    async def own_machines(self, owner: Owner) -> list[OwnMachine]:
        async with borrow(self.pool) as c:
            rows = await c.fetch(*Q.bind("own_machines", **owner.params()))
        return [OwnMachine.from_row(r) for r in rows]

    async def starting_machines(self, owner: Owner) -> list[StartingMachine]:
        async with borrow(self.pool) as c:
            rows = await c.fetch(*Q.bind("starting_machines", **owner.params()))
        return [StartingMachine.from_row(r) for r in rows]

    async def list_workers(self, tenant_id: str | None) -> list[WorkerView]:
        async with borrow(self.pool) as c:
            rows = await c.fetch(*Q.bind("list_workers", tenant_id=tenant_id))
        return [WorkerView.from_row(r) for r in rows]

    async def machine_counts(self) -> dict[str, int]:
        async with borrow(self.pool) as c:
            rows = await c.fetch(*Q.bind("machine_counts"))
        return {r["state"]: r["machines"] for r in rows}

    async def machine_counts_by_backend(self) -> dict[tuple[str, str], int]:
        """Machines by (state, backend)."""
        async with borrow(self.pool) as c:
            rows = await c.fetch(*Q.bind("machine_counts_by_backend"))
        return {(r["state"], r["backend"]): r["machines"] for r in rows}
