"""Metering's REST routes through the real Envoy edge: spend, budget (operator token to set) and the ledger's
status, in the pod routes' lowerCamelCase; the budget bodies of both PUT routes read strictly (a misspelt ceiling
is 400 naming it, never a budget silently without that ceiling)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.fixtures.edge import house_edge, port_of
from tests.fixtures.polling import eventually
from tests.fixtures.services import OPERATOR_TOKEN, RunningService, metering_env, start_metering
from tests.integration.pod_controller.harness import start
from tests.integration.pool_dispatcher.conftest import ADMIN_TOKEN, API_TOKEN
from thermostat.chassis.registry import METERING, POD_CONTROLLER
from thermostat.pods.v1 import pods_pb2_grpc
from thermostat.store.db import Store

pytestmark = pytest.mark.e2e


@pytest.fixture
async def metering(pod_controller: RunningService, db_store: Store) -> AsyncIterator[RunningService]:
    async with start_metering(
        metering_env(
            pod_controller.address,
            LEDGER_POLL_SECONDS="0.05",
            STRATA_POOL_ADMIN_TOKEN=ADMIN_TOKEN,
            STRATA_POOL_TOKEN=API_TOKEN,
        ),
        db_store,
    ) as running:
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


# --- the budget bodies, read strictly ------------------------------------------------------------------------


@dataclass(frozen=True)
class BudgetRoute:
    """One of the two PUT budget routes: its path, the token it takes, how it spells its JSON and what it binds."""

    path: str
    headers: dict[str, str]
    daily: str  # the printed ceiling's name: dailyUsd on /api/, daily_usd on /v1/
    bound: str  # the path-bound field and the path's value for it
    value: str


POD = BudgetRoute("/api/pods/qwen/budget", {"X-Rig-Operator-Token": OPERATOR_TOKEN}, "dailyUsd", "name", "qwen")
TENANT = BudgetRoute("/v1/budgets/acme", {"Authorization": f"Bearer {ADMIN_TOKEN}"}, "daily_usd", "tenant_id", "acme")
ROUTES = [pytest.param(POD, id="pod"), pytest.param(TENANT, id="tenant")]
KNOWN = "known: daily_usd, monthly_usd"


async def _set(edge: httpx.AsyncClient, route: BudgetRoute, body: object) -> httpx.Response:
    return await edge.put(route.path, json=body, headers=route.headers)


async def _ceilings(edge: httpx.AsyncClient, route: BudgetRoute) -> dict[str, object]:
    headers = route.headers if route is TENANT else {}
    read = (await edge.get(route.path, headers=headers)).json()
    return {k: v for k, v in read.items() if k.lower().startswith(("daily", "monthly"))}


def _refused(answer: httpx.Response, detail: str) -> None:
    assert answer.status_code == 400, answer.text
    assert answer.headers["content-type"] == "application/problem+json"
    assert answer.json()["detail"] == detail, answer.json()


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize(
    ("body", "detail"),
    [
        pytest.param({"daily": 5}, f"body.daily: unknown field; {KNOWN}", id="daily"),
        pytest.param({"dailyUSD": 5}, f"body.dailyUSD: unknown field; {KNOWN}", id="dailyUSD"),
        pytest.param({"daily_usd": 5, "monthly": 100}, f"body.monthly: unknown field; {KNOWN}", id="one-of-two"),
    ],
)
async def test_a_misspelt_ceiling_is_a_400_naming_it_and_the_budget_is_left_as_it_was(
    edge: httpx.AsyncClient, route: BudgetRoute, body: object, detail: str
) -> None:
    """The transcoder would drop the field and set a budget with no ceiling: the body is read strictly instead."""
    assert (await _set(edge, route, {"dailyUsd": 2.5, "monthlyUsd": 10})).status_code == 200
    before = await _ceilings(edge, route)
    _refused(await _set(edge, route, body), detail)
    assert await _ceilings(edge, route) == before != {}


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize(
    ("content", "detail"),
    [
        pytest.param(b'{"dailyUsd": "5"}', "body.dailyUsd: must be a JSON number, not a string", id="string"),
        pytest.param(b'{"monthly_usd": true}', "body.monthly_usd: must be a JSON number, not a boolean", id="bool"),
        pytest.param(
            b'{"dailyUsd": null}',
            "body.dailyUsd: null is not a value; leave the field out to leave it unset",
            id="null",
        ),
        pytest.param(b"[5]", "body: must be a JSON object, not an array", id="array"),
        pytest.param(b"", "body: empty; a JSON object is expected", id="empty"),
        pytest.param(b'{"dailyUsd": 5, "daily_usd": 6}', "body.daily_usd: given twice (as dailyUsd and daily_usd)"),
        pytest.param(b"\x80", "body: not UTF-8 text; a JSON object is expected", id="not-utf8"),
        pytest.param(
            b'{"dailyUsd": -1}',
            "body.daily_usd: must be a non-negative number of USD (leave it out for no ceiling)",
            id="negative",
        ),
    ],
)
async def test_a_ceiling_of_the_wrong_type_or_a_body_that_is_no_object_is_a_400_and_nothing_is_written(
    edge: httpx.AsyncClient, route: BudgetRoute, content: bytes, detail: str
) -> None:
    assert (await _set(edge, route, {"dailyUsd": 2.5, "monthlyUsd": 10})).status_code == 200
    before = await _ceilings(edge, route)
    _refused(await edge.put(route.path, content=content, headers=route.headers), detail)
    assert await _ceilings(edge, route) == before != {}


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize(
    "body",
    [
        pytest.param({"dailyUsd": 5, "monthlyUsd": 100}, id="lowerCamel"),
        pytest.param({"daily_usd": 5, "monthly_usd": 100}, id="snake_case"),
        pytest.param({"daily_usd": 5, "monthlyUsd": 100}, id="mixed"),
    ],
)
async def test_either_spelling_of_the_ceilings_sets_them(
    edge: httpx.AsyncClient, route: BudgetRoute, body: object
) -> None:
    put = await _set(edge, route, body)
    assert (put.status_code, put.json()[route.daily]) == (200, 5), put.text
    monthly = "monthlyUsd" if route is POD else "monthly_usd"
    assert await _ceilings(edge, route) == {route.daily: 5, monthly: 100}


@pytest.mark.parametrize("route", ROUTES)
async def test_a_ceiling_left_out_is_still_cleared(edge: httpx.AsyncClient, route: BudgetRoute) -> None:
    assert (await _set(edge, route, {"dailyUsd": 5, "monthlyUsd": 100})).status_code == 200
    assert (await _set(edge, route, {"monthlyUsd": 100})).status_code == 200
    assert route.daily not in await _ceilings(edge, route)
    assert (await _set(edge, route, {})).status_code == 200
    assert await _ceilings(edge, route) == {}


@pytest.mark.parametrize("route", ROUTES)
async def test_the_path_bound_field_in_the_body_is_refused_with_another_value_and_ignored_with_the_paths(
    edge: httpx.AsyncClient, route: BudgetRoute
) -> None:
    """The path stays the only word on what is set, as Envoy's own collision check keeps it on other routes."""
    assert (await _set(edge, route, {"dailyUsd": 2.5})).status_code == 200
    for spelling in {route.bound, "tenantId" if route is TENANT else route.bound}:
        _refused(
            await _set(edge, route, {spelling: "other", "dailyUsd": 9}),
            f'body.{spelling}: conflicts with the path\'s {route.bound} "{route.value}"; leave it out of the body',
        )
    assert (await _ceilings(edge, route))[route.daily] == 2.5
    same = await _set(edge, route, {route.bound: route.value, "dailyUsd": 3})
    assert (same.status_code, same.json()[route.daily]) == (200, 3), same.text


