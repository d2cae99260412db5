"""Which warm machine takes a submitted job: one rule, written once, in the `submit` statement (repository/jobs.sql).

The choice is made inside the statement that inserts the job (the claim and the machine's row lock are one step),
so that statement is the rule, run here on real Postgres against its table: only a machine of the job's own tenant
(one tenant per machine for its life, seed: Isolation), of the job's type, on the type's current image (an
old-image machine takes no new work), and warm (a busy machine runs one job at a time and a starting one is not
yet trusted with anything). Among those: the machine that last ran the job's session first (its caches and loaded
state are that session's), then the most recently active one (`last_active_at`: the least recently used are the
first to cool down and go, so concentrating work keeps the fleet small), then the id, so every process picks the
same machine. (Before issue 22 a Python copy of this rule, ordering by `idle_since`, had no runtime caller.)
"""

from __future__ import annotations

import uuid

import asyncpg
import pytest

from tests.integration.pool_dispatcher.pool_sql import pool_blocks, submit_args

BLOCKS = pool_blocks()
ME = ("me", 3)
CURRENT_IMAGE = "worker:v1"


def machine(
    name: str,
    state: str = "warm",
    *,
    active: float | None = 0.0,
    session: str | None = None,
    tenant: str = "acme",
    machine_type: str = "cpu",
    image: str = CURRENT_IMAGE,
) -> dict[str, object]:
    """A machine row; `active` is when it was last active, in seconds after a fixed instant (None: never)."""
    return {
        "name": name,
        "state": state,
        "active": active,
        "session": session,
        "tenant": tenant,
        "type": machine_type,
        "image": image,
    }


def _id(name: str) -> uuid.UUID:
    return uuid.UUID(int=ord(name))  # ids sort as their names do


@pytest.mark.parametrize(
    ("machines", "session", "chosen"),
    [
        pytest.param([], None, None, id="no-machine"),
        pytest.param([machine("m")], None, "m", id="warm-machine-chosen"),
        pytest.param([machine("m", "busy")], None, None, id="busy-machine-never-chosen"),
        pytest.param([machine("m", "starting")], None, None, id="starting-machine-not-trusted-yet"),
        pytest.param([machine("m", "stopping")], None, None, id="stopping-machine-never-chosen"),
        pytest.param([machine("m", tenant="other")], None, None, id="another-tenants-machine-never-chosen"),
        pytest.param([machine("m", machine_type="gpu")], None, None, id="another-types-machine-never-chosen"),
        pytest.param([machine("m", image="worker:v0")], None, None, id="stale-image-machine-never-chosen"),
        pytest.param(
            [machine("a", active=10), machine("b", active=20, session="s1")], "s1", "b", id="session-affinity-first"
        ),
        pytest.param(
            [machine("a", active=20), machine("b", active=10, session="s1")], "s1", "b", id="affinity-beats-recency"
        ),
        pytest.param([machine("a", active=10), machine("b", active=20)], None, "b", id="most-recently-active-next"),
        pytest.param(
            [machine("a", active=10), machine("b", active=20, session="s2")],
            "s1",
            "b",
            id="no-affine-machine-falls-back-to-recency",
        ),
        pytest.param(
            [machine("b", "busy", session="s1"), machine("a")], "s1", "a", id="busy-affine-machine-not-waited-for"
        ),
        pytest.param(
            [machine("a", active=20), machine("b", active=10, session="s2")],
            "s1",
            "a",
            id="a-machine-with-no-session-is-as-unaffine-as-another-sessions",
        ),
        pytest.param([machine("b"), machine("a")], None, "a", id="id-breaks-a-tie"),
        pytest.param([machine("a", active=None), machine("b", active=5)], None, "b", id="never-active-machine-last"),
    ],
)
async def test_warm_machine_choice(
    db_pool: asyncpg.Pool, machines: list[dict[str, object]], session: str | None, chosen: str | None
) -> None:
    """A job goes to its tenant's warm machine of its type on the current image, affinity then recency."""
    async with db_pool.acquire() as conn:
        for m in machines:
            await conn.execute(
                "INSERT INTO pool_machines (id, tenant_id, machine_type, image, backend, token, state, session_id,"
                " job_id, owner, owner_term, cool_down_seconds, last_active_at)"
                " VALUES ($1, $2, $3, $4, 'local', 'tok', $5, $6, $7, $8, $9, 60,"
                " timestamptz '2026-01-01 00:00:00+00' + make_interval(secs => $10))",
                _id(str(m["name"])),
                m["tenant"],
                m["type"],
                m["image"],
                m["state"],
                m["session"],
                uuid.uuid4() if m["state"] == "busy" else None,
                *ME,
                m["active"],
            )
        args = submit_args(job_id=uuid.uuid4(), tenant_id="acme", image=CURRENT_IMAGE, session_id=session, owner=ME)
        row = await conn.fetchrow(*BLOCKS.bind("submit", **args))
    names = {_id(str(m["name"])): m["name"] for m in machines}
    assert (None if row["worker_id"] is None else names[row["worker_id"]]) == chosen
