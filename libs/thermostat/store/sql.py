"""Named SQL blocks: queries live in `.sql` files, each block under a `-- name: block_name` header.

Keeping SQL in SQL files lets a reader (and an editor, and `psql`) see each statement whole, and keeps the
Python modules about what the statements mean. A file is parsed once, when a module loads it; asking for a
block the file does not have is a KeyError naming both, so a typo fails at the first call in any test.

    -- name: acquire
    -- Take the lease if it is free or expired.
    INSERT INTO leases ...;

Lines before the first header may only be blank or comments. Comment lines under a header are kept: they
are SQL too, and show up in `pg_stat_statements` next to the query.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from pathlib import Path

__all__ = ["SqlBlocks", "load_sql"]

_HEADER = re.compile(r"^--\s*name:\s*(?P<name>\S+)\s*$")
_NAME = re.compile(r"^[a-z_][a-z0-9_]*$")


class SqlBlocks(Mapping[str, str]):
    """The named blocks of one `.sql` file, as an immutable mapping from name to SQL text."""

    __slots__ = ("_blocks", "source")

    def __init__(self, source: str, blocks: Mapping[str, str]) -> None:
        self.source = source
        self._blocks = dict(blocks)

    @classmethod
    def parse(cls, text: str, *, source: str = "<string>") -> SqlBlocks:
        blocks: dict[str, list[str]] = {}
        current: list[str] | None = None
        for number, line in enumerate(text.splitlines(), start=1):
            header = _HEADER.match(line.strip())
            if header is not None:
                name = header["name"]
                if not _NAME.match(name):
                    raise ValueError(f"{source}:{number}: block name {name!r} is not a lower_snake_case name")
                if name in blocks:
                    raise ValueError(f"{source}:{number}: block {name!r} is defined twice")
                current = blocks[name] = []
            elif current is not None:
                current.append(line)
            elif line.strip() and not line.lstrip().startswith("--"):
                raise ValueError(f"{source}:{number}: SQL before the first '-- name:' header")
        parsed = {name: "\n".join(lines).strip() for name, lines in blocks.items()}
        empty = [name for name, sql in parsed.items() if not _has_statement(sql)]
        if empty:
            raise ValueError(f"{source}: block(s) without a statement: {', '.join(empty)}")
        return cls(source, parsed)

    def __getitem__(self, name: str) -> str:
        try:
            return self._blocks[name]
        except KeyError:
            known = ", ".join(sorted(self._blocks)) or "none"
            raise KeyError(f"{self.source} has no SQL block named {name!r} (it has: {known})") from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._blocks)

    def __len__(self) -> int:
        return len(self._blocks)

    def __repr__(self) -> str:
        return f"SqlBlocks({self.source!r}, {sorted(self._blocks)})"


def load_sql(path: Path | str) -> SqlBlocks:
    """Parse the named blocks of one `.sql` file (call once, at import of the module that uses it)."""
    path = Path(path)
    return SqlBlocks.parse(path.read_text(encoding="utf-8"), source=path.name)


def _has_statement(sql: str) -> bool:
    return any(line.strip() and not line.lstrip().startswith("--") for line in sql.splitlines())
