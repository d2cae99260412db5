"""Driving the simulator: scripted faults, the request log, the /_sim HTTP control API and the standalone CLI."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any

import httpx
import pytest

from thermostat.dev.simulators.faults import MIX_KINDS, FaultMix
from thermostat.dev.simulators.runpod.server import RunPodSimulator

VOLUME = "bjn7d94ej9"
CREATE = {
    "name": "qwen-test",
    "templateId": "cnz5fxyadi",
    "dataCenterIds": ["EU-RO-1"],
    "gpu": {"id": "NVIDIA A100 80GB PCIe", "count": 1},
    "mounts": {"network": [{"volumeId": VOLUME, "path": "/workspace"}]},
}


# --- faults -----------------------------------------------------------------------------------------------------


def test_a_fault_hits_the_next_n_matching_requests_then_the_route_recovers(
    sim: RunPodSimulator, http: httpx.Client, api_headers: dict[str, str]
) -> None:
    """count=2 fails exactly two requests on that method and path; other routes are untouched."""
    sim.inject("GET", "/v2/pods", status=503, count=2)
    assert http.get("/v2/catalog/gpus", headers=api_headers).status_code == 200
    assert [http.get("/v2/pods", headers=api_headers).status_code for _ in range(3)] == [503, 503, 200]
    assert sim.faults() == []


def test_a_fault_without_a_count_persists_and_matches_by_method_and_glob(
    sim: RunPodSimulator, http: httpx.Client, api_headers: dict[str, str]
) -> None:
    """count=None keeps failing; the method and the glob both have to match."""
    pod_id = sim.add_pod(volume_id=VOLUME, status="RUNNING")
    sim.inject("POST", "/v2/pods/*/action", status=500, count=None)
    for _ in range(3):
        assert http.post(f"/v2/pods/{pod_id}/action", json={"action": "stop"}, headers=api_headers).status_code == 500
    assert http.get(f"/v2/pods/{pod_id}", headers=api_headers).status_code == 200
    sim.clear_faults()
    assert http.post(f"/v2/pods/{pod_id}/action", json={"action": "stop"}, headers=api_headers).status_code == 200


@pytest.mark.parametrize(
    ("body", "content_type", "check"),
    [
        pytest.param(
            "problem",
            "application/problem+json",
            lambda a: a.json() == {"title": "Too Many Requests", "status": 429, "detail": "injected fault"},
            id="problem",
        ),
        pytest.param("text", "text/plain; charset=utf-8", lambda a: a.text == "429 too many requests\n", id="text"),
        pytest.param("malformed", "application/json", lambda a: a.text == '{"id": "trunc', id="malformed"),
        pytest.param("empty", None, lambda a: a.content == b"", id="empty"),
    ],
)
def test_a_fault_answers_with_the_chosen_body_and_retry_after(
    sim: RunPodSimulator,
    http: httpx.Client,
    api_headers: dict[str, str],
    body: str,
    content_type: str | None,
    check: Any,
) -> None:
    """Body kind and Retry-After are scripted exactly."""
    sim.inject("GET", "/v2/pods", status=429, body=body, retry_after="7")
    answer = http.get("/v2/pods", headers=api_headers)
    assert (answer.status_code, answer.headers["retry-after"], answer.headers.get("content-type")) == (
        429,
        "7",
        content_type,
    )
    assert check(answer)


def test_a_delay_fault_slows_the_answer_but_serves_it(
    sim: RunPodSimulator, http: httpx.Client, api_headers: dict[str, str]
) -> None:
    """A pure delay is served normally after the wait."""
    sim.inject("GET", "/v2/pods", delay_seconds=0.2)
    started = time.monotonic()
    answer = http.get("/v2/pods", headers=api_headers)
    assert answer.status_code == 200
    assert time.monotonic() - started >= 0.2


def test_a_hang_fault_outlasts_the_client_timeout(
    sim: RunPodSimulator, http: httpx.Client, api_headers: dict[str, str]
) -> None:
    """The request never gets an answer; the caller's timeout is what ends it."""
    sim.inject("GET", "/v2/pods", hang=True)
    with pytest.raises(httpx.ReadTimeout):
        http.get("/v2/pods", headers=api_headers, timeout=0.2)
    assert http.get("/v2/pods", headers=api_headers).status_code == 200


def test_commit_then_fail_creates_the_pod_but_answers_a_gateway_502(
    sim: RunPodSimulator, http: httpx.Client, api_headers: dict[str, str]
) -> None:
    """The gateway-5xx-after-commit incident: the caller sees a failure while a pod now bills."""
    sim.inject("POST", "/v2/pods", commit_then_fail=True)
    assert http.post("/v2/pods", json=CREATE, headers=api_headers).status_code == 502
    (pod,) = http.get("/v2/pods", headers=api_headers).json()["pods"]
    assert (pod["status"], pod["mounts"]["network"][0]["volumeId"]) == ("RUNNING", VOLUME)


