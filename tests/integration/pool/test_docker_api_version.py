"""The Docker backend's Engine API version against old, current and too-new daemons (issue 35, Engine 29)."""

from __future__ import annotations

import logging
import shutil
import tempfile
from collections.abc import Callable, Iterator

import httpx
import pytest

from tests.integration.pool.conftest import healthy, spec
from tests.integration.pool.test_docker_backend import docker_type
from thermostat.dev.simulators.docker import ENGINE_29_0, DockerSimulator
from thermostat.policy.pool.docker_api import ApiRange, ApiVersion
from thermostat.providers.pool.backend import BackendError
from thermostat.providers.pool.docker import DockerBackend
from thermostat.providers.pool.worker_client import WorkerClient


def api(lowest: str, highest: str) -> ApiRange:
    low, high = ApiVersion.parse(lowest), ApiVersion.parse(highest)
    assert low is not None and high is not None
    return ApiRange(lowest=low, highest=high)


ENGINE_20_10 = api("1.12", "1.41")  # an old daemon: the pool's lowest is its highest
TOO_NEW = api("1.53", "1.58")  # a daemon that no longer speaks anything the pool does


@pytest.fixture
def folder() -> Iterator[str]:
    path = tempfile.mkdtemp(prefix="dapi", dir="/tmp")  # AF_UNIX paths are short: pytest's tmp_path may not fit
    yield path
    shutil.rmtree(path, ignore_errors=True)


DaemonOf = Callable[[ApiRange], DockerSimulator]


@pytest.fixture
def daemon_of(folder: str) -> Iterator[DaemonOf]:
    started: list[DockerSimulator] = []

    def start(api_range: ApiRange) -> DockerSimulator:
        simulator = DockerSimulator(f"{folder}/docker-{len(started)}.sock", api=api_range).start()
        started.append(simulator)
        return simulator

    yield start
    for simulator in started:
        simulator.stop()


def paths(daemon: DockerSimulator) -> list[str]:
    return [r.path for r in daemon.requests()]


@pytest.mark.parametrize(
    ("daemon_api", "spoken"),
    [
        pytest.param(ENGINE_20_10, "/v1.41", id="old-daemon-its-highest"),
        pytest.param(ENGINE_29_0, "/v1.52", id="engine-29.0-which-refuses-1.41"),
        pytest.param(api("1.40", "1.56"), "/v1.52", id="newer-daemon-the-pools-highest"),
    ],
)
async def test_machine_boots_and_stops_in_the_version_both_speak(
    daemon_of: DaemonOf, client: WorkerClient, daemon_api: ApiRange, spoken: str
) -> None:
    """GET /version once, then every request carries the highest version both sides support."""
    daemon = daemon_of(daemon_api)
    docker = DockerBackend(client, socket_path=daemon.socket_path, pool="pool-v")
    try:
        handle = await docker.start(spec(docker_type()))
        await healthy(docker, handle)
        assert await docker.list_machines()
        await docker.stop(handle.provider_id)
    finally:
        await docker.aclose()
    assert paths(daemon)[0] == "/version"
    assert paths(daemon).count("/version") == 1
    assert all(path.startswith(f"{spoken}/") for path in paths(daemon)[1:])
    assert daemon.containers() == []


async def test_too_new_daemon_fails_every_start_with_one_line_naming_both_ranges(
    daemon_of: DaemonOf, client: WorkerClient, caplog: pytest.LogCaptureFixture
) -> None:
    """No version in common: the error (logged once) names the daemon's range and the pool's; nothing is created."""
    daemon = daemon_of(TOO_NEW)
    docker = DockerBackend(client, socket_path=daemon.socket_path)
    try:
        with caplog.at_level(logging.ERROR, logger="thermostat.providers.pool.docker"):
            for _ in range(2):
                with pytest.raises(BackendError) as refused:
                    await docker.start(spec(docker_type()))
                assert "Engine API 1.53–1.58 and this pool speaks 1.41–1.52" in str(refused.value)
                assert "\n" not in str(refused.value)
            assert await docker.list_machines() is None
    finally:
        await docker.aclose()
    assert paths(daemon) == ["/version"]
    assert [r.getMessage() for r in caplog.records if "no version in common" in r.getMessage()] == [
        f"docker: daemon at {daemon.socket_path}: the Docker daemon speaks Engine API 1.53–1.58 and this pool "
        "speaks 1.41–1.52: no version in common"
    ]


async def test_a_daemon_that_did_not_answer_its_version_is_asked_again(
    daemon_of: DaemonOf, client: WorkerClient, folder: str
) -> None:
    """A daemon not yet up at the first call is negotiated with once it answers."""
    docker = DockerBackend(client, socket_path=f"{folder}/docker-0.sock")
    try:
        with pytest.raises(BackendError, match="did not answer"):
            await docker.negotiate()
        daemon_of(ENGINE_29_0)
        assert await docker.negotiate() == ENGINE_29_0.highest
    finally:
        await docker.aclose()


@pytest.mark.parametrize(
    ("version", "status", "message"),
    [
        pytest.param(
            "1.41",
            400,
            "client version 1.41 is too old. Minimum supported API version is 1.44, please upgrade your client "
            "to a newer version",
            id="below-the-minimum-is-dockers-400",
        ),
        pytest.param(
            "1.53", 400, "client version 1.53 is too new. Maximum supported API version is 1.52", id="above-the-maximum"
        ),
        pytest.param("1.44", 200, None, id="the-minimum-is-served"),
        pytest.param("1.52", 200, None, id="the-maximum-is-served"),
    ],
)
def test_the_simulator_refuses_a_path_version_outside_its_range_as_engine_29_does(
    daemon_of: DaemonOf, version: str, status: int, message: str | None
) -> None:
    """Engine 29.0's range is 1.44–1.52; a version outside it is the daemon's own 400."""
    daemon = daemon_of(ENGINE_29_0)
    with httpx.Client(transport=httpx.HTTPTransport(uds=daemon.socket_path), base_url="http://docker") as http:
        answered = http.get(f"/v{version}/containers/json")
        assert answered.status_code == status
        if message is not None:
            assert answered.json() == {"message": message}
        assert http.get("/version").json() == {"ApiVersion": "1.52", "MinAPIVersion": "1.44", "Version": "simulated"}
        assert http.get("/containers/json").status_code == 200  # unversioned: the daemon's own version
