"""How RunPodV2Client reads each answer: the tri-state lookups, the RUNNING rule, create pass-through.

Every answer comes from the simulator over loopback, shaped either by its real behaviour or by an injected
fault, so the client is exercised on bytes as they arrive on a socket.
"""

from __future__ import annotations

import logging

import pytest

from thermostat.chassis.ports import free_port
from thermostat.dev.simulators.runpod.server import RunPodSimulator
from thermostat.policy.common.pod_model import Availability, Lookup, PodObservation, PodStatus
from thermostat.providers.runpod.client import ActionResult, RunPodV2Client

VOLUME = "bjn7d94ej9"
A100 = "NVIDIA A100 80GB PCIe"


async def create(client: RunPodV2Client, gpu_id: str = A100, volume_id: str = VOLUME):  # type: ignore[no-untyped-def]
    return await client.create_pod(
        name="qwen-test", template_id="cnz5fxyadi", datacenter_id="EU-RO-1", gpu_id=gpu_id, volume_id=volume_id
    )


# --- observe ----------------------------------------------------------------------------------------------------


async def test_observing_a_running_pod_reads_every_field(sim: RunPodSimulator, client: RunPodV2Client) -> None:
    """A serving pod is RUNNING with its GPU attached, datacenter, GPU id, price and volume."""
    pod_id = sim.add_pod(volume_id=VOLUME, status="RUNNING")
    observed = await client.observe_pod(pod_id)
    assert observed == PodObservation(
        lookup=Lookup.FOUND,
        pod_id=pod_id,
        status=PodStatus.RUNNING,
        gpu_count=1,
        datacenter_id="EU-RO-1",
        gpu_id=A100,
        cost_per_hour=1.59,
        volume_ids=(VOLUME,),
    )
    assert observed.is_serving


@pytest.mark.parametrize(
    "status",
    [pytest.param(s, id=s.lower()) for s in ("PROVISIONING", "STARTING", "EXITED", "ERROR", "TERMINATED")],
)
async def test_every_other_v2_status_maps_one_to_one(sim: RunPodSimulator, client: RunPodV2Client, status: str) -> None:
    """The v2 enum is read as it is; none of these states serve."""
    pod_id = sim.add_pod(volume_id=VOLUME, status="EXITED")
    sim.patch_pod(pod_id, {"status": status})
    observed = await client.observe_pod(pod_id)
    assert (observed.lookup, observed.status) == (Lookup.FOUND, PodStatus(status))
    assert not observed.is_serving


@pytest.mark.parametrize(
    ("patch", "status", "gpus"),
    [
        pytest.param({"runtime": None}, PodStatus.STARTING, 1, id="runtime-null-is-starting"),
        pytest.param({"runtime": {}}, PodStatus.STARTING, 1, id="runtime-empty-is-starting"),
        pytest.param({"runtime": {"uptime": 0, "gpus": [{}]}}, PodStatus.STARTING, 1, id="uptime-zero-is-starting"),
        pytest.param({"runtime": {"uptime": True, "gpus": [{}]}}, PodStatus.STARTING, 1, id="uptime-bool-is-starting"),
        pytest.param({"runtime": {"uptime": 7, "gpus": [{}, {}]}}, PodStatus.RUNNING, 2, id="two-gpus-attached"),
        pytest.param({"runtime": {"uptime": 7, "gpus": []}}, PodStatus.RUNNING, 0, id="no-gpu-attached-is-zero"),
        pytest.param(
            {"runtime": {"uptime": 7}, "gpu": {"id": A100, "count": 3}},
            PodStatus.RUNNING,
            3,
            id="gpu-count-fallback-when-array-absent",
        ),
        pytest.param({"runtime": {"uptime": 7}, "gpu": None}, PodStatus.RUNNING, 0, id="no-gpu-information"),
        pytest.param({"status": "PAUSED"}, PodStatus.UNKNOWN, 1, id="unknown-status-value"),
        pytest.param({"status": None}, PodStatus.UNKNOWN, 1, id="status-absent"),
    ],
)
async def test_running_needs_a_live_uptime_and_gpus_are_counted_where_attached(
    sim: RunPodSimulator, client: RunPodV2Client, patch: dict[str, object], status: PodStatus, gpus: int
) -> None:
    """RUNNING flips before the GPU attaches; only uptime > 0 is Running, and runtime.gpus[] is what counts."""
    pod_id = sim.add_pod(volume_id=VOLUME, status="RUNNING")
    sim.patch_pod(pod_id, patch)
    observed = await client.observe_pod(pod_id)
    assert (observed.lookup, observed.status, observed.gpu_count) == (Lookup.FOUND, status, gpus)


