"""How much of a caller's text, or of a long list, an error repeats.

An error's text travels as a gRPC status message, in a trailer that grpcio clients refuse past 16 KiB of
metadata (and may refuse past 8 KiB): the caller then gets RESOURCE_EXHAUSTED "Stream removed" instead of the
error. So an error names what was wrong repeating a bounded, ASCII part of the caller's text, and spells out a
bounded part of any list.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

ECHO_CHARS = 64
"""The most of one piece of the caller's text (a key, a name, a number) an error repeats."""

LISTED_ITEMS = 20
"""The most items of a list (known names, errors found) an error spells out."""

LISTED_CHARS = 2000
"""The most characters those items take together (each is ASCII, so the status stays within 8 KiB)."""

_WORD = re.compile(r"[A-Za-z0-9_-]+")


def cut(text: str, limit: int = ECHO_CHARS) -> str:
    """`text`, or its first `limit` characters and an ellipsis."""
    return text if len(text) <= limit else text[:limit] + "…"


def quoted(text: str) -> str:
    """The caller's text quoted in ASCII (nothing in it misleads, no character grows past a few bytes), cut after
    the quotes: `'abc'…`."""
    return ascii(text[:ECHO_CHARS]) + ("…" if len(text) > ECHO_CHARS else "")


def key_path(key: str, where: str) -> str:
    """A key under `where` as an error names it: `where.key` when it is a short word, else `where["…"]`, JSON-quoted
    in ASCII (so a lone surrogate cannot break the status it travels in) and cut after the quotes."""
    if _WORD.fullmatch(key):
        return f"{where}.{cut(key)}"
    return f"{where}[{json.dumps(key[:ECHO_CHARS])}{'…' if len(key) > ECHO_CHARS else ''}]"


def listed(items: Sequence[str], *, sep: str = ", ", noun: str = "more") -> str:
    """The first items joined by `sep` (at most LISTED_ITEMS, within LISTED_CHARS, and the first always), then
    how many were left out: `a, b, … and 380 more`."""
    shown, length = 0, 0
    for item in items[:LISTED_ITEMS]:
        length += len(item) + len(sep)
        if shown and length > LISTED_CHARS:
            break
        shown += 1
    more = len(items) - shown
    return sep.join(items[:shown]) + (f"{sep}… and {more} {noun}" if more > 0 else "")
