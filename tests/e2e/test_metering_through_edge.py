"""Metering's REST routes through the real Envoy edge: spend, budget (operator token to set) and the ledger's
status, in the pod routes' lowerCamelCase."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from tests.fixtures.edge import house_edge, port_of
from tests.fixtures.polling import eventually
from tests.fixtures.services import OPERATOR_TOKEN, RunningService, metering_env, start_metering
from tests.integration.pod_controller.harness import start
from thermostat.chassis.registry import METERING, POD_CONTROLLER
from thermostat.pods.v1 import pods_pb2_grpc
from thermostat.store.db import Store

pytestmark = pytest.mark.e2e


@pytest.fixture
async def metering(pod_controller: RunningService, db_store: Store) -> AsyncIterator[RunningService]:
    async with start_metering(metering_env(pod_controller.address, LEDGER_POLL_SECONDS="0.05"), db_store) as running:
        yield running


@pytest.fixture
async def edge(
    pod_controller: RunningService, metering: RunningService, tmp_path: Path
) -> AsyncIterator[httpx.AsyncClient]:
    ports = {POD_CONTROLLER.name: port_of(pod_controller.address), METERING.name: port_of(metering.address)}
    async with (
        house_edge(ports, tmp_path / "envoy.yaml") as envoy,
        httpx.AsyncClient(base_url=f"http://127.0.0.1:{envoy.listeners['edge']}", timeout=10) as http,
    ):
        yield http


async def test_spend_budget_and_ledger_are_served_as_rest_json(
    pod_controller: RunningService, edge: httpx.AsyncClient
) -> None:
    async with pod_controller.channel() as channel:
        assert (await start(pods_pb2_grpc.PodControllerStub(channel))).reply.outcome == "Created"

    refused = await edge.put("/api/pods/qwen/budget", json={"dailyUsd": 2.5})
    assert refused.status_code == 401
    put = await edge.put(
        "/api/pods/qwen/budget", json={"dailyUsd": 2.5}, headers={"X-Rig-Operator-Token": OPERATOR_TOKEN}
    )
    assert (put.status_code, put.json()["dailyUsd"]) == (200, 2.5)

    async def ingested() -> dict[str, object] | None:
        body = (await edge.get("/api/pods/qwen/spend")).json()
        return body if body.get("intervals") else None

    spend = await eventually(ingested, timeout=10, every=0.05)
    (interval,) = spend["intervals"]
    assert interval["gpuType"] == "NVIDIA A100 80GB PCIe" and interval["pricePerHour"] > 0
    assert "end" not in interval and spend["name"] == "qwen"

    budget = (await edge.get("/api/pods/qwen/budget")).json()
    assert budget["dailyUsd"] == 2.5 and "monthlyUsd" not in budget

    (feed,) = (await edge.get("/api/metering/ledger")).json()["feeds"]
    assert feed["source"] == "pod-controller/billable-actions" and feed["position"] == feed["headPosition"]
    assert (await edge.get("/api/pods/llama/spend")).status_code == 404


async def test_a_body_that_is_not_utf8_is_a_400_problem_that_is_still_json(edge: httpx.AsyncClient) -> None:
    """Found by the chaos fuzzing: the transcoder quotes the body's bytes in its error, and the problem it became
    was not UTF-8 (a client could not decode it). Bytes that are not UTF-8 are replaced by U+FFFD."""
    for body in (b"\x80", b'{"dailyUsd": "\xff\xfe"}', b"\xed\xa0\x80"):
        answer = await edge.put("/api/pods/qwen/budget", content=body, headers={"X-Rig-Operator-Token": OPERATOR_TOKEN})
        assert answer.status_code == 400
        assert answer.headers["content-type"] == "application/problem+json"
        problem = answer.content.decode("utf-8")  # strict: raises on a byte that is not UTF-8
        assert "\ufffd" in answer.json()["detail"], problem


async def test_the_edge_health_shows_the_ledger_lag_under_metering(
    pod_controller: RunningService, edge: httpx.AsyncClient
) -> None:
    """GET /health: metering's entry carries its detail, each feed's lag, caught up once the wake's actions land."""
    async with pod_controller.channel() as channel:
        assert (await start(pods_pb2_grpc.PodControllerStub(channel))).reply.outcome == "Created"

    async def caught_up() -> dict[str, object] | None:
        response = await edge.get("/health")
        entry = next(u for u in response.json()["upstreams"] if u["name"] == METERING.name)
        feeds = (entry.get("detail") or {}).get("ledger") or []
        return entry if feeds and feeds[0]["position"] > 0 and feeds[0]["lag_events"] == 0 else None

    entry = await eventually(caught_up, timeout=15, every=0.05)
    assert entry["serving"] is True
    (feed,) = entry["detail"]["ledger"]  # type: ignore[index]
    assert feed["feed"] == "pod-controller/billable-actions"
    assert feed["position"] == feed["head_position"] and feed["error"] == ""
    assert 0 <= feed["lag_seconds"] < 15


async def test_a_body_that_is_not_a_json_object_is_a_400_naming_the_body(edge: httpx.AsyncClient) -> None:
    """Found by the chaos fuzzing: the transcoder's error at the body's root has an empty field path (": Root
    element must be a message."); the edge names the body as the field at fault."""
    for body in (b"[1, 2]", b'"five"', b"7"):
        answer = await edge.put("/api/pods/qwen/budget", content=body, headers={"X-Rig-Operator-Token": OPERATOR_TOKEN})
        assert answer.status_code == 400, answer.text
        detail = answer.json()["detail"]
        assert detail.startswith("body: "), detail
