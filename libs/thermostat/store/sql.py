"""Named SQL blocks: queries live in `.sql` files, each block under a `-- name: block_name` header.

Keeping SQL in SQL files lets a reader (and an editor, and `psql`) see each statement whole, and keeps the
Python modules about what the statements mean. A file is parsed once, when a module loads it; asking for a
block the file does not have is a KeyError naming both, so a typo fails at the first call in any test.

    -- name: acquire
    -- Take the lease if it is free or expired.
    INSERT INTO leases (name, holder) VALUES (:name, :holder) ...;

A block names its parameters (`:holder`, as psql's variables and SQLAlchemy's `text()` do) and is called with
keywords: `await conn.fetchrow(*Q.bind("acquire", name=name, holder=holder))`. asyncpg only takes `$1`…`$n`,
so each name is rewritten to its number once, at load, and the order kept beside the statement; a name used
twice is one parameter. Fifteen positionals explained by a comment list were how a swapped pair went unseen;
a missing or unknown keyword is a TypeError naming the block, at the call. `::type` casts, comments, quoted
strings and identifiers and dollar-quoted bodies are not parameters; a `$n` left in a file is refused, so a
statement cannot mix the two forms.

Lines before the first header may only be blank or comments. Comment lines under a header are kept: they
are SQL too, and show up in `pg_stat_statements` next to the query.
"""

from __future__ import annotations

import keyword
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = ["SqlBlocks", "Statement", "load_sql"]

_HEADER = re.compile(r"^--\s*name:\s*(?P<name>\S+)\s*$")
_NAME = re.compile(r"^[a-z_][a-z0-9_]*$")
# Alternatives are tried left to right at each position, so a cast's `::` is consumed before `:name` is tried.
_TOKEN = re.compile(
    r"""
      (?P<verbatim>
          --[^\n]*
        | '(?:[^']|'')*'
        | "(?:[^"]|"")*"
        | (?P<dollar>\$(?:[A-Za-z_][A-Za-z0-9_]*)?\$).*?(?P=dollar)
        | ::
      )
    | (?P<positional>\$\d+)
    | :(?P<param>[A-Za-z_][A-Za-z0-9_]*)
    """,
    re.VERBOSE | re.DOTALL,
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Statement:
    """One block as Postgres reads it: `sql` with `$n` placeholders, and `params`, the name each `$n` stands for."""

    source: str
    name: str
    sql: str
    params: tuple[str, ...]

    def args(self, values: Mapping[str, object]) -> tuple[object, ...]:
        """`values` in the statement's `$n` order; a missing or unknown name is a TypeError naming the block."""
        missing = [p for p in self.params if p not in values]
        unknown = sorted(set(values) - set(self.params))
        if missing or unknown:
            problems = []
            if missing:
                problems.append(f"missing {', '.join(':' + p for p in missing)}")
            if unknown:
                problems.append(f"no parameter {', '.join(':' + p for p in unknown)}")
            takes = ", ".join(":" + p for p in self.params) or "none"
            raise TypeError(f"{self.source} block {self.name!r}: {'; '.join(problems)} (it takes: {takes})")
        return tuple(values[p] for p in self.params)


class SqlBlocks(Mapping[str, str]):
    """The named blocks of one `.sql` file: a mapping from name to the SQL Postgres runs, bound by keyword."""

    __slots__ = ("_statements", "source")

    def __init__(self, source: str, statements: Mapping[str, Statement]) -> None:
        self.source = source
        self._statements = dict(statements)

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
        return cls(source, {name: _number(source, name, sql) for name, sql in parsed.items()})

    def statement(self, name: str) -> Statement:
        try:
            return self._statements[name]
        except KeyError:
            known = ", ".join(sorted(self._statements)) or "none"
            raise KeyError(f"{self.source} has no SQL block named {name!r} (it has: {known})") from None

    def bind(self, name: str, /, **values: object) -> tuple[str, *tuple[object, ...]]:
        """The block's SQL followed by `values` in its `$n` order, to unpack into a driver call."""
        statement = self.statement(name)
        return (statement.sql, *statement.args(values))

    def bind_many(self, name: str, rows: Iterable[Mapping[str, object]], /) -> tuple[str, list[tuple[object, ...]]]:
        """The block's SQL and each row's values in its `$n` order, to unpack into `executemany`."""
        statement = self.statement(name)
        return statement.sql, [statement.args(row) for row in rows]

    def __getitem__(self, name: str) -> str:
        return self.statement(name).sql

    def __iter__(self) -> Iterator[str]:
        return iter(self._statements)

    def __len__(self) -> int:
        return len(self._statements)

    def __repr__(self) -> str:
        return f"SqlBlocks({self.source!r}, {sorted(self._statements)})"


def load_sql(path: Path | str) -> SqlBlocks:
    """Parse the named blocks of one `.sql` file (call once, at import of the module that uses it)."""
    path = Path(path)
    return SqlBlocks.parse(path.read_text(encoding="utf-8"), source=path.name)


def _number(source: str, name: str, sql: str) -> Statement:
    params: list[str] = []

    def rewrite(token: re.Match[str]) -> str:
        if token["verbatim"] is not None:
            return token[0]
        if token["positional"] is not None:
            raise ValueError(f"{source} block {name!r}: {token[0]} is positional; name the parameter (:name)")
        param = token["param"]
        if keyword.iskeyword(param):
            raise ValueError(f"{source} block {name!r}: :{param} is a Python keyword and cannot be passed by name")
        if param not in params:
            params.append(param)
        return f"${params.index(param) + 1}"

    return Statement(source=source, name=name, sql=_TOKEN.sub(rewrite, sql), params=tuple(params))


def _has_statement(sql: str) -> bool:
    return any(line.strip() and not line.lstrip().startswith("--") for line in sql.splitlines())