def test_a_fault_mix_fails_its_share_of_api_calls_each_in_its_kind_and_counts_them(
    sim: RunPodSimulator, http: httpx.Client, api_headers: dict[str, str]
) -> None:
    """Half the reads fail, each as a 502, a 429 with Retry-After, a bare 404 or a cut-off 200; control calls
    never do, and a create-only kind is never drawn for a read."""
    mix = FaultMix(rate=0.5, seed=7, kinds=("5xx", "429", "bare-404", "malformed-json", "commit-then-5xx"))
    sim.fail_at_random(mix)
    answers = [http.get("/v2/pods", headers=api_headers) for _ in range(200)]
    assert all(http.get("/_sim/state").status_code == 200 for _ in range(20))

    served = sim.served_faults()
    assert 60 < len(served) < 140 and sum(mix.counts.values()) == len(served)
    assert set(mix.counts) == {"5xx", "429", "bare-404", "malformed-json"}
    failed = [a for a in answers if a.status_code != 200 or a.content.startswith(b'{"id": "trunc')]
    assert len(failed) == len(served)
    by_status = {a.status_code for a in failed}
    assert by_status == {502, 429, 404, 200}
    assert all(a.headers["retry-after"] == "1" for a in failed if a.status_code == 429)
    assert all(a.headers["content-type"].startswith("text/plain") for a in failed if a.status_code == 404)
    assert {entry.fault.kind for entry in served} == set(mix.counts)


def test_a_fault_mix_draws_commit_then_5xx_only_for_a_create_which_then_bills(
    sim: RunPodSimulator, http: httpx.Client, api_headers: dict[str, str]
) -> None:
    sim.fail_at_random(FaultMix(rate=1.0, kinds=("commit-then-5xx",)))
    assert http.get("/v2/pods", headers=api_headers).status_code == 200
    assert http.post("/v2/pods", json=CREATE, headers=api_headers).status_code == 502
    sim.fail_at_random(None)
    (pod,) = http.get("/v2/pods", headers=api_headers).json()["pods"]
    assert pod["status"] == "RUNNING"
    ((entry, kind),) = [(e.request, e.fault.kind) for e in sim.served_faults()]
    assert (entry.method, entry.path, kind) == ("POST", "/v2/pods", "commit-then-5xx")


def test_a_timeout_drawn_by_the_mix_outlasts_the_client_timeout(
    sim: RunPodSimulator, http: httpx.Client, api_headers: dict[str, str]
) -> None:
    sim.configure(hang_seconds=1.0)
    sim.fail_at_random(FaultMix(rate=1.0, kinds=("timeout",)))
    with pytest.raises(httpx.ReadTimeout):
        http.get("/v2/pods", headers=api_headers, timeout=0.2)


def test_a_fault_mix_refuses_a_rate_outside_zero_to_one_and_unknown_kinds() -> None:
    with pytest.raises(ValueError, match="rate"):
        FaultMix(rate=1.5)
    with pytest.raises(ValueError, match="kinds"):
        FaultMix(rate=0.2, kinds=("flaky",))
    assert FaultMix(rate=0.2).kinds == MIX_KINDS


# --- request log ----------------------------------------------------------------------------------------------


def test_the_request_log_records_method_path_query_headers_and_body(
    sim: RunPodSimulator, http: httpx.Client, api_headers: dict[str, str]
) -> None:
    """Each request is kept as it arrived, percent-encoding included; control calls only on request."""
    http.post("/v2/pods?dryRun=1", json=CREATE, headers={**api_headers, "X-Trace": "t1"})
    http.get("/v2/pods/a%2Fb", headers=api_headers)
    http.get("/_sim/state")
    first, second = sim.requests()
    assert (first.method, first.path, first.query, first.params) == ("POST", "/v2/pods", "dryRun=1", {"dryRun": ["1"]})
    assert (first.headers["x-trace"], first.json_body) == ("t1", CREATE)
    assert (second.method, second.path, second.body, second.json_body) == ("GET", "/v2/pods/a%2Fb", "", None)
    assert [r.path for r in sim.requests(include_control=True)][-1] == "/_sim/state"
    assert [r.path for r in sim.requests("/v2/pods/")] == ["/v2/pods/a%2Fb"]
    sim.clear_requests()
    assert sim.requests() == []


# --- /_sim over HTTP ------------------------------------------------------------------------------------------


