"""The pool dispatcher's SQL blocks as the tests read them: every named block of every `.sql` file of the service,
wherever the repository keeps them, so a test that must cover every block of a kind finds each one. They are
called as the repositories call them, by keyword (`BLOCKS.bind("take_next", machine_id=..., ...)`)."""

from __future__ import annotations

from pathlib import Path

from thermostat.store.sql import SqlBlocks, Statement, load_sql

POOL_SQL = Path(__file__).resolve().parents[3] / "services" / "thermostat" / "pool_dispatcher"


def pool_blocks() -> SqlBlocks:
    """Every named block of every `.sql` file of the pool dispatcher (a name defined twice fails)."""
    statements: dict[str, Statement] = {}
    for path in sorted(POOL_SQL.rglob("*.sql")):
        blocks = load_sql(path)
        for name in blocks:
            assert name not in statements, f"block {name!r} is defined in two pool SQL files"
            statements[name] = blocks.statement(name)
    return SqlBlocks("the pool dispatcher's SQL", statements)


def owned(owner: tuple[str, int]) -> dict[str, object]:
    """An (instance, term) pair as the `:owner` and `:owner_term` of a statement."""
    return {"owner": owner[0], "owner_term": owner[1]}


def submit_args(
    *,
    job_id: object,
    owner: tuple[str, int],
    tenant_id: str = "t",
    image: str = "img",
    priority: int = 0,
    session_id: str | None = None,
    send_now: bool = True,
) -> dict[str, object]:
    """A submit's parameters as the tests call it: a 30-second cpu job, no trace and no sync wait, counting the queue
    ahead of it up to 10."""
    return {
        "job_id": job_id,
        "tenant_id": tenant_id,
        "machine_type": "cpu",
        "image": image,
        "priority": priority,
        "session_id": session_id,
        "timeout_seconds": 30.0,
        "payload": b"p",
        "traceparent": None,
        "tracestate": None,
        "send_now": send_now,
        "done_channel": None,
        "count_queued": 10,
        **owned(owner),
    }


def statement(sql: str) -> str:
    """A block's statement without its comment lines."""
    return "\n".join(line for line in sql.splitlines() if not line.lstrip().startswith("--"))
