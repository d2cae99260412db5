"""The simulator's engine mode on a stand-in engine (tests/fixtures/fake_vllm.py, no vLLM needed): an engine per
RUNNING pod, started and stopped with it, every path relayed through the proxy unbuffered, a disconnect passed on.
The real engine's own tests: test_runpod_simulator_vllm.py."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from tests.fixtures.fake_vllm import FakeEngine
from thermostat.dev.engine.process import EngineProcess
from thermostat.dev.simulators.runpod.server import RunPodSimulator

API_KEY = "rpa_SIMTEST_relay"
BROWSER = {"User-Agent": "Mozilla/5.0 (X11; Linux x86_64) Firefox/128.0"}


def group_alive(pgid: int) -> bool:
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def eventually(check: Callable[[], bool], timeout: float = 60.0) -> bool:
    """Whether `check` came true within `timeout`: generous, as it bounds only a failure (a child process's start on
    two loaded cores can take seconds)."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[RunPodSimulator]:
    with RunPodSimulator(api_key=API_KEY, engine=FakeEngine(venv=tmp_path), engine_log_dir=tmp_path) as simulator:
        yield simulator


@pytest.fixture
def api(sim: RunPodSimulator) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=sim.url, headers={"Authorization": f"Bearer {API_KEY}"}, timeout=10.0) as client:
        yield client


def proxy(sim: RunPodSimulator, pod_id: str) -> httpx.Client:
    return httpx.Client(base_url=f"{sim.url}/proxy/{pod_id}-8000", headers=BROWSER, timeout=10.0)


def running_engine(sim: RunPodSimulator, pod_id: str) -> EngineProcess:
    assert sim.engines is not None
    engine = sim.engines.engine(pod_id)
    assert engine is not None
    assert eventually(lambda: engine.probe()), engine.last_lines()
    return engine


def test_the_proxy_answers_502_until_the_engine_listens_then_relays_its_metrics(tmp_path: Path) -> None:
    """Nobody listens while it loads (RunPod's 502); then /metrics is the engine's own, and the pod model-ready."""
    with RunPodSimulator(api_key=API_KEY, engine=FakeEngine(venv=tmp_path, load_seconds=1.5)) as sim:
        pod_id = sim.add_pod(status="RUNNING")
        with proxy(sim, pod_id) as client:
            assert client.get("/metrics").status_code == 502
            assert next(p for p in sim.pods() if p["id"] == pod_id)["modelReady"] is False
            assert eventually(lambda: client.get("/metrics").status_code == 200)
            assert "fake_engine_aborted_total" in client.get("/metrics").text
        assert eventually(lambda: next(p for p in sim.pods() if p["id"] == pod_id)["modelReady"] is True)


def test_a_pod_that_reaches_running_by_the_clock_starts_its_engine_unread(
    sim: RunPodSimulator, api: httpx.Client
) -> None:
    """The lifecycle is lazy, but an engine starts when the pod boots, not when something next reads it."""
    sim.configure(starting_seconds=0.5)
    pod_id = sim.add_pod(status="EXITED")
    assert api.post(f"/v2/pods/{pod_id}/action", json={"action": "start"}).json()["status"] == "STARTING"
    assert sim.engines is not None and sim.engines.engine(pod_id) is None
    assert eventually(lambda: sim.engines is not None and sim.engines.engine(pod_id) is not None, timeout=3)


def test_every_method_and_path_is_relayed_with_its_query_body_and_headers(sim: RunPodSimulator) -> None:
    """The proxy is a plain relay in front of the port: what vLLM serves is vLLM's business."""
    pod_id = sim.add_pod(status="RUNNING")
    running_engine(sim, pod_id)
    with proxy(sim, pod_id) as client:
        echoed = client.put("/v1/anything/deeper?x=1&y=two", content=b"payload", headers={"X-Trace": "t1"}).json()
        assert (echoed["method"], echoed["path"], echoed["query"], echoed["body"]) == (
            "PUT", "/v1/anything/deeper", "x=1&y=two", "payload",
        )  # fmt: skip
        assert (echoed["headers"]["x-trace"], echoed["headers"]["user-agent"]) == ("t1", BROWSER["User-Agent"])
        assert client.delete("/v1/files/f-1").json()["method"] == "DELETE"


