"""The RunPod simulator keeps its pods across restarts in a state file when given one (issue 35: restarting
`make run` while a pod ran, the simulator forgot it, and the pod's billing on record never closed); none by
default."""

from __future__ import annotations

from pathlib import Path

import httpx

from tests.fixtures.clock import FakeClock
from tests.integration.simulator.conftest import API_KEY
from tests.integration.simulator.test_runpod_simulator_lifecycle import create_body
from thermostat.dev.simulators.runpod.server import RunPodSimulator

HEADERS = {"Authorization": f"Bearer {API_KEY}"}


def listed(simulator: RunPodSimulator) -> list[tuple[str, str]]:
    with httpx.Client(base_url=simulator.url, timeout=5.0) as http:
        return [(p["id"], p["status"]) for p in http.get("/v2/pods", headers=HEADERS).json()["pods"]]


def test_a_restarted_simulator_with_a_state_file_still_has_its_pods_billing(tmp_path: Path) -> None:
    """Created, then one stopped: both are there after a restart, as they were, and billed stretches with them."""
    state, clock = tmp_path / "runpod.json", FakeClock(monotonic=1_800_000_000.0)
    with RunPodSimulator(api_key=API_KEY, clock=clock, state_file=state) as first:
        with httpx.Client(base_url=first.url, timeout=5.0) as http:
            running = http.post("/v2/pods", json=create_body(), headers=HEADERS).json()["id"]
            stopped = http.post("/v2/pods", json=create_body(name="other"), headers=HEADERS).json()["id"]
            assert http.post(f"/v2/pods/{stopped}/action", json={"action": "stop"}, headers=HEADERS).is_success
        before = sorted(listed(first))
        billed = [(b.pod_id, b.end is None) for b in first.billed()]
    assert state.exists()
    clock.advance(60)
    with RunPodSimulator(api_key=API_KEY, clock=clock, state_file=state) as second:
        assert sorted(listed(second)) == before == sorted([(running, "RUNNING"), (stopped, "EXITED")])
        assert [(b.pod_id, b.end is None) for b in second.billed()] == billed


def test_without_a_state_file_a_restarted_simulator_knows_no_pod(tmp_path: Path) -> None:
    """The default: nothing is written, and each simulator starts empty."""
    with RunPodSimulator(api_key=API_KEY) as first, httpx.Client(base_url=first.url, timeout=5.0) as http:
        assert http.post("/v2/pods", json=create_body(), headers=HEADERS).status_code == 201
    with RunPodSimulator(api_key=API_KEY) as second:
        assert listed(second) == []
    assert list(tmp_path.iterdir()) == []