async def test_a_running_pod_with_no_gpu_attached_does_not_serve(sim: RunPodSimulator, client: RunPodV2Client) -> None:
    """RUNNING with gpus [] reads 0 GPUs, which the wake policy replaces rather than waits on."""
    pod_id = sim.add_pod(volume_id=VOLUME, status="RUNNING")
    sim.patch_pod(pod_id, {"runtime": {"uptime": 30, "gpus": []}})
    assert not (await client.observe_pod(pod_id)).is_serving


async def test_only_a_problem_json_404_is_not_found(sim: RunPodSimulator, client: RunPodV2Client) -> None:
    """RunPod's own NotFoundError (problem+json, status 404) is the one affirmative absence."""
    observed = await client.observe_pod("gone0000000000")
    assert observed == PodObservation(lookup=Lookup.NOT_FOUND, pod_id="gone0000000000")


@pytest.mark.parametrize(
    "fault",
    [
        pytest.param({"status": 404, "body": "text"}, id="bare-404"),
        pytest.param({"status": 404, "body": "json", "json_body": {"status": 404}}, id="404-plain-json"),
        pytest.param({"status": 404, "body": "empty"}, id="404-empty"),
        pytest.param({"status": 500}, id="500"),
        pytest.param({"status": 502, "body": "text"}, id="502-gateway"),
        pytest.param({"status": 429, "retry_after": "3"}, id="429"),
        pytest.param({"status": 403}, id="403"),
        pytest.param({"status": 302, "body": "empty"}, id="redirect"),
    ],
)
async def test_any_other_failure_to_observe_is_unreadable(
    sim: RunPodSimulator, client: RunPodV2Client, fault: dict[str, object]
) -> None:
    """A proxy page, a base URL missing /v2 or an outage says nothing about the pod: UNREADABLE, never gone."""
    pod_id = sim.add_pod(volume_id=VOLUME, status="RUNNING")
    sim.inject("GET", "/v2/pods/*", **fault)  # type: ignore[arg-type]
    assert await client.observe_pod(pod_id) == PodObservation(lookup=Lookup.UNREADABLE, pod_id=pod_id)


async def test_a_wrong_key_is_unreadable_not_absent(sim: RunPodSimulator, make_client: object) -> None:
    """A 401 (rotated key) must not read as "the pod is gone"."""
    runpod: RunPodV2Client = make_client("rpa_WRONG")  # type: ignore[operator]
    pod_id = sim.add_pod(volume_id=VOLUME, status="RUNNING")
    assert (await runpod.observe_pod(pod_id)).lookup is Lookup.UNREADABLE
    assert (await runpod.lookup_pods_by_volume(VOLUME)).lookup is Lookup.UNREADABLE


async def test_an_observe_that_times_out_is_unreadable(sim: RunPodSimulator, impatient_client: RunPodV2Client) -> None:
    """A request that hangs past the client timeout is an unread answer."""
    pod_id = sim.add_pod(volume_id=VOLUME, status="RUNNING")
    sim.inject("GET", "/v2/pods/*", hang=True)
    assert (await impatient_client.observe_pod(pod_id)).lookup is Lookup.UNREADABLE