def test_the_http_control_api_drives_a_whole_scenario(
    sim: RunPodSimulator, http: httpx.Client, api_headers: dict[str, str], browser: dict[str, str]
) -> None:
    """Everything a test in another process (or `make run`) needs is reachable under /_sim as JSON."""
    assert http.post("/_sim/volumes", json={"id": "vol-demo", "dataCenterId": "US-TX-3"}).status_code == 200
    assert http.post("/_sim/next-pod-ids", json={"ids": ["demo0000000001"]}).status_code == 200
    created = http.post(
        "/v2/pods",
        headers=api_headers,
        json={
            **CREATE,
            "dataCenterIds": ["US-TX-3"],
            "mounts": {"network": [{"volumeId": "vol-demo", "path": "/workspace"}]},
        },
    )
    assert created.json()["id"] == "demo0000000001"
    pod = "demo0000000001"
    assert http.post(f"/_sim/pods/{pod}/turn", json={"promptTokens": 5, "generationTokens": 6}).status_code == 200
    state = http.post(f"/_sim/pods/{pod}/in-flight", json={"running": 1, "waiting": 0}).json()
    assert (state["vllm"]["running"], state["vllm"]["generationTokens"], state["modelReady"]) == (1, 6, True)
    assert "vllm:num_requests_running" in http.get(f"/proxy/{pod}-8000/metrics", headers=browser).text
    assert http.post(f"/_sim/pods/{pod}/vllm", json={"alive": False}).json()["vllmAlive"] is False
    assert http.get(f"/proxy/{pod}-8000/metrics", headers=browser).status_code == 502
    http.post(f"/_sim/pods/{pod}/patch", json={"fields": {"runtime": {}}})
    assert http.get(f"/v2/pods/{pod}", headers=api_headers).json()["runtime"] == {}
    http.post(f"/_sim/pods/{pod}/patch", json={"fields": None})
    http.post(f"/_sim/pods/{pod}/status", json={"status": "EXITED"})
    assert http.get(f"/v2/pods/{pod}", headers=api_headers).json()["status"] == "EXITED"
    http.post(f"/_sim/pods/{pod}/lifecycle", json={"startingSeconds": -1})
    http.post(f"/v2/pods/{pod}/action", json={"action": "start"}, headers=api_headers)
    assert http.get(f"/v2/pods/{pod}", headers=api_headers).json()["status"] == "STARTING"
    seeded = http.post("/_sim/pods", json={"volumeId": VOLUME, "status": "RUNNING", "id": "seed0000000001"})
    assert (seeded.status_code, seeded.json()["status"], seeded.json()["dataCenterId"]) == (201, "RUNNING", "EU-RO-1")
    assert [p["id"] for p in http.get("/_sim/pods").json()] == [pod, "seed0000000001"]
    assert [r["path"] for r in http.get("/_sim/requests", params={"prefix": "/proxy"}).json()] == [
        f"/proxy/{pod}-8000/metrics",
        f"/proxy/{pod}-8000/metrics",
    ]
    assert http.post("/_sim/reset").status_code == 200
    assert http.get("/_sim/state").json()["pods"] == []


def test_http_control_of_settings_catalogue_and_faults(
    sim: RunPodSimulator, http: httpx.Client, api_headers: dict[str, str]
) -> None:
    """Settings change all-or-nothing, the catalogue can be replaced, faults scripted and cleared."""
    assert http.put("/_sim/settings", json={"modelReadySeconds": 2, "listNewestFirst": True}).status_code == 200
    assert http.get("/_sim/settings").json()["modelReadySeconds"] == 2.0
    refused = http.put("/_sim/settings", json={"hangSeconds": 1, "requireBrowserUserAgent": "yes"})
    assert refused.status_code == 400
    assert http.get("/_sim/settings").json()["hangSeconds"] == 30.0
    assert http.put("/_sim/settings", json={"noSuchKnob": 1}).status_code == 400
    catalog = {
        "gpus": [
            {
                "id": "NVIDIA Test",
                "memory": 40,
                "price": {"secure": 0.9},
                "dataCenters": [{"id": "EU-RO-1", "availability": "HIGH", "hasCapacity": False}],
            }
        ]
    }
    assert http.put("/_sim/catalog", json=catalog).status_code == 200
    rows = http.get("/v2/catalog/gpus?include=AVAILABILITY&product=POD", headers=api_headers).json()["gpus"]
    assert [(r["id"], r["availability"], r["dataCenters"]) for r in rows] == [
        ("NVIDIA Test", "HIGH", [{"id": "EU-RO-1", "name": "EU Romania 1", "availability": "HIGH"}])
    ]
    assert http.post("/v2/pods", json={**CREATE, "gpu": {"id": "NVIDIA Test"}}, headers=api_headers).status_code == 400
    fault = http.post(
        "/_sim/faults", json={"method": "GET", "path": "/v2/pods", "status": 429, "retryAfter": 5, "count": 1}
    )
    assert (fault.status_code, fault.json()["retryAfter"]) == (201, "5")
    assert len(http.get("/_sim/faults").json()) == 1
    assert http.delete("/_sim/faults").status_code == 200
    assert http.get("/v2/pods", headers=api_headers).status_code == 200


