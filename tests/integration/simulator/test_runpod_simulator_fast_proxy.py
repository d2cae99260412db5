"""The fast proxy listener answers the pods' /metrics exactly as the threaded server does (fast_proxy.py), and a
bench seeds thousands of pods in one control call."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.fixtures.clock import FakeClock
from tests.integration.simulator.conftest import API_KEY, BROWSER
from thermostat.dev.simulators.runpod.server import RunPodSimulator

VOLUME = "bjn7d94ej9"


@pytest.fixture(scope="module")
def fast() -> Iterator[tuple[RunPodSimulator, FakeClock]]:
    clock = FakeClock(monotonic=1_800_000_000.0)
    with RunPodSimulator(api_key=API_KEY, clock=clock, fast_proxy=True) as simulator:
        yield simulator, clock


@pytest.fixture
def sim(fast: tuple[RunPodSimulator, FakeClock]) -> RunPodSimulator:
    fast[0].reset()
    return fast[0]


def both(sim: RunPodSimulator, pod_id: str, *, agent: str = BROWSER) -> list[tuple[int, str, bytes]]:
    """The same scrape through the main server and through the fast listener."""
    answers = []
    for base in (f"{sim.url}/proxy/{{podId}}-{{port}}", sim.proxy_url_template):
        url = base.replace("{podId}", pod_id).replace("{port}", "8000") + "/metrics"
        reply = httpx.get(url, headers={"User-Agent": agent}, timeout=5)
        answers.append((reply.status_code, reply.headers.get("content-type", ""), reply.content))
    return answers


def test_the_template_names_the_fast_listener(sim: RunPodSimulator) -> None:
    assert sim.proxy_url_template != f"{sim.url}/proxy/{{podId}}-{{port}}"
    assert sim.proxy_url_template.endswith("/proxy/{podId}-{port}")


@pytest.mark.parametrize(
    ("status", "in_flight", "agent"),
    [
        pytest.param("RUNNING", 0, BROWSER, id="serving-idle"),
        pytest.param("RUNNING", 2, BROWSER, id="serving-busy"),
        pytest.param("EXITED", 0, BROWSER, id="stopped-404"),
        pytest.param("RUNNING", 0, "python-httpx/0.28", id="cloudflare-user-agent-rule-403"),
    ],
)
def test_the_fast_listener_answers_as_the_threaded_server(
    sim: RunPodSimulator, status: str, in_flight: int, agent: str
) -> None:
    pod_id = sim.add_pod(volume_id=VOLUME, status=status)
    if in_flight:
        sim.set_in_flight(pod_id, running=in_flight)
    main, fast = both(sim, pod_id, agent=agent)
    assert main == fast


def test_a_loading_model_answers_502_on_both(sim: RunPodSimulator) -> None:
    sim.configure(model_ready_seconds=60)
    pod_id = sim.add_pod(volume_id=VOLUME, status="RUNNING")
    main, fast = both(sim, pod_id)
    assert main[0] == fast[0] == 502


def test_a_scripted_status_fault_is_served_by_the_fast_listener(sim: RunPodSimulator) -> None:
    pod_id = sim.add_pod(volume_id=VOLUME, status="RUNNING")
    control = httpx.post(
        f"{sim.url}/_sim/faults", json={"method": "GET", "path": "/proxy/*/metrics", "status": 503, "remaining": 1}
    )
    control.raise_for_status()
    url = sim.proxy_url_template.replace("{podId}", pod_id).replace("{port}", "8000") + "/metrics"
    assert httpx.get(url, headers={"User-Agent": BROWSER}).status_code == 503
    assert httpx.get(url, headers={"User-Agent": BROWSER}).status_code == 200
    assert [r.path for r in sim.requests("/proxy")] == [f"/proxy/{pod_id}-8000/metrics"] * 2


def test_many_pods_are_seeded_in_one_control_call(sim: RunPodSimulator) -> None:
    pods = [{"id": f"bulkpod{i:06d}", "status": "RUNNING", "volumeId": VOLUME} for i in range(2000)]
    reply = httpx.post(f"{sim.url}/_sim/pods", json={"pods": pods}, timeout=30)
    assert (reply.status_code, reply.json()) == (201, {"added": 2000})
    assert len(sim.pods()) == 2000