async def test_an_unreachable_api_is_unreadable(api_key: str) -> None:
    """Connection refused is a transport failure like any other."""
    async with RunPodV2Client(api_key, base_url=f"http://127.0.0.1:{free_port()}/v2") as runpod:
        assert (await runpod.observe_pod("p1")).lookup is Lookup.UNREADABLE
        assert (await runpod.lookup_pods_by_volume(VOLUME)).lookup is Lookup.UNREADABLE
        assert (await create(runpod)).http_status == 0
        assert await runpod.stop("p1") == ActionResult(ok=False, http_status=0)


@pytest.mark.parametrize(
    "fault",
    [
        pytest.param({"body": "malformed"}, id="truncated-json"),
        pytest.param({"body": "text"}, id="plain-text"),
        pytest.param({"body": "json", "json_body": ["not", "a", "pod"]}, id="json-array"),
    ],
)
async def test_a_2xx_observe_with_an_unreadable_body_is_found_but_unknown(
    sim: RunPodSimulator, client: RunPodV2Client, fault: dict[str, object]
) -> None:
    """The pod answered, so it exists; what state it is in is unknown (the wake policy waits)."""
    pod_id = sim.add_pod(volume_id=VOLUME, status="RUNNING")
    sim.inject("GET", "/v2/pods/*", status=200, **fault)  # type: ignore[arg-type]
    observed = await client.observe_pod(pod_id)
    assert (observed.lookup, observed.status) == (Lookup.FOUND, PodStatus.UNKNOWN)


# --- volume lookup --------------------------------------------------------------------------------------------


async def test_every_pod_on_the_volume_is_found_in_list_order(
    sim: RunPodSimulator, client: RunPodV2Client, caplog: pytest.LogCaptureFixture
) -> None:
    """A stale pod and its replacement are both returned, in list order, and the pair logs a warning."""
    stale = sim.add_pod(volume_id=VOLUME, status="EXITED")
    sim.add_pod(volume_id="agv6w2qcg7", status="RUNNING")
    replacement = sim.add_pod(volume_id=VOLUME, status="RUNNING")
    with caplog.at_level(logging.WARNING, logger="thermostat.providers.runpod.client"):
        found = await client.lookup_pods_by_volume(VOLUME)
    assert (found.lookup, found.pod_ids) == (Lookup.FOUND, (stale, replacement))
    assert any("2 pods" in record.getMessage() for record in caplog.records)


async def test_the_list_order_is_the_apis_not_ours(sim: RunPodSimulator, client: RunPodV2Client) -> None:
    """GET /v2/pods order is unspecified; the lookup keeps whatever order it was given."""
    first = sim.add_pod(volume_id=VOLUME)
    second = sim.add_pod(volume_id=VOLUME)
    sim.configure(list_newest_first=True)
    assert (await client.lookup_pods_by_volume(VOLUME)).pod_ids == (second, first)


async def test_a_pod_listed_twice_on_the_volume_is_returned_once(sim: RunPodSimulator, client: RunPodV2Client) -> None:
    """Each id appears once even when it mounts the volume twice."""
    pod_id = sim.add_pod(volume_id=VOLUME)
    mount = {"volumeId": VOLUME, "path": "/workspace"}
    sim.patch_pod(pod_id, {"mounts": {"network": [mount, {**mount, "path": "/cache"}]}})
    assert (await client.lookup_pods_by_volume(VOLUME)).pod_ids == (pod_id,)


@pytest.mark.parametrize(
    "others",
    [pytest.param((), id="no-pods-at-all"), pytest.param(("agv6w2qcg7",), id="pods-on-other-volumes-only")],
)
async def test_a_readable_list_without_our_volume_is_not_found(
    sim: RunPodSimulator, client: RunPodV2Client, others: tuple[str, ...]
) -> None:
    """NOT_FOUND is the affirmative "no pod on our volume" that gates a create."""
    for volume in others:
        sim.add_pod(volume_id=volume)
    sim.add_pod()  # a pod with no network volume at all
    found = await client.lookup_pods_by_volume(VOLUME)
    assert (found.lookup, found.pod_ids) == (Lookup.NOT_FOUND, ())


