"""The pool dispatcher's SQL blocks as the tests read them: every named block of every `.sql` file of the service,
wherever the repository keeps them, so a test that must cover every block of a kind finds each one."""

from __future__ import annotations

from pathlib import Path

from thermostat.store.sql import load_sql

POOL_SQL = Path(__file__).resolve().parents[3] / "services" / "thermostat" / "pool_dispatcher"


def pool_blocks() -> dict[str, str]:
    """Every named block of every `.sql` file of the pool dispatcher (a name defined twice fails)."""
    blocks: dict[str, str] = {}
    for path in sorted(POOL_SQL.rglob("*.sql")):
        for name, sql in load_sql(path).items():
            assert name not in blocks, f"block {name!r} is defined in two pool SQL files"
            blocks[name] = sql
    return blocks


def statement(sql: str) -> str:
    """A block's statement without its comment lines."""
    return "\n".join(line for line in sql.splitlines() if not line.lstrip().startswith("--"))
