"""One RunPod simulator per module on a manual clock, reset before each test, and a plain HTTP client for it."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.fixtures.clock import FakeClock
from thermostat.dev.simulators.runpod.server import RunPodSimulator

API_KEY = "rpa_SIMTEST_0d4e8b"
BROWSER = "Mozilla/5.0 (X11; Linux x86_64) Firefox/128.0"


@pytest.fixture(scope="module")
def module_clock() -> FakeClock:
    """Stands still until a test advances it, so lifecycle delays need no sleeping (epoch seconds, in 2027)."""
    return FakeClock(monotonic=1_800_000_000.0)


@pytest.fixture(scope="module")
def running_simulator(module_clock: FakeClock) -> Iterator[RunPodSimulator]:
    with RunPodSimulator(api_key=API_KEY, clock=module_clock) as simulator:
        yield simulator


@pytest.fixture
def sim(running_simulator: RunPodSimulator) -> RunPodSimulator:
    running_simulator.reset()
    return running_simulator


@pytest.fixture
def clock(module_clock: FakeClock, sim: RunPodSimulator) -> FakeClock:
    return module_clock


@pytest.fixture(scope="module")
def http(running_simulator: RunPodSimulator) -> Iterator[httpx.Client]:
    """http talks to the simulator root; API calls add the bearer themselves via `api_headers`."""
    with httpx.Client(base_url=running_simulator.url, timeout=5.0) as client:
        yield client


@pytest.fixture
def api_headers() -> dict[str, str]:
    return {"Authorization": f"Bearer {API_KEY}"}


@pytest.fixture
def browser() -> dict[str, str]:
    return {"User-Agent": BROWSER}