@pytest.mark.parametrize(
    "fault",
    [
        pytest.param({"status": 500}, id="500"),
        pytest.param({"status": 404}, id="problem-404"),
        pytest.param({"status": 404, "body": "text"}, id="bare-404"),
        pytest.param({"status": 200, "body": "malformed"}, id="malformed-json"),
        pytest.param({"status": 200, "body": "json", "json_body": {"pods": "none"}}, id="pods-not-a-list"),
        pytest.param({"status": 200, "body": "json", "json_body": {"items": []}}, id="pods-missing"),
        pytest.param({"status": 200, "body": "json", "json_body": {"pods": [7]}}, id="pod-not-an-object"),
        pytest.param(
            {"status": 200, "body": "json", "json_body": {"pods": [{"mounts": {"network": [{"volumeId": VOLUME}]}}]}},
            id="our-pod-without-an-id",
        ),
        pytest.param({"hang": True}, id="timeout"),
    ],
)
async def test_a_failed_volume_list_is_unreadable_never_not_found(
    sim: RunPodSimulator, impatient_client: RunPodV2Client, fault: dict[str, object]
) -> None:
    """A list we could not read is never "no pod" — that would bill a second pod next to a live one (#1998)."""
    sim.add_pod(volume_id=VOLUME, status="RUNNING")
    sim.inject("GET", "/v2/pods", **fault)  # type: ignore[arg-type]
    found = await impatient_client.lookup_pods_by_volume(VOLUME)
    assert (found.lookup, found.pod_ids) == (Lookup.UNREADABLE, ())


# --- create -----------------------------------------------------------------------------------------------------


async def test_a_created_pod_returns_201_and_its_id(sim: RunPodSimulator, client: RunPodV2Client) -> None:
    """A create with capacity answers 201 and the new pod's id, which the simulator now lists."""
    result = await create(client)
    assert result.http_status == 201
    assert result.pod_id is not None
    assert [pod["id"] for pod in sim.pods()] == [result.pod_id]


async def test_a_listed_gpu_without_capacity_answers_400_with_the_reason(
    sim: RunPodSimulator, client: RunPodV2Client
) -> None:
    """The 2026-09-11 incident: the RTX PRO 4500 is listed in EU-RO-1 but a create on it is a 400."""
    result = await create(client, gpu_id="NVIDIA RTX PRO 4500 Blackwell")
    assert (result.http_status, result.pod_id) == (400, None)
    assert "no longer any instances" in (result.detail or "")


@pytest.mark.parametrize(
    ("status", "retry_after", "expected_retry_after"),
    [
        pytest.param(402, None, None, id="402-payment"),
        pytest.param(403, None, None, id="403-forbidden"),
        pytest.param(422, None, None, id="422-unprocessable"),
        pytest.param(429, "12", 12.0, id="429-retry-after-seconds"),
        pytest.param(429, "0.5", 0.5, id="429-fractional-retry-after"),
        pytest.param(429, "Wed, 21 Oct 2026 07:28:00 GMT", None, id="429-http-date-ignored"),
        pytest.param(429, "soon", None, id="429-junk-ignored"),
        pytest.param(503, "30", 30.0, id="503-with-retry-after"),
        pytest.param(418, None, None, id="unexpected-status"),
    ],
)
async def test_create_statuses_pass_through_untouched(
    sim: RunPodSimulator,
    client: RunPodV2Client,
    status: int,
    retry_after: str | None,
    expected_retry_after: float | None,
) -> None:
    """The create-outcome policy classifies the raw status, so the client never reinterprets it."""
    sim.inject("POST", "/v2/pods", status=status, retry_after=retry_after)
    result = await create(client)
    assert (result.http_status, result.pod_id, result.retry_after_seconds) == (status, None, expected_retry_after)
    assert result.detail == "injected fault"


