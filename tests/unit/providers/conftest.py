"""A RunPod simulator on loopback and a v2 client pointed at it; every test starts from a fresh world."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator

import pytest

from thermostat.dev.simulators.runpod.server import RunPodSimulator
from thermostat.providers.runpod.client import RunPodV2Client

API_KEY = "rpa_SIMKEY_7f3c9e1d2b"


@pytest.fixture(scope="module")
def running_simulator() -> Iterator[RunPodSimulator]:
    with RunPodSimulator(api_key=API_KEY) as simulator:
        yield simulator


@pytest.fixture
def sim(running_simulator: RunPodSimulator) -> RunPodSimulator:
    running_simulator.reset()
    return running_simulator


MakeClient = Callable[..., RunPodV2Client]


@pytest.fixture
async def make_client(sim: RunPodSimulator) -> AsyncIterator[MakeClient]:
    """make_client builds clients against the simulator (key and timeout adjustable) and closes them after."""
    made: list[RunPodV2Client] = []

    def build(api_key: str | None = API_KEY, *, timeout: float = 5.0) -> RunPodV2Client:
        runpod = RunPodV2Client(
            api_key,
            base_url=sim.base_url,
            proxy_url_template=sim.proxy_url_template,
            timeout_seconds=timeout,
            metrics_timeout_seconds=timeout,
        )
        made.append(runpod)
        return runpod

    yield build
    for runpod in made:
        await runpod.aclose()


@pytest.fixture
def client(make_client: MakeClient) -> RunPodV2Client:
    return make_client()


@pytest.fixture
def impatient_client(make_client: MakeClient) -> RunPodV2Client:
    """impatient_client gives up after 0.2 s, so a hung simulator route reads as a timeout quickly."""
    return make_client(timeout=0.2)


@pytest.fixture
def api_key() -> str:
    """api_key is the bearer the simulator expects, distinctive enough to search log text for."""
    return API_KEY
