"""Every RunPodV2Client call, pinned to its exact method, path, query, body and headers on the wire.

The pins are read from the simulator's request log, never from a faked response (rig-conductor#2013: the v1
include-flag bug slipped because a test faked the answer's shape).
"""

from __future__ import annotations

import logging

import httpx
import pytest

from thermostat.dev.simulators.runpod.server import RecordedRequest, RunPodSimulator
from thermostat.policy.common.pod_model import Lookup
from thermostat.providers.runpod.client import RunPodV2Client, path_segment
from thermostat.providers.vllm.scrape import BROWSER_USER_AGENT

VOLUME = "bjn7d94ej9"


def only_request(sim: RunPodSimulator) -> RecordedRequest:
    requests = sim.requests()
    assert len(requests) == 1, [(r.method, r.path) for r in requests]
    return requests[0]


async def test_catalog_is_one_get_with_availability_and_product(sim: RunPodSimulator, client: RunPodV2Client) -> None:
    """The catalogue asks for availability and names the product, which v2 requires alongside it."""
    await client.get_catalog()
    request = only_request(sim)
    assert (request.method, request.path, request.query) == (
        "GET",
        "/v2/catalog/gpus",
        "include=AVAILABILITY&product=POD",
    )
    assert request.body == ""


async def test_observe_is_one_get_on_the_pod_path(sim: RunPodSimulator, client: RunPodV2Client) -> None:
    """Observing a pod reads exactly /v2/pods/{id} with no query."""
    pod_id = sim.add_pod(volume_id=VOLUME)
    await client.observe_pod(pod_id)
    request = only_request(sim)
    assert (request.method, request.path, request.query, request.body) == ("GET", f"/v2/pods/{pod_id}", "", "")


async def test_volume_lookup_lists_every_pod_without_a_filter(sim: RunPodSimulator, client: RunPodV2Client) -> None:
    """v2 has no volume filter, so the lookup lists all pods and matches mounts client-side."""
    await client.lookup_pods_by_volume(VOLUME)
    request = only_request(sim)
    assert (request.method, request.path, request.query, request.body) == ("GET", "/v2/pods", "", "")


async def test_create_posts_exactly_the_v2_body(sim: RunPodSimulator, client: RunPodV2Client) -> None:
    """A create names one GPU type in our datacenter on our volume and leaves the image to the template."""
    await client.create_pod(
        name="qwen-20260912T231547Z",
        template_id="cnz5fxyadi",
        datacenter_id="EU-RO-1",
        gpu_id="NVIDIA A100 80GB PCIe",
        volume_id=VOLUME,
    )
    request = only_request(sim)
    assert (request.method, request.path, request.query) == ("POST", "/v2/pods", "")
    assert request.headers["content-type"] == "application/json"
    assert request.json_body == {
        "name": "qwen-20260912T231547Z",
        "templateId": "cnz5fxyadi",
        "cloud": "SECURE",
        "dataCenterIds": ["EU-RO-1"],
        "gpu": {"id": "NVIDIA A100 80GB PCIe", "count": 1},
        "mounts": {"network": [{"volumeId": VOLUME, "path": "/workspace"}]},
    }


@pytest.mark.parametrize(
    ("action", "status"),
    [pytest.param("start", "EXITED", id="start"), pytest.param("stop", "RUNNING", id="stop")],
)
async def test_start_and_stop_post_the_action_body(
    sim: RunPodSimulator, client: RunPodV2Client, action: str, status: str
) -> None:
    """Start and stop are one POST to /v2/pods/{id}/action naming the action."""
    pod_id = sim.add_pod(volume_id=VOLUME, status=status)
    await getattr(client, action)(pod_id)
    request = only_request(sim)
    assert (request.method, request.path, request.query) == ("POST", f"/v2/pods/{pod_id}/action", "")
    assert request.json_body == {"action": action}


async def test_terminate_is_a_delete_on_the_pod_path(sim: RunPodSimulator, client: RunPodV2Client) -> None:
    """Terminate is DELETE /v2/pods/{id} with no body."""
    pod_id = sim.add_pod(volume_id=VOLUME)
    await client.terminate(pod_id)
    request = only_request(sim)
    assert (request.method, request.path, request.query, request.body) == ("DELETE", f"/v2/pods/{pod_id}", "", "")