def test_the_relay_keeps_cloudflares_user_agent_rule_and_the_pods_status(sim: RunPodSimulator) -> None:
    """A library's agent gets 1010; a stopped pod a bare 404 — before anything reaches the engine."""
    running = sim.add_pod(status="RUNNING")
    stopped = sim.add_pod(status="EXITED")
    running_engine(sim, running)
    with httpx.Client(base_url=sim.url, timeout=10.0) as client:
        assert client.get(f"/proxy/{running}-8000/v1/models").status_code == 403
        assert client.get(f"/proxy/{stopped}-8000/v1/models", headers=BROWSER).status_code == 404
        assert client.get(f"/proxy/{running}-8001/v1/models", headers=BROWSER).status_code == 404


def test_a_stream_is_relayed_chunk_by_chunk(sim: RunPodSimulator) -> None:
    """Each SSE chunk leaves the proxy as it arrives: arrival times spread like the engine's pace."""
    sim.configure()
    pod_id = sim.add_pod(status="RUNNING")
    running_engine(sim, pod_id)
    arrivals: list[float] = []
    with proxy(sim, pod_id) as client:
        body = {"stream": True, "max_tokens": 20}
        with client.stream("POST", "/v1/completions", json=body) as answer:
            assert answer.headers["transfer-encoding"] == "chunked"
            began = time.monotonic()
            text = b""
            for chunk in answer.iter_raw():
                arrivals.append(time.monotonic() - began)
                text += chunk
    assert text.count(b"data: ") == 21 and text.endswith(b"data: [DONE]\n\n")
    assert len(arrivals) >= 15
    assert arrivals[-1] - arrivals[0] >= 0.2, arrivals  # 20 chunks 20 ms apart, not one burst


def test_a_client_that_leaves_mid_stream_closes_the_engines_connection(sim: RunPodSimulator) -> None:
    """The engine sees its client go (vLLM then aborts the request): not running any more, one abort."""
    pod_id = sim.add_pod(status="RUNNING")
    engine = running_engine(sim, pod_id)
    with httpx.Client(base_url=f"http://127.0.0.1:{engine.port}") as direct, proxy(sim, pod_id) as client:
        with client.stream("POST", "/v1/completions", json={"stream": True, "max_tokens": 500}) as answer:
            chunks = answer.iter_raw()  # held: a dropped iterator would close the response itself
            next(chunks)
            assert "vllm:num_requests_running" in direct.get("/metrics").text
        aborted = "fake_engine_aborted_total 1.0"
        assert eventually(lambda: aborted in direct.get("/metrics").text, timeout=5), direct.get("/metrics").text


@pytest.mark.parametrize("action", ["stop", "terminate", "restart"])
def test_a_pod_that_leaves_running_stops_its_engines_whole_process_group(
    sim: RunPodSimulator, api: httpx.Client, action: str
) -> None:
    """SIGTERM to the group (its engine core with it); a restart starts a new engine on the same pod."""
    pod_id = sim.add_pod(status="RUNNING")
    first = running_engine(sim, pod_id)
    api.post(f"/v2/pods/{pod_id}/action", json={"action": action})
    assert eventually(lambda: not group_alive(first.pid))
    assert sim.engines is not None
    replacement = sim.engines.engine(pod_id)
    assert (replacement is not None, sim.engines.starts) == ((True, 2) if action == "restart" else (False, 1))


def test_an_engine_that_ignores_sigterm_is_killed_after_the_grace(tmp_path: Path) -> None:
    """SIGKILL once the grace is out: a stop always ends with the process gone."""
    engine = EngineProcess(FakeEngine(venv=tmp_path, ignore_sigterm=True), port=0, log_path=tmp_path / "e.log")
    time.sleep(0.5)  # its handler in place
    began = time.monotonic()
    engine.stop(grace_seconds=0.5)
    assert (engine.returncode is not None, group_alive(engine.pid)) == (True, False)
    assert 0.4 <= time.monotonic() - began < 5


def test_the_simulator_stops_every_engine_it_started(tmp_path: Path) -> None:
    """Stopping the simulator leaves no engine process behind."""
    with RunPodSimulator(api_key=API_KEY, engine=FakeEngine(venv=tmp_path)) as sim:
        pods = [sim.add_pod(status="RUNNING") for _ in range(2)]
        pids = [running_engine(sim, pod_id).pid for pod_id in pods]
    assert [group_alive(pid) for pid in pids] == [False, False]