@pytest.mark.parametrize(
    ("status", "level"),
    [
        pytest.param(400, logging.INFO, id="400-the-next-gpu"),
        pytest.param(403, logging.INFO, id="403-the-next-gpu"),
        pytest.param(422, logging.WARNING, id="422-abort"),
        pytest.param(503, logging.WARNING, id="503-retry"),
    ],
)
async def test_a_card_that_cannot_be_placed_is_no_warning(
    sim: RunPodSimulator, client: RunPodV2Client, caplog: pytest.LogCaptureFixture, status: int, level: int
) -> None:
    """The create walk's expected 400/403 (it posts the next GPU) is an info line; what stops or stalls the walk
    stays a warning (issue 35: the first 400 of every wake alarmed for nothing)."""
    sim.inject("POST", "/v2/pods", status=status)
    with caplog.at_level(logging.DEBUG, logger="thermostat.providers.runpod.client"):
        await create(client)
    [line] = [r for r in caplog.records if r.getMessage().startswith("runpod POST /pods (")]
    assert line.levelno == level


async def test_a_create_whose_answer_never_arrives_is_status_zero(
    sim: RunPodSimulator, impatient_client: RunPodV2Client
) -> None:
    """A timed-out create may have placed a pod: status 0, which the walk aborts on instead of retrying blind."""
    sim.inject("POST", "/v2/pods", hang=True)
    result = await create(impatient_client)
    assert (result.http_status, result.pod_id) == (0, None)


async def test_a_gateway_502_after_commit_leaves_a_pod_the_volume_lookup_finds(
    sim: RunPodSimulator, client: RunPodV2Client
) -> None:
    """The pod was placed although the caller saw a 502; the volume re-read is what can adopt it."""
    sim.inject("POST", "/v2/pods", commit_then_fail=True)
    result = await create(client)
    assert (result.http_status, result.pod_id) == (502, None)
    found = await client.lookup_pods_by_volume(VOLUME)
    assert (found.lookup, len(found.pod_ids)) == (Lookup.FOUND, 1)


@pytest.mark.parametrize(
    ("status", "body", "pod_id"),
    [
        pytest.param(201, {"name": "qwen-test"}, None, id="201-without-id"),
        pytest.param(200, {"id": "offspec0000000"}, "offspec0000000", id="off-spec-200-with-id"),
        pytest.param(202, {"id": ""}, None, id="202-with-blank-id"),
    ],
)
async def test_a_2xx_create_reports_whatever_id_it_carried(
    sim: RunPodSimulator, client: RunPodV2Client, status: int, body: dict[str, object], pod_id: str | None
) -> None:
    """Any 2xx with an id is a billing pod; a 2xx without one is surfaced as such, not invented."""
    sim.inject("POST", "/v2/pods", status=status, body="json", json_body=body)
    result = await create(client)
    assert (result.http_status, result.pod_id) == (status, pod_id)


# --- actions ----------------------------------------------------------------------------------------------------


async def test_start_stop_and_terminate_report_acceptance_and_status(
    sim: RunPodSimulator, client: RunPodV2Client
) -> None:
    """Each action reports whether RunPod accepted it plus the HTTP status the audit trail records."""
    pod_id = sim.add_pod(volume_id=VOLUME, status="EXITED", price_per_hour=1.59)
    # start answers 200 + the Pod: the rate it now bills at and its GPU, which the audit trail records
    assert await client.start(pod_id) == ActionResult(
        ok=True, http_status=200, cost_per_hour=1.59, gpu_id="NVIDIA A100 80GB PCIe"
    )
    assert await client.start(pod_id) == ActionResult(
        ok=False, http_status=409, detail="action start is not valid for a pod in status RUNNING"
    )
    assert await client.stop(pod_id) == ActionResult(
        ok=True, http_status=200, cost_per_hour=0.0, gpu_id="NVIDIA A100 80GB PCIe"
    )
    assert await client.terminate(pod_id) == ActionResult(ok=True, http_status=204)
    gone = await client.terminate(pod_id)
    assert (gone.ok, gone.http_status, gone.not_found) == (False, 404, True)


async def test_a_bare_404_on_terminate_is_not_read_as_gone(sim: RunPodSimulator, client: RunPodV2Client) -> None:
    """Only RunPod's problem+json 404 says the pod is gone; a proxy page's 404 says nothing about it."""
    sim.inject("DELETE", "/v2/pods/*", status=404, body="text")
    answer = await client.terminate("p1")
    assert (answer.ok, answer.http_status, answer.not_found) == (False, 404, False)


