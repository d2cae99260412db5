"""The simulated RunPod v2 API: pod lifecycle, actions, create validation, auth and the catalogue."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from thermostat.dev.simulators.runpod.server import RunPodSimulator

VOLUME = "bjn7d94ej9"
A100 = "NVIDIA A100 80GB PCIe"
PROBLEM = "application/problem+json"


def create_body(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "name": "qwen-test",
        "templateId": "cnz5fxyadi",
        "cloud": "SECURE",
        "dataCenterIds": ["EU-RO-1"],
        "gpu": {"id": A100, "count": 1},
        "mounts": {"network": [{"volumeId": VOLUME, "path": "/workspace"}]},
    }
    body.update(overrides)
    return {key: value for key, value in body.items() if value is not None}


def action(http: httpx.Client, headers: dict[str, str], pod_id: str, name: str) -> httpx.Response:
    return http.post(f"/v2/pods/{pod_id}/action", json={"action": name}, headers=headers)


def test_a_created_pod_provisions_then_starts_then_runs(
    sim: RunPodSimulator, clock: Any, http: httpx.Client, api_headers: dict[str, str]
) -> None:
    """Each phase lasts its configured delay; runtime is null until RUNNING, and billing starts at create."""
    sim.configure(provisioning_seconds=10, starting_seconds=20)
    created = http.post("/v2/pods", json=create_body(), headers=api_headers)
    assert created.status_code == 201
    pod = created.json()
    assert (pod["status"], pod["runtime"], pod["cost"], pod["dataCenterId"]) == ("PROVISIONING", None, 1.59, "EU-RO-1")
    assert pod["actions"] == ["stop", "terminate"]
    clock.advance(10)
    assert http.get(f"/v2/pods/{pod['id']}", headers=api_headers).json()["status"] == "STARTING"
    clock.advance(20)
    running = http.get(f"/v2/pods/{pod['id']}", headers=api_headers).json()
    assert (running["status"], running["runtime"]["uptime"], len(running["runtime"]["gpus"])) == ("RUNNING", 1, 1)
    assert running["actions"] == ["stop", "restart", "terminate"]
    clock.advance(42)
    assert http.get(f"/v2/pods/{pod['id']}", headers=api_headers).json()["runtime"]["uptime"] == 42


def test_zero_delays_run_at_once(sim: RunPodSimulator, http: httpx.Client, api_headers: dict[str, str]) -> None:
    """With no delays the create answer itself is RUNNING, with a live uptime and every GPU attached."""
    pod = http.post("/v2/pods", json=create_body(gpu={"id": A100, "count": 2}), headers=api_headers).json()
    assert pod["status"] == "RUNNING"
    assert pod["runtime"]["uptime"] >= 1
    assert len(pod["runtime"]["gpus"]) == 2
    assert pod["cost"] == pytest.approx(3.18)


def test_a_negative_delay_holds_the_pod_in_that_phase(
    sim: RunPodSimulator, clock: Any, http: httpx.Client, api_headers: dict[str, str]
) -> None:
    """A held phase lets a test look at an in-flight pod for as long as it needs."""
    sim.configure(starting_seconds=-1)
    pod_id = http.post("/v2/pods", json=create_body(), headers=api_headers).json()["id"]
    clock.advance(3600)
    assert http.get(f"/v2/pods/{pod_id}", headers=api_headers).json()["status"] == "STARTING"
    sim.set_pod_lifecycle(pod_id, starting_seconds=0)
    assert http.get(f"/v2/pods/{pod_id}", headers=api_headers).json()["status"] == "RUNNING"


def test_a_stopped_pod_starts_again_under_the_same_id_with_fresh_counters(
    sim: RunPodSimulator, http: httpx.Client, api_headers: dict[str, str]
) -> None:
    """RunPod reuses the id across stop/start, and the new vLLM process counts from zero (#2075)."""
    pod_id = http.post("/v2/pods", json=create_body(), headers=api_headers).json()["id"]
    sim.record_turn(pod_id, prompt_tokens=100, gen_tokens=50)
    stopped = action(http, api_headers, pod_id, "stop")
    assert stopped.status_code == 200
    assert (stopped.json()["status"], stopped.json()["cost"], stopped.json()["runtime"]) == ("EXITED", 0, None)
    assert stopped.json()["actions"] == ["start", "terminate"]
    started = action(http, api_headers, pod_id, "start")
    assert (started.status_code, started.json()["id"], started.json()["status"]) == (200, pod_id, "RUNNING")
    (state,) = sim.pods()
    assert state["vllm"] == {
        "running": 0,
        "waiting": 0,
        "promptTokens": 0,
        "generationTokens": 0,
        "requestSuccess": {"stop": 0, "length": 0, "abort": 0, "error": 0, "repetition": 0},
    }


@pytest.mark.parametrize(
    ("status", "verb"),
    [
        pytest.param("RUNNING", "start", id="start-running"),
        pytest.param("EXITED", "stop", id="stop-exited"),
        pytest.param("EXITED", "restart", id="restart-exited"),
        pytest.param("ERROR", "stop", id="stop-error"),
        pytest.param("PROVISIONING", "start", id="start-provisioning"),
        pytest.param("STARTING", "restart", id="restart-starting"),
    ],
)
def test_an_action_the_status_does_not_allow_is_a_409_problem(
    sim: RunPodSimulator, http: httpx.Client, api_headers: dict[str, str], status: str, verb: str
) -> None:
    """The v2 actions table decides; anything else conflicts and leaves the pod as it was."""
    sim.configure(provisioning_seconds=-1, starting_seconds=-1)
    pod_id = sim.add_pod(volume_id=VOLUME, status=status)
    answer = action(http, api_headers, pod_id, verb)
    assert (answer.status_code, answer.headers["content-type"]) == (409, PROBLEM)
    assert answer.json()["status"] == 409
    assert sim.pod(pod_id)["status"] == status


def test_an_unknown_action_is_a_400(sim: RunPodSimulator, http: httpx.Client, api_headers: dict[str, str]) -> None:
    """v1's reset has no v2 equivalent."""
    pod_id = sim.add_pod(volume_id=VOLUME, status="RUNNING")
    assert action(http, api_headers, pod_id, "reset").status_code == 400


def test_terminate_and_delete_remove_the_pod(
    sim: RunPodSimulator, http: httpx.Client, api_headers: dict[str, str]
) -> None:
    """Both ways answer 204; afterwards the pod is a problem+json 404."""
    by_action = sim.add_pod(volume_id=VOLUME, status="RUNNING")
    by_delete = sim.add_pod(volume_id=VOLUME, status="EXITED")
    assert action(http, api_headers, by_action, "terminate").status_code == 204
    assert http.delete(f"/v2/pods/{by_delete}", headers=api_headers).status_code == 204
    for pod_id in (by_action, by_delete):
        gone = http.get(f"/v2/pods/{pod_id}", headers=api_headers)
        assert (gone.status_code, gone.headers["content-type"], gone.json()["status"]) == (404, PROBLEM, 404)
    assert http.get("/v2/pods", headers=api_headers).json() == {"pods": []}


def test_a_terminated_pod_lingers_when_configured(
    sim: RunPodSimulator, clock: Any, http: httpx.Client, api_headers: dict[str, str]
) -> None:
    """With a linger the pod is listed as TERMINATED (no actions, no cost) until the linger passes."""
    sim.configure(terminated_linger_seconds=30)
    pod_id = sim.add_pod(volume_id=VOLUME, status="RUNNING")
    http.delete(f"/v2/pods/{pod_id}", headers=api_headers)
    pod = http.get(f"/v2/pods/{pod_id}", headers=api_headers).json()
    assert (pod["status"], pod["actions"], pod["cost"]) == ("TERMINATED", [], 0)
    clock.advance(30)
    assert http.get(f"/v2/pods/{pod_id}", headers=api_headers).status_code == 404


@pytest.mark.parametrize(
    ("overrides", "error"),
    [
        pytest.param({"name": None}, "$.name: name is required", id="no-name"),
        pytest.param({"name": ""}, "$.name: name is required", id="empty-name"),
        pytest.param({"name": "  "}, "$.name: name is required", id="blank-name"),
        pytest.param({"templateId": ""}, "$.templateId: must be a non-empty string", id="empty-template-id"),
        pytest.param({"gpu": {"count": 1}}, "$.gpu.id: gpu.id is required", id="gpu-without-id"),
        pytest.param({"gpu": {"id": A100, "count": 0}}, "$.gpu.count", id="zero-gpus"),
        pytest.param({"cloud": "ANY"}, "$.cloud: cloud must be one of SECURE, COMMUNITY", id="bad-cloud"),
        pytest.param({"dataCenterIds": "EU-RO-1"}, "$.dataCenterIds", id="datacenters-not-a-list"),
        pytest.param({"env": {"N": 1}}, "$.env: env must be an object of strings", id="env-not-strings"),
        pytest.param({"disk": 0}, "$.disk", id="zero-disk"),
        pytest.param({"mounts": {"network": [{"volumeId": VOLUME}]}}, "network[0].path", id="mount-without-path"),
        pytest.param(
            {"gpu": None, "cpu": {"vcpuCount": 2}, "image": "busybox"}, "$.cpu.id: cpu.id is required", id="cpu-no-id"
        ),
        pytest.param(
            {"gpu": None, "cpu": {"id": "cpu3g", "vcpuCount": 1}, "image": "busybox"}, "$.cpu.vcpuCount", id="one-vcpu"
        ),
    ],
)
def test_a_create_that_does_not_match_the_contract_is_a_422_listing_each_violation(
    sim: RunPodSimulator, http: httpx.Client, api_headers: dict[str, str], overrides: dict[str, Any], error: str
) -> None:
    """Spec v2.9.0, POST /v2/pods: "422 | The body does not match the contract. `errors` lists each violation. |
    Fix the request. Never retry." Nothing is created."""
    answer = http.post("/v2/pods", json=create_body(**overrides), headers=api_headers)
    assert (answer.status_code, answer.headers["content-type"]) == (422, PROBLEM)
    problem = answer.json()
    assert (problem["title"], problem["status"], problem["detail"]) == (
        "Unprocessable Entity",
        422,
        "Request validation failed.",
    )
    assert any(error in listed for listed in problem["errors"]), problem["errors"]
    assert sim.pods() == []


def test_a_422_lists_every_violation_not_just_the_first(
    sim: RunPodSimulator, http: httpx.Client, api_headers: dict[str, str]
) -> None:
    """`errors` lists each violation."""
    answer = http.post("/v2/pods", json=create_body(name=None, cloud="ANY"), headers=api_headers)
    assert answer.status_code == 422
    assert [error.split(":")[0] for error in answer.json()["errors"]] == ["$.name", "$.cloud"]


def test_a_body_that_is_not_an_object_is_a_422_and_one_that_is_not_json_a_400(
    sim: RunPodSimulator, http: httpx.Client, api_headers: dict[str, str]
) -> None:
    """A JSON array breaks the contract; bytes that are not JSON never reach it."""
    assert http.post("/v2/pods", json=["qwen"], headers=api_headers).status_code == 422
    garbled = http.post("/v2/pods", content=b"{not json", headers={**api_headers, "Content-Type": "application/json"})
    assert garbled.status_code == 400
    assert sim.pods() == []


def test_a_create_naming_a_serverless_template_is_a_422(
    sim: RunPodSimulator, http: httpx.Client, api_headers: dict[str, str]
) -> None:
    """templateId: "must not be a serverless template (→ 422)"."""
    sim.configure(serverless_template_id="sls0template")
    answer = http.post("/v2/pods", json=create_body(templateId="sls0template"), headers=api_headers)
    assert answer.status_code == 422
    assert "sls0template is a serverless template" in answer.json()["errors"][0]
    assert sim.pods() == []


@pytest.mark.parametrize(
    ("overrides", "detail"),
    [
        pytest.param({"gpu": None}, "exactly one of gpu and cpu", id="neither-gpu-nor-cpu"),
        pytest.param({"cpu": {"id": "cpu3g", "vcpuCount": 2}}, "exactly one of gpu and cpu", id="both-gpu-and-cpu"),
        pytest.param({"templateId": None}, "image is required", id="no-image-no-template"),
        pytest.param(
            {"gpu": None, "cpu": {"id": "cpu3g", "vcpuCount": 6}, "image": "busybox"},
            "cpu.vcpuCount must be one of",
            id="vcpus-not-a-power-of-two",
        ),
        pytest.param({"ports": ["http"]}, "ports must be a list like", id="port-without-number"),
        pytest.param({"gpu": {"id": "NVIDIA Imaginary 9000"}}, "unknown GPU type", id="unknown-gpu"),
        pytest.param(
            {"mounts": {"network": [{"volumeId": "nosuchvol", "path": "/workspace"}]}},
            "does not exist",
            id="unknown-volume",
        ),
        pytest.param({"dataCenterIds": ["US-TX-3"]}, "not in dataCenterIds", id="volume-in-another-datacenter"),
        pytest.param({"gpu": {"id": "NVIDIA L40S", "count": 1}}, "no longer any instances", id="gpu-none-in-dc"),
        pytest.param(
            {"gpu": {"id": "NVIDIA H100 80GB HBM3", "count": 1}}, "no longer any instances", id="gpu-not-in-dc"
        ),
        pytest.param(
            {"gpu": {"id": "NVIDIA RTX PRO 4500 Blackwell", "count": 1}},
            "no longer any instances",
            id="listed-but-no-capacity",
        ),
    ],
)
def test_a_create_that_breaks_a_cross_field_rule_or_cannot_be_placed_is_a_400_problem(
    sim: RunPodSimulator, http: httpx.Client, api_headers: dict[str, str], overrides: dict[str, Any], detail: str
) -> None:
    """Spec v2.9.0: "400 | The body matches the contract but was rejected — either it breaks a cross-field rule, or
    this GPU and data center combination could not be placed. | Try your next candidate." Each names its reason
    and creates nothing."""
    answer = http.post("/v2/pods", json=create_body(**overrides), headers=api_headers)
    assert (answer.status_code, answer.headers["content-type"]) == (400, PROBLEM)
    assert detail in answer.json()["detail"]
    assert sim.pods() == []


def test_a_create_without_datacenters_lands_in_the_volumes_datacenter(
    sim: RunPodSimulator, http: httpx.Client, api_headers: dict[str, str]
) -> None:
    """The network volume pins the datacenter."""
    body = create_body(dataCenterIds=None, mounts={"network": [{"volumeId": "agv6w2qcg7", "path": "/workspace"}]})
    assert http.post("/v2/pods", json=body, headers=api_headers).json()["dataCenterId"] == "US-TX-3"


def test_a_cpu_pod_needs_no_gpu(sim: RunPodSimulator, http: httpx.Client, api_headers: dict[str, str]) -> None:
    """Exactly one of gpu / cpu: a cpu pod is valid; its answer has no `gpu` ("omitted from CPU pods") and its `cpu`
    is the spec's CpuConfig (id, vcpuCount, memory)."""
    body = create_body(gpu=None, cpu={"id": "cpu3g", "vcpuCount": 4}, image="busybox")
    answer = http.post("/v2/pods", json=body, headers=api_headers)
    assert answer.status_code == 201
    assert "gpu" not in answer.json()
    assert answer.json()["cpu"] == {"id": "cpu3g", "vcpuCount": 4, "memory": 16}


@pytest.mark.parametrize(
    "headers",
    [
        pytest.param({}, id="no-bearer"),
        pytest.param({"Authorization": "Bearer wrong"}, id="wrong-bearer"),
        pytest.param({"Authorization": "rpa_SIMTEST_0d4e8b"}, id="key-without-scheme"),
    ],
)
def test_the_api_refuses_without_the_expected_bearer(
    sim: RunPodSimulator, http: httpx.Client, headers: dict[str, str]
) -> None:
    """Every /v2 route is a 401 problem without the key."""
    for method, path in (("GET", "/v2/pods"), ("GET", "/v2/catalog/gpus"), ("POST", "/v2/pods")):
        answer = http.request(method, path, headers=headers, json={} if method == "POST" else None)
        assert (answer.status_code, answer.headers["content-type"]) == (401, PROBLEM)
    assert sim.pods() == []


def test_the_catalogue_needs_a_product_with_availability(
    sim: RunPodSimulator, http: httpx.Client, api_headers: dict[str, str]
) -> None:
    """include=AVAILABILITY without product is a 400; with it each row carries availability per datacenter."""
    assert http.get("/v2/catalog/gpus?include=AVAILABILITY", headers=api_headers).status_code == 400
    plain = http.get("/v2/catalog/gpus", headers=api_headers).json()["gpus"]
    assert all("availability" not in row and "dataCenters" not in row for row in plain)
    rows = http.get("/v2/catalog/gpus?include=AVAILABILITY&product=POD", headers=api_headers).json()["gpus"]
    pro4500 = next(row for row in rows if row["id"] == "NVIDIA RTX PRO 4500 Blackwell")
    assert pro4500["dataCenters"] == [
        {"id": "EU-RO-1", "name": "EU Romania 1", "availability": "LOW"},
        {"id": "US-KS-2", "name": "US Kansas 2", "availability": "MEDIUM"},
    ]
    assert {"price", "memory", "maxCount", "secure", "community"} <= pro4500.keys()


def test_the_default_catalogue_replays_the_price_cap_incident(
    sim: RunPodSimulator, http: httpx.Client, api_headers: dict[str, str]
) -> None:
    """In EU-RO-1, ≥ 32 GB and ≤ 1.00 USD/h leaves only the RTX PRO 4500 (which 400s); ≤ 2.00 adds the A100."""
    rows = http.get("/v2/catalog/gpus?include=AVAILABILITY&product=POD", headers=api_headers).json()["gpus"]

    def eligible(cap: float) -> list[str]:
        in_dc = [(row, next((dc for dc in row["dataCenters"] if dc["id"] == "EU-RO-1"), None)) for row in rows]
        return [
            row["id"]
            for row, dc in sorted(in_dc, key=lambda pair: pair[0]["price"]["secure"])
            if dc and dc["availability"] != "NONE" and row["memory"] >= 32 and row["price"]["secure"] <= cap
        ]

    assert eligible(1.00) == ["NVIDIA RTX PRO 4500 Blackwell"]
    assert eligible(2.00)[:2] == ["NVIDIA RTX PRO 4500 Blackwell", A100]


def test_a_billed_stretch_names_the_volume_its_pod_mounted_even_after_the_pod_is_gone(sim: RunPodSimulator) -> None:
    """Who billed on which volume stays answerable once a terminated pod has left the listing."""
    pod_id = sim.add_pod(volume_id="bjn7d94ej9", status="RUNNING")
    sim.set_pod_status(pod_id, "TERMINATED")
    (stretch,) = sim.billed()
    assert (stretch.pod_id, stretch.volume_id, stretch.end is not None) == (pod_id, "bjn7d94ej9", True)
    assert stretch.to_json()["volumeId"] == "bjn7d94ej9"
    assert sim.pods() == []