@pytest.mark.parametrize(
    "call",
    [
        pytest.param(lambda c: c.get_catalog(), id="catalog"),
        pytest.param(lambda c: c.observe_pod("p1"), id="observe"),
        pytest.param(lambda c: c.lookup_pods_by_volume(VOLUME), id="lookup"),
        pytest.param(
            lambda c: c.create_pod(name="n", template_id="t", datacenter_id="d", gpu_id="g", volume_id="v"), id="create"
        ),
        pytest.param(lambda c: c.start("p1"), id="start"),
        pytest.param(lambda c: c.stop("p1"), id="stop"),
        pytest.param(lambda c: c.terminate("p1"), id="terminate"),
    ],
)
async def test_every_api_call_carries_the_bearer(
    sim: RunPodSimulator, client: RunPodV2Client, api_key: str, call: object
) -> None:
    """Each API call authenticates with the key in the Authorization header and nowhere else."""
    await call(client)  # type: ignore[operator]
    request = only_request(sim)
    assert request.headers["authorization"] == f"Bearer {api_key}"
    assert api_key not in request.path + request.query + request.body


async def test_metrics_scrape_uses_the_proxy_with_a_browser_agent_and_no_bearer(
    sim: RunPodSimulator, client: RunPodV2Client
) -> None:
    """The scrape goes to the pod's public proxy, looks like a browser to Cloudflare, and carries no key."""
    pod_id = sim.add_pod(volume_id=VOLUME, status="RUNNING")
    text = await client.fetch_metrics(pod_id, 8000)
    request = only_request(sim)
    assert (request.method, request.path, request.query) == ("GET", f"/proxy/{pod_id}-8000/metrics", "")
    assert request.headers["user-agent"] == BROWSER_USER_AGENT
    assert "authorization" not in request.headers
    assert "vllm:num_requests_running" in (text or "")


@pytest.mark.parametrize(
    "api_key", [pytest.param(None, id="unset"), pytest.param("", id="empty"), pytest.param("  \n", id="blank")]
)
async def test_an_unconfigured_client_sends_nothing(
    sim: RunPodSimulator, make_client: object, api_key: str | None
) -> None:
    """Without a key every call answers its fail-closed value and no request leaves the process."""
    runpod: RunPodV2Client = make_client(api_key)  # type: ignore[operator]
    pod_id = sim.add_pod(volume_id=VOLUME, status="RUNNING")
    assert not runpod.is_configured
    assert await runpod.get_catalog() == ()
    assert (await runpod.observe_pod(pod_id)).lookup is Lookup.UNREADABLE
    assert (await runpod.lookup_pods_by_volume(VOLUME)).lookup is Lookup.UNREADABLE
    created = await runpod.create_pod(name="n", template_id="t", datacenter_id="EU-RO-1", gpu_id="g", volume_id=VOLUME)
    assert created.http_status == 0
    for action in (runpod.start, runpod.stop, runpod.terminate):
        assert (await action(pod_id)).ok is False
    assert await runpod.fetch_metrics(pod_id, 8000) is None
    assert sim.requests() == []


@pytest.mark.parametrize(
    ("pod_id", "escaped"),
    [
        pytest.param("a/b", "a%2Fb", id="slash"),
        pytest.param("..", "%2E%2E", id="dot-dot"),
        pytest.param(".", "%2E", id="dot"),
        pytest.param("../catalog/gpus", "%2E%2E%2Fcatalog%2Fgpus", id="traversal"),
        pytest.param("x?y#z", "x%3Fy%23z", id="query-and-fragment"),
        pytest.param("100%", "100%25", id="percent"),
    ],
)
async def test_pod_ids_travel_as_one_escaped_path_segment(
    sim: RunPodSimulator, client: RunPodV2Client, pod_id: str, escaped: str
) -> None:
    """A hostile id stays inside its own segment: it cannot reach the list, the catalogue or another pod."""
    assert path_segment(pod_id) == escaped
    observed = await client.observe_pod(pod_id)
    await client.stop(pod_id)
    await client.terminate(pod_id)
    assert [(r.method, r.path) for r in sim.requests()] == [
        ("GET", f"/v2/pods/{escaped}"),
        ("POST", f"/v2/pods/{escaped}/action"),
        ("DELETE", f"/v2/pods/{escaped}"),
    ]
    assert observed.lookup is Lookup.NOT_FOUND


async def test_an_id_that_needs_escaping_still_reaches_its_own_pod(
    sim: RunPodSimulator, client: RunPodV2Client
) -> None:
    """Escaping round-trips: the simulator decodes the segment back to the same id."""
    pod_id = sim.add_pod(pod_id="odd/id..", volume_id=VOLUME, status="EXITED")
    assert (await client.observe_pod(pod_id)).lookup is Lookup.FOUND
    assert (await client.start(pod_id)).ok


async def test_a_blank_pod_id_sends_nothing(sim: RunPodSimulator, client: RunPodV2Client) -> None:
    """An empty id would address the pod list itself, so it is refused before the network."""
    assert (await client.observe_pod("")).lookup is Lookup.UNREADABLE
    assert (await client.stop("")).ok is False
    assert (await client.terminate("")).ok is False
    assert sim.requests() == []