async def test_an_action_without_an_answer_is_refused_with_status_zero(
    sim: RunPodSimulator, impatient_client: RunPodV2Client
) -> None:
    """A stop that timed out is not assumed to have happened."""
    pod_id = sim.add_pod(volume_id=VOLUME, status="RUNNING")
    sim.inject("POST", "/v2/pods/*/action", hang=True)
    assert await impatient_client.stop(pod_id) == ActionResult(ok=False, http_status=0)


# --- catalogue ------------------------------------------------------------------------------------------------


async def test_the_catalogue_reads_price_capacity_datacenters_and_vram(client: RunPodV2Client) -> None:
    """Each row keeps what GPU selection ranks on: secure price, availability per datacenter, VRAM."""
    catalog = {entry.id: entry for entry in await client.get_catalog()}
    a100 = catalog[A100]
    assert (a100.secure_price, a100.availability, a100.vram_gb) == (1.59, Availability.HIGH, 80)
    assert [(dc.id, dc.availability) for dc in a100.datacenters] == [
        ("EU-RO-1", Availability.MEDIUM),
        ("US-TX-3", Availability.HIGH),
    ]
    assert catalog["NVIDIA L40S"].datacenters[0].availability is Availability.NONE


async def test_catalogue_rows_without_availability_read_as_none(sim: RunPodSimulator, client: RunPodV2Client) -> None:
    """Absent availability is no capacity and absent datacenters are none, so nothing unknown is chosen."""
    sim.inject(
        "GET",
        "/v2/catalog/gpus",
        status=200,
        body="json",
        json_body={"gpus": [{"id": "X", "price": {"secure": 0.5}}, {"name": "no id"}]},
    )
    (entry,) = await client.get_catalog()
    assert (entry.id, entry.secure_price, entry.availability, entry.datacenters, entry.vram_gb) == (
        "X",
        0.5,
        Availability.NONE,
        (),
        None,
    )


@pytest.mark.parametrize(
    "fault",
    [
        pytest.param({"status": 500}, id="500"),
        pytest.param({"status": 200, "body": "malformed"}, id="malformed"),
        pytest.param({"hang": True}, id="timeout"),
    ],
)
async def test_a_failed_catalogue_is_empty(
    sim: RunPodSimulator, impatient_client: RunPodV2Client, fault: dict[str, object]
) -> None:
    """No catalogue means no candidates, and no candidates means nothing is billed."""
    sim.inject("GET", "/v2/catalog/gpus", **fault)  # type: ignore[arg-type]
    assert await impatient_client.get_catalog() == ()


# --- metrics scrape ---------------------------------------------------------------------------------------------


async def test_a_ready_pod_serves_its_vllm_exposition(sim: RunPodSimulator, client: RunPodV2Client) -> None:
    """Once the model is loaded the proxy returns vLLM's text, counters included."""
    pod_id = sim.add_pod(volume_id=VOLUME, status="RUNNING")
    sim.record_turn(pod_id, prompt_tokens=120, gen_tokens=45)
    text = await client.fetch_metrics(pod_id, 8000)
    assert text is not None
    model = sim.settings.model_name
    assert f'vllm:generation_tokens_total{{engine="0",model_name="{model}"}} 45.0' in text.splitlines()


@pytest.mark.parametrize(
    "arrange",
    [
        pytest.param(lambda sim, pod: sim.set_pod_status(pod, "EXITED"), id="stopped-404"),
        pytest.param(lambda sim, pod: sim.set_pod_lifecycle(pod, model_ready_seconds=60), id="model-loading-502"),
        pytest.param(lambda sim, pod: sim.kill_vllm(pod), id="vllm-dead-502"),
        pytest.param(lambda sim, pod: sim.inject("GET", "/proxy/*", hang=True), id="timeout"),
        pytest.param(lambda sim, pod: sim.inject("GET", "/proxy/*", status=524, body="text"), id="cloudflare-524"),
    ],
)
async def test_a_pod_that_cannot_answer_metrics_reads_none(
    sim: RunPodSimulator, impatient_client: RunPodV2Client, arrange: object
) -> None:
    """Not serving, still loading, dead or unreachable are all "no scrape", for the monitor to classify."""
    pod_id = sim.add_pod(volume_id=VOLUME, status="RUNNING")
    arrange(sim, pod_id)  # type: ignore[operator]
    assert await impatient_client.fetch_metrics(pod_id, 8000) is None


