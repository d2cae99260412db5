"""Each simulated pod's proxy in front of vLLM's /metrics: when it answers, and what it exposes."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from thermostat.dev.simulators.runpod.server import RunPodSimulator
from thermostat.policy.idle.vllm_metrics import parse_vllm_metrics

VOLUME = "bjn7d94ej9"


def scrape(http: httpx.Client, browser: dict[str, str], pod_id: str, port: int = 8000) -> httpx.Response:
    return http.get(f"/proxy/{pod_id}-{port}/metrics", headers=browser)


@pytest.mark.parametrize("status", ["PROVISIONING", "STARTING", "EXITED", "ERROR", "TERMINATED"])
def test_a_pod_that_is_not_running_has_no_proxy_route(
    sim: RunPodSimulator, http: httpx.Client, browser: dict[str, str], status: str
) -> None:
    """Cloudflare answers a bare 404 while the pod is down or still coming up."""
    sim.configure(terminated_linger_seconds=60, provisioning_seconds=-1, starting_seconds=-1)
    pod_id = sim.add_pod(volume_id=VOLUME, status=status)
    answer = scrape(http, browser, pod_id)
    assert (answer.status_code, answer.headers["content-type"]) == (404, "text/plain; charset=utf-8")


def test_metrics_answer_502_while_the_model_loads_then_200(
    sim: RunPodSimulator, clock: Any, http: httpx.Client, browser: dict[str, str]
) -> None:
    """RUNNING is not usable: vLLM loads the model for a while first (#2052)."""
    sim.configure(model_ready_seconds=180)
    pod_id = sim.add_pod(volume_id=VOLUME, status="RUNNING")
    assert scrape(http, browser, pod_id).status_code == 502
    clock.advance(179)
    assert scrape(http, browser, pod_id).status_code == 502
    clock.advance(1)
    assert scrape(http, browser, pod_id).status_code == 200


def test_a_per_pod_load_time_overrides_the_global_one(
    sim: RunPodSimulator, clock: Any, http: httpx.Client, browser: dict[str, str]
) -> None:
    """One slow GPU among fast ones (the 9-minute vs 3-minute wakes)."""
    slow = sim.add_pod(volume_id=VOLUME, status="RUNNING")
    fast = sim.add_pod(volume_id=VOLUME, status="RUNNING")
    sim.set_pod_lifecycle(slow, model_ready_seconds=540)
    assert (scrape(http, browser, slow).status_code, scrape(http, browser, fast).status_code) == (502, 200)


def test_a_dead_vllm_answers_502_while_the_pod_bills_as_running(
    sim: RunPodSimulator, http: httpx.Client, browser: dict[str, str], api_headers: dict[str, str]
) -> None:
    """The #1998 case: RUNNING on the control plane, nothing behind the proxy."""
    pod_id = sim.add_pod(volume_id=VOLUME, status="RUNNING")
    sim.kill_vllm(pod_id)
    assert scrape(http, browser, pod_id).status_code == 502
    assert http.get(f"/v2/pods/{pod_id}", headers=api_headers).json()["status"] == "RUNNING"
    sim.revive_vllm(pod_id)
    assert scrape(http, browser, pod_id).status_code == 200


def test_a_default_library_user_agent_is_refused_like_cloudflare_does(sim: RunPodSimulator, http: httpx.Client) -> None:
    """python-httpx's own agent gets a 403 unless the check is switched off."""
    pod_id = sim.add_pod(volume_id=VOLUME, status="RUNNING")
    assert http.get(f"/proxy/{pod_id}-8000/metrics").status_code == 403
    sim.configure(require_browser_user_agent=False)
    assert http.get(f"/proxy/{pod_id}-8000/metrics").status_code == 200


def test_the_exposition_has_every_family_with_help_type_and_sorted_labels(
    sim: RunPodSimulator, http: httpx.Client, browser: dict[str, str]
) -> None:
    """Recent vLLM: engine + model_name labels, every finished_reason pre-created, *_created gauges alongside."""
    pod_id = sim.add_pod(volume_id=VOLUME, status="RUNNING")
    answer = scrape(http, browser, pod_id)
    assert answer.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    lines = answer.text.splitlines()
    model = sim.settings.model_name
    for family, kind in (
        ("vllm:num_requests_running", "gauge"),
        ("vllm:num_requests_waiting", "gauge"),
        ("vllm:prompt_tokens_total", "counter"),
        ("vllm:generation_tokens_total", "counter"),
        ("vllm:request_success_total", "counter"),
        ("vllm:request_success_created", "gauge"),
    ):
        assert f"# TYPE {family} {kind}" in lines
        assert any(line.startswith(f"# HELP {family} ") for line in lines)
    for reason in ("stop", "length", "abort", "error", "repetition"):
        assert f'vllm:request_success_total{{engine="0",finished_reason="{reason}",model_name="{model}"}} 0.0' in lines


def test_turns_and_in_flight_requests_drive_the_counters_and_gauges(
    sim: RunPodSimulator, http: httpx.Client, browser: dict[str, str]
) -> None:
    """A finished turn advances success and token counters; in-flight requests set the gauges."""
    pod_id = sim.add_pod(volume_id=VOLUME, status="RUNNING")
    sim.record_turn(pod_id, prompt_tokens=1200, gen_tokens=300)
    sim.record_turn(pod_id, prompt_tokens=2_000_000, gen_tokens=7, finished_reason="length")
    sim.set_in_flight(pod_id, running=2, waiting=1)
    lines = scrape(http, browser, pod_id).text.splitlines()
    labels = f'engine="0",model_name="{sim.settings.model_name}"'
    assert f"vllm:num_requests_running{{{labels}}} 2.0" in lines
    assert f"vllm:num_requests_waiting{{{labels}}} 1.0" in lines
    assert f"vllm:prompt_tokens_total{{{labels}}} 2.0012e+06" in lines
    assert f"vllm:generation_tokens_total{{{labels}}} 307.0" in lines
    stop = f'vllm:request_success_total{{engine="0",finished_reason="stop",model_name="{sim.settings.model_name}"}} 1.0'
    assert stop in lines


def test_the_policy_parser_reads_the_simulated_exposition(
    sim: RunPodSimulator, http: httpx.Client, browser: dict[str, str]
) -> None:
    """The monitor's parser sees in-flight work and the summed work counters, ignoring *_created."""
    pod_id = sim.add_pod(volume_id=VOLUME, status="RUNNING")
    sim.record_turn(pod_id, prompt_tokens=10, gen_tokens=5)
    sim.set_in_flight(pod_id, running=1, waiting=2)
    activity = parse_vllm_metrics(scrape(http, browser, pod_id).text)
    assert (activity.active, activity.completed) == (3, 16.0)


@pytest.mark.parametrize(
    ("style", "engine_label", "counters"),
    [
        pytest.param("legacy", False, True, id="legacy-v0"),
        pytest.param("gauges-only", True, False, id="gauges-only"),
    ],
)
def test_older_vllm_expositions_can_be_served(
    sim: RunPodSimulator, http: httpx.Client, browser: dict[str, str], style: str, engine_label: bool, counters: bool
) -> None:
    """V0 has no engine label; a vLLM without work counters must still be readable on gauges alone."""
    sim.configure(metrics_style=style)
    pod_id = sim.add_pod(volume_id=VOLUME, status="RUNNING")
    text = scrape(http, browser, pod_id).text
    assert ('engine="0"' in text) is engine_label
    assert ("vllm:request_success_total" in text) is counters
    assert "_created" not in text


def test_turns_cannot_be_recorded_on_a_pod_that_is_not_serving(sim: RunPodSimulator) -> None:
    """A stopped pod has no vLLM to count on, so the demo cannot fake work on it."""
    pod_id = sim.add_pod(volume_id=VOLUME, status="EXITED")
    with pytest.raises(ValueError, match="not running"):
        sim.record_turn(pod_id, prompt_tokens=1, gen_tokens=1)


def test_the_proxy_routes_only_the_pods_port(sim: RunPodSimulator, http: httpx.Client, browser: dict[str, str]) -> None:
    """Another port, a path vLLM does not serve or an unknown pod is a 404 (its OpenAI routes: test_..._openai)."""
    pod_id = sim.add_pod(volume_id=VOLUME, status="RUNNING")
    assert scrape(http, browser, pod_id, port=8001).status_code == 404
    assert scrape(http, browser, "nosuchpod").status_code == 404
    assert http.get(f"/proxy/{pod_id}-8000/v1/nothing", headers=browser).status_code == 404