async def test_a_mounted_secret_trailing_newline_is_not_part_of_the_bearer(
    sim: RunPodSimulator, make_client: object, api_key: str
) -> None:
    """A SOPS-mounted key file ends in a newline; the bearer is the key without it."""
    runpod: RunPodV2Client = make_client(api_key + "\n")  # type: ignore[operator]
    assert await runpod.get_catalog() != ()
    assert only_request(sim).headers["authorization"] == f"Bearer {api_key}"


async def test_the_key_is_not_in_the_client_repr(client: RunPodV2Client, api_key: str) -> None:
    """A client printed in a log or a traceback does not print its key."""
    assert api_key not in repr(client)
    assert "configured=True" in repr(client)


_CAPTURED_LOGGERS = ("", "httpx", "httpcore", "thermostat", "asyncio")


async def test_the_key_never_reaches_a_log_record_even_when_every_call_fails(
    sim: RunPodSimulator, make_client: object, api_key: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Under every injected failure, no log record (httpx and httpcore at DEBUG included) holds the key."""
    for name in _CAPTURED_LOGGERS:
        caplog.set_level(logging.DEBUG, logger=name)
    patient: RunPodV2Client = make_client()  # type: ignore[operator]
    impatient: RunPodV2Client = make_client(timeout=0.1)  # type: ignore[operator]
    pod_id = sim.add_pod(volume_id=VOLUME, status="RUNNING")
    results: list[object] = []
    for fault in (
        {"status": 500},
        {"status": 404, "body": "text"},
        {"status": 200, "body": "malformed"},
        {"status": 429, "retry_after": "7"},
        {"hang": True},
    ):
        sim.clear_faults()
        sim.inject("*", "/v2/*", count=None, **fault)  # type: ignore[arg-type]
        sim.inject("*", "/proxy/*", count=None, **fault)  # type: ignore[arg-type]
        runpod = impatient if fault.get("hang") else patient
        results += [
            await runpod.get_catalog(),
            await runpod.observe_pod(pod_id),
            await runpod.lookup_pods_by_volume(VOLUME),
            await runpod.create_pod(name="n", template_id="t", datacenter_id="EU-RO-1", gpu_id="g", volume_id=VOLUME),
            await runpod.start(pod_id),
            await runpod.stop(pod_id),
            await runpod.terminate(pod_id),
            await runpod.fetch_metrics(pod_id, 8000),
        ]
    assert any(record.name.startswith("httpcore") for record in caplog.records)
    for record in caplog.records:
        text = record.getMessage() + (record.exc_text or "") + repr(record.args)
        assert api_key not in text, record.name
    assert api_key not in repr(results)


@pytest.mark.parametrize(
    "broken_key",
    [
        pytest.param("rpa_BROKEN\rSECRETPART", id="carriage-return"),
        pytest.param("rpa_BROKEN\nSECRETPART", id="inner-newline"),
        pytest.param("rpa_BROKEN SECRETPART", id="space"),
        pytest.param("rpa_BROKENéSECRETPART", id="non-ascii"),
    ],
)
async def test_a_key_a_header_cannot_carry_leaves_the_client_unconfigured(
    sim: RunPodSimulator, make_client: object, caplog: pytest.LogCaptureFixture, broken_key: str
) -> None:
    """httpcore's DEBUG trace quotes a rejected header value, so such a key never reaches the transport."""
    for name in _CAPTURED_LOGGERS:
        caplog.set_level(logging.DEBUG, logger=name)
    runpod: RunPodV2Client = make_client(broken_key)  # type: ignore[operator]
    assert not runpod.is_configured
    assert (await runpod.observe_pod("p1")).lookup is Lookup.UNREADABLE
    assert sim.requests() == []
    assert any("unconfigured" in record.getMessage() for record in caplog.records)
    assert all("SECRETPART" not in record.getMessage() + (record.exc_text or "") for record in caplog.records)


async def test_an_injected_client_with_a_default_bearer_still_scrapes_without_it(
    sim: RunPodSimulator, api_key: str
) -> None:
    """The scrape drops an Authorization header even when the shared HTTP client carries one by default."""
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {api_key}"}) as shared:
        runpod = RunPodV2Client(
            api_key, base_url=sim.base_url, proxy_url_template=sim.proxy_url_template, http_client=shared
        )
        pod_id = sim.add_pod(volume_id=VOLUME, status="RUNNING")
        assert await runpod.fetch_metrics(pod_id, 8000) is not None
        await runpod.aclose()
        assert not shared.is_closed
    assert "authorization" not in only_request(sim).headers