async def test_the_wrong_port_reads_none(sim: RunPodSimulator, client: RunPodV2Client) -> None:
    """The proxy routes only the pod's exposed port."""
    pod_id = sim.add_pod(volume_id=VOLUME, status="RUNNING")
    assert await client.fetch_metrics(pod_id, 8001) is None


async def test_observe_volume_reads_every_pod_from_one_list_call(client, sim) -> None:
    """GET /v2/pods once: the volume's pods in list order, each read with the observe rules; others left out."""
    running = sim.add_pod(volume_id="bjn7d94ej9", status="RUNNING")
    stopped = sim.add_pod(volume_id="bjn7d94ej9", status="EXITED")
    sim.add_pod(volume_id="agv6w2qcg7", datacenter_id="US-TX-3", status="RUNNING")
    sim.clear_requests()
    volume, pods = await client.observe_volume("bjn7d94ej9")
    assert (volume.lookup, volume.pod_ids) == (Lookup.FOUND, (running, stopped))
    assert [(p.pod_id, p.status, p.gpu_count) for p in pods] == [
        (running, PodStatus.RUNNING, 1),
        (stopped, PodStatus.EXITED, 1),
    ]
    assert [(r.method, r.path) for r in sim.requests()] == [("GET", "/v2/pods")]


async def test_observe_volume_observes_by_id_a_running_pod_listed_without_runtime(client, sim) -> None:
    """Both list shapes: with `runtime` one call; without it the RUNNING pod is read by id (RUNNING, 1 GPU),
    the EXITED one still from the list."""
    running = sim.add_pod(volume_id="bjn7d94ej9", status="RUNNING")
    stopped = sim.add_pod(volume_id="bjn7d94ej9", status="EXITED")
    for list_without_runtime, calls in (
        (False, [("GET", "/v2/pods")]),
        (True, [("GET", "/v2/pods"), ("GET", f"/v2/pods/{running}")]),
    ):
        sim.configure(list_without_runtime=list_without_runtime)
        sim.clear_requests()
        volume, pods = await client.observe_volume("bjn7d94ej9")
        assert volume.pod_ids == (running, stopped)
        assert [(p.pod_id, p.status, p.gpu_count) for p in pods] == [
            (running, PodStatus.RUNNING, 1),
            (stopped, PodStatus.EXITED, 1),
        ]
        assert [(r.method, r.path) for r in sim.requests()] == calls


async def test_a_running_pod_listed_without_runtime_whose_observe_fails_is_unreadable(client, sim) -> None:
    """The by-id read decides, as in the pod-control seed: a failed observe is UNREADABLE, not the list's STARTING."""
    running = sim.add_pod(volume_id="bjn7d94ej9", status="RUNNING")
    sim.configure(list_without_runtime=True)
    sim.inject("GET", f"/v2/pods/{running}", status=500)
    volume, (pod,) = await client.observe_volume("bjn7d94ej9")
    assert volume.lookup is Lookup.FOUND
    assert (pod.pod_id, pod.lookup) == (running, Lookup.UNREADABLE)


async def test_observe_volume_keeps_a_failed_list_unreadable(client, sim) -> None:
    """A 500 on the list is UNREADABLE with no pods, never the NOT_FOUND that gates a create."""
    sim.inject("GET", "/v2/pods", status=500)
    volume, pods = await client.observe_volume("bjn7d94ej9")
    assert (volume.lookup, pods) == (Lookup.UNREADABLE, ())
