"""GetPodHistory: billable actions and wake outcomes, newest first, a page at a time; the action log is
append-only (#2050, #2541)."""

from __future__ import annotations

import base64

import asyncpg
import grpc
import pytest

from tests.fixtures.services import OPERATOR
from tests.integration.pod_controller.harness import history, start
from thermostat.pods.v1 import pods_pb2


def _token(raw: str) -> str:
    return base64.urlsafe_b64encode(raw.encode()).decode()


def _key(entry: pods_pb2.HistoryEntry) -> tuple[str, str]:
    kind = entry.WhichOneof("entry")
    return (entry.action.action, entry.action.id) if kind == "action" else ("wake", entry.wake.attempt_id)


@pytest.fixture
async def three_events(pods_stub, runpod_sim) -> list[pods_pb2.HistoryEntry]:
    """A Created wake, a manual stop, a Started wake: five entries."""
    assert (await start(pods_stub)).reply is not None
    await pods_stub.StopPod(pods_pb2.StopPodRequest(name="qwen"), metadata=OPERATOR, timeout=10)
    started = await start(pods_stub)
    assert started.reply is not None
    assert started.reply.outcome == "Started"
    return await history(pods_stub)


async def test_history_lists_actions_and_wakes_interleaved_newest_first(three_events) -> None:
    """Each wake row sits before (older than) the billable call it made; the whole trail reads backwards."""
    kinds = [e.WhichOneof("entry") for e in three_events]
    assert kinds == ["action", "wake", "action", "action", "wake"]
    assert [e.action.action for e in three_events if e.WhichOneof("entry") == "action"] == ["Start", "Stop", "Create"]
    assert [e.wake.wake_outcome for e in three_events if e.WhichOneof("entry") == "wake"] == ["Started", "Created"]
    stamps = [e.at.ToDatetime() for e in three_events]
    assert stamps == sorted(stamps, reverse=True)
    create = three_events[3].action
    assert (create.trigger, create.gpu_id, create.price_per_hour, create.http_status) == (
        "wake",
        "NVIDIA A100 80GB PCIe",
        1.59,
        201,
    )
    assert three_events[2].action.trigger == "manual"


@pytest.mark.parametrize("page_size", [pytest.param(n, id=f"page-{n}") for n in (1, 2, 4, 5)])
async def test_history_pages_cover_every_entry_exactly_once_in_order(pods_stub, three_events, page_size) -> None:
    """Following next_page_token from the first page yields the full list, in order, and stops at the end."""
    seen: list[tuple[str, str]] = []
    token = ""
    for _ in range(10):
        page = await pods_stub.GetPodHistory(
            pods_pb2.GetPodHistoryRequest(name="qwen", page_size=page_size, page_token=token), timeout=10
        )
        assert len(page.entries) <= page_size
        seen += [_key(e) for e in page.entries]
        token = page.next_page_token
        if not token:
            break
    assert seen == [_key(e) for e in three_events]


@pytest.mark.parametrize(
    ("request_", "field"),
    [
        pytest.param(
            pods_pb2.GetPodHistoryRequest(name="qwen", page_token="not-a-token"), "page_token", id="garbage-token"
        ),
        pytest.param(
            pods_pb2.GetPodHistoryRequest(name="qwen", page_token="WzEsMl0="), "page_token", id="json-but-not-ours"
        ),
        pytest.param(
            pods_pb2.GetPodHistoryRequest(name="qwen", page_token=_token('["2026-10-01T00:00:00", "x"]')),
            "page_token",
            id="no-time-zone",
        ),
        pytest.param(
            pods_pb2.GetPodHistoryRequest(name="qwen", page_token=_token('["0001-01-01T00:00:00+14:00", "x"]')),
            "page_token",
            id="before-year-1-in-utc",
        ),
        pytest.param(pods_pb2.GetPodHistoryRequest(name="qwen", page_size=-1), "page_size", id="negative-size"),
        pytest.param(pods_pb2.GetPodHistoryRequest(name="qwen", page_size=501), "page_size", id="oversized"),
    ],
)
async def test_a_bad_page_request_is_invalid_argument_naming_the_field(pods_stub, request_, field) -> None:
    """A token this route did not issue, or a size outside 0..500: INVALID_ARGUMENT that names the field."""
    with pytest.raises(grpc.aio.AioRpcError) as error:
        await pods_stub.GetPodHistory(request_, timeout=10)
    assert error.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert field in (error.value.details() or "")


@pytest.mark.parametrize(
    "statement",
    [
        pytest.param("UPDATE pod_actions SET ok = NOT ok", id="update"),
        pytest.param("DELETE FROM pod_actions", id="delete"),
    ],
)
async def test_the_action_log_refuses_rewrites(pods_stub, runpod_sim, db_store, statement) -> None:
    """pod_actions is append-only: an UPDATE or DELETE of a recorded billable call raises and changes nothing."""
    assert (await start(pods_stub)).reply is not None
    before = await db_store.pool.fetch("SELECT * FROM pod_actions ORDER BY at")
    assert len(before) == 1
    with pytest.raises(asyncpg.RaiseError, match="append-only"):
        await db_store.pool.execute(statement)
    assert await db_store.pool.fetch("SELECT * FROM pod_actions ORDER BY at") == before