@pytest.mark.parametrize(
    ("method", "path", "body", "status"),
    [
        pytest.param("POST", "/_sim/pods/nosuchpod/turn", {"promptTokens": 1}, 404, id="unknown-pod"),
        pytest.param("POST", "/_sim/pods", {"status": "SLEEPING"}, 400, id="unknown-status"),
        pytest.param("POST", "/_sim/faults", {"path": "/v2/pods", "body": "xml"}, 400, id="unknown-body-kind"),
        pytest.param("GET", "/_sim/nothing", None, 400, id="unknown-route"),
    ],
)
def test_the_http_control_api_refuses_nonsense(
    sim: RunPodSimulator, http: httpx.Client, method: str, path: str, body: object, status: int
) -> None:
    """A control mistake is a JSON error, never a crashed handler."""
    answer = http.request(method, path, json=body)
    assert answer.status_code == status
    assert "error" in answer.json()


# --- standalone -------------------------------------------------------------------------------------------------


def test_the_standalone_simulator_prints_its_urls_and_stops_on_sigterm() -> None:
    """`python -m thermostat.dev.simulators.runpod` is what `make run` starts; it must say where it listens."""
    process = subprocess.Popen(
        [sys.executable, "-m", "thermostat.dev.simulators.runpod", "--port", "0", "--api-key", "k1", "--stopped-pod"],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONWARNINGS": "error"},
    )
    try:
        assert process.stdout is not None
        lines = [process.stdout.readline().strip() for _ in range(3)]
        assert lines[0] == "runpod simulator ready"
        urls = dict(line.split("=", 1) for line in lines[1:])
        base, template = urls["RUNPOD_V2_BASE_URL"], urls["RUNPOD_PROXY_URL_TEMPLATE"]
        assert template == base.removesuffix("/v2") + "/proxy/{podId}-{port}"
        (pod,) = httpx.get(f"{base}/pods", headers={"Authorization": "Bearer k1"}).json()["pods"]
        assert (pod["status"], pod["mounts"]["network"][0]["volumeId"]) == ("EXITED", VOLUME)
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 0
        if process.stdout is not None:
            process.stdout.close()


def test_list_without_runtime_leaves_the_key_out_of_list_entries_only(
    sim: RunPodSimulator, http: httpx.Client, api_headers: dict[str, str]
) -> None:
    """The switch for the list shape nothing verified says carries `runtime`: absent from every list entry,
    still on GET /v2/pods/{id}; off again, the list carries it (null for a pod that is not RUNNING)."""
    running = sim.add_pod(volume_id="bjn7d94ej9", status="RUNNING")
    stopped = sim.add_pod(volume_id="bjn7d94ej9", status="EXITED")
    assert http.put("/_sim/settings", json={"listWithoutRuntime": True}).status_code == 200
    listed = http.get("/v2/pods", headers=api_headers).json()["pods"]
    assert [("runtime" in entry) for entry in listed] == [False, False]
    assert http.get(f"/v2/pods/{running}", headers=api_headers).json()["runtime"] is not None
    assert http.put("/_sim/settings", json={"listWithoutRuntime": False}).status_code == 200
    listed = {entry["id"]: entry for entry in http.get("/v2/pods", headers=api_headers).json()["pods"]}
    assert listed[running]["runtime"] is not None and listed[stopped]["runtime"] is None


@pytest.mark.parametrize("after_commit", [False, True], ids=["parked-before-runpod-acts", "parked-after-it-acted"])
def test_a_hold_parks_one_matching_request_until_released(
    sim: RunPodSimulator, http: httpx.Client, api_headers: dict[str, str], after_commit: bool
) -> None:
    """Before commit nothing has changed while parked; after commit the pod is stopped but the caller waits."""
    pod = sim.add_pod(volume_id="bjn7d94ej9", status="RUNNING")
    hold = sim.hold("POST", f"/v2/pods/{pod}/action", after_commit=after_commit)
    answers: list[int] = []
    caller = threading.Thread(
        target=lambda: answers.append(
            http.post(f"/v2/pods/{pod}/action", json={"action": "stop"}, headers=api_headers).status_code
        )
    )
    caller.start()
    assert hold.arrived.wait(5)
    assert sim.pod(pod)["status"] == ("EXITED" if after_commit else "RUNNING")
    assert answers == []
    hold.release()
    caller.join(5)
    assert answers == [200]
    assert sim.pod(pod)["status"] == "EXITED"
    assert sim.faults() == []  # one request only
