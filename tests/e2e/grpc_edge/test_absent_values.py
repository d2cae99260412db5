"""One rule for absent values in REST JSON (docs/api.md, "Absent values"), through the edge: a value not there is
null, never "" or 0, and a number is a JSON number, never a string — the metering ledger and a pod's history."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.e2e.cli.stack import CliStack
from tests.fixtures.polling import eventually

pytestmark = pytest.mark.e2e


def _leaves(value: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _leaves(item, f"{path}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _leaves(item, f"{path}[{index}]")
    else:
        yield path, value


async def test_the_ledger_prints_positions_as_numbers_and_no_error_as_null(stack: CliStack) -> None:
    """Each feed: position, headPosition and lagEvents JSON numbers; error null after a good read; lastReadAt a
    time or null."""
    async with httpx.AsyncClient(base_url=f"http://{stack.edge}", timeout=10) as http:

        async def read() -> list[dict[str, Any]] | None:
            feeds: list[dict[str, Any]] = (await http.get("/api/metering/ledger")).json()["feeds"]
            return feeds if feeds and all(f["lastReadAt"] for f in feeds) else None

        feeds = await eventually(read, timeout=20, every=0.1)
    for feed in feeds:
        assert set(feed) == {"source", "position", "headPosition", "lagEvents", "lastReadAt", "error"}
        assert all(type(feed[k]) is int for k in ("position", "headPosition", "lagEvents")), feed
        assert feed["error"] is None and isinstance(feed["lastReadAt"], str), feed


async def test_a_pods_history_prints_what_is_not_there_as_null_never_empty_or_zero(stack: CliStack) -> None:
    """A wake and its billable actions: no "" anywhere, the entry's other kind null, the last page's token null."""
    assert (await stack.cli("pods", "start", "gemma")).exit_code == 0
    async with httpx.AsyncClient(base_url=f"http://{stack.edge}", timeout=10) as http:
        page = (await http.get("/api/pods/gemma/history", params={"pageSize": 50})).json()
    assert page["nextPageToken"] is None and page["entries"], page
    assert [path for path, value in _leaves(page) if value == ""] == []
    for entry in page["entries"]:
        assert set(entry) == {"at", "action", "wake"} and (entry["action"] is None) != (entry["wake"] is None)
        if entry["action"] is not None and entry["action"]["action"] != "Create":
            assert entry["action"]["gpuId"] is None and entry["action"]["pricePerHour"] is None, entry
        if entry["wake"] is not None:
            assert type(entry["wake"]["candidatesConsidered"]) is int