@pytest.mark.parametrize(("path_name", "body_name"), [("qwen", "QWEN"), ("Qwen", "qwen")])
async def test_a_pod_name_in_the_body_differing_from_the_paths_only_in_case_names_the_same_pod(
    edge: httpx.AsyncClient, path_name: str, body_name: str
) -> None:
    """A pod's name is case-insensitive on every pod route, so a case-only difference is the path's value again;
    a tenant id is compared as given (the test above refuses "other" for both)."""
    put = await edge.put(f"/api/pods/{path_name}/budget", json={"name": body_name, "dailyUsd": 4}, headers=POD.headers)
    assert (put.status_code, put.json()["name"], put.json()["dailyUsd"]) == (200, "qwen", 4), put.text
    assert (await _ceilings(edge, POD))["dailyUsd"] == 4


@pytest.mark.parametrize("route", ROUTES)
async def test_a_ceiling_given_as_a_query_parameter_is_refused_not_dropped(
    edge: httpx.AsyncClient, route: BudgetRoute
) -> None:
    answer = await edge.put(f"{route.path}?daily_usd=5", json={}, headers=route.headers)
    assert answer.status_code == 400 and "daily_usd" in answer.json()["detail"], answer.text


async def test_the_budget_routes_keep_their_tokens_whatever_the_body(edge: httpx.AsyncClient) -> None:
    """The token is checked before the body is read: a misspelt body without the token is still 401 / 403."""
    for body in ({"dailyUsd": 5}, {"daily": 5}):
        assert (await edge.put(POD.path, json=body)).status_code == 401
        wrong = await edge.put(POD.path, json=body, headers={"X-Rig-Operator-Token": "not-it"})
        assert wrong.status_code == 403, wrong.text
        assert (await edge.put(TENANT.path, json=body)).status_code == 401
        api_token = await edge.put(TENANT.path, json=body, headers={"Authorization": f"Bearer {API_TOKEN}"})
        assert api_token.status_code == 403, api_token.text
    assert await _ceilings(edge, POD) == {} and await _ceilings(edge, TENANT) == {}


async def test_an_unknown_pod_is_404_before_its_budget_body_is_read(edge: httpx.AsyncClient) -> None:
    """As on every pod route: the name is resolved first, so a bad body for a pod that is not there is 404."""
    for body in ({"dailyUsd": 5}, {"daily": 5}):
        answer = await edge.put("/api/pods/llama/budget", json=body, headers={"X-Rig-Operator-Token": OPERATOR_TOKEN})
        assert answer.status_code == 404, answer.text
