"""The provider backends' settings: which backends are configured, what is missing, what is built."""

from __future__ import annotations

import pytest

from thermostat.policy.pool.machine_type import BackendKind
from thermostat.providers.pool.docker import DockerBackend
from thermostat.providers.pool.fly import FlyBackend
from thermostat.providers.pool.runpod import RunPodBackend
from thermostat.providers.pool.settings import (
    ALIASES,
    PoolBackendSettings,
    build_backends,
    env_setting,
    missing_settings,
)
from thermostat.providers.pool.worker_client import WorkerClient

VARIABLES = (
    "POOL_NAME", "POOL_WORKER_PORT", "POOL_DOCKER_SOCKET", "DOCKER_HOST", "POOL_RUNPOD_API_KEY", "RUNPOD_API_KEY",
    "FLY_API_TOKEN", "POOL_FLY_APP", "POOL_FLY_REGION", "POOL_FLY_BASE_URL", "POOL_FLY_ENDPOINT_TEMPLATE",
    *ALIASES,
)  # fmt: skip


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in VARIABLES:
        monkeypatch.delenv(name, raising=False)


def test_nothing_set_configures_no_provider(monkeypatch: pytest.MonkeyPatch) -> None:
    """No socket, no key, no Fly settings: each missing backend says what to set."""
    missing = missing_settings(PoolBackendSettings(), socket_exists=lambda path: False)
    assert missing == {
        BackendKind.DOCKER: "STRATA_POOL_DOCKER_SOCKET (or a unix:// DOCKER_HOST): there is no Docker socket at "
        "/var/run/docker.sock",
        BackendKind.RUNPOD: "POOL_RUNPOD_API_KEY (or RUNPOD_API_KEY)",
        BackendKind.FLY: "FLY_API_TOKEN and STRATA_POOL_FLY_APP and STRATA_POOL_FLY_REGION",
    }


def test_pool_runpod_key_wins_and_runpod_api_key_is_the_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    """POOL_RUNPOD_API_KEY, else the pod controller's RUNPOD_API_KEY."""
    monkeypatch.setenv("RUNPOD_API_KEY", "shared-key")
    assert PoolBackendSettings().runpod_key == "shared-key"
    monkeypatch.setenv("POOL_RUNPOD_API_KEY", "pool-key")
    assert PoolBackendSettings().runpod_key == "pool-key"


def test_fly_names_only_the_settings_that_are_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Token and app set (under the alias), region not: the refusal names STRATA_POOL_FLY_REGION alone."""
    monkeypatch.setenv("FLY_API_TOKEN", "fo1_x")
    monkeypatch.setenv("POOL_FLY_APP", "workers")
    assert missing_settings(PoolBackendSettings(), socket_exists=lambda path: True) == {
        BackendKind.RUNPOD: "POOL_RUNPOD_API_KEY (or RUNPOD_API_KEY)",
        BackendKind.FLY: "STRATA_POOL_FLY_REGION",
    }


async def test_configured_providers_are_built(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every configured provider gets its backend; the socket comes from a unix:// DOCKER_HOST here."""
    monkeypatch.setenv("DOCKER_HOST", "unix:///tmp/some-docker.sock")
    monkeypatch.setenv("RUNPOD_API_KEY", "k")
    monkeypatch.setenv("FLY_API_TOKEN", "fo1_x")
    monkeypatch.setenv("POOL_FLY_APP", "workers")
    monkeypatch.setenv("POOL_FLY_REGION", "sjc")
    async with WorkerClient() as worker:
        backends = build_backends(PoolBackendSettings(), worker, socket_exists=lambda path: True)
        try:
            assert set(backends) == {BackendKind.DOCKER, BackendKind.RUNPOD, BackendKind.FLY}
            docker = backends[BackendKind.DOCKER]
            assert isinstance(docker, DockerBackend)
            assert docker.socket_path == "/tmp/some-docker.sock"
            assert isinstance(backends[BackendKind.RUNPOD], RunPodBackend)
            fly = backends[BackendKind.FLY]
            assert isinstance(fly, FlyBackend)
            assert fly.endpoint("abc") == "http://abc.vm.workers.internal:8080"
        finally:
            for backend in backends.values():
                await backend.aclose()


def test_secret_values_never_show_in_the_settings_repr(monkeypatch: pytest.MonkeyPatch) -> None:
    """Keys and tokens are SecretStr: a logged settings object does not print them."""
    monkeypatch.setenv("POOL_RUNPOD_API_KEY", "rpa_SECRET_1")
    monkeypatch.setenv("FLY_API_TOKEN", "fo1_SECRET_2")
    shown = repr(PoolBackendSettings())
    assert "rpa_SECRET_1" not in shown
    assert "fo1_SECRET_2" not in shown


@pytest.mark.parametrize(
    ("environ", "app", "region", "socket"),
    [
        pytest.param({"STRATA_POOL_FLY_APP": "seed", "STRATA_POOL_FLY_REGION": "ams",
                      "STRATA_POOL_DOCKER_SOCKET": "/run/seed.sock"}, "seed", "ams", "/run/seed.sock", id="seed-names"),
        pytest.param({"POOL_FLY_APP": "old", "POOL_FLY_REGION": "sjc", "POOL_DOCKER_SOCKET": "/run/old.sock"},
                     "old", "sjc", "/run/old.sock", id="aliases"),
        pytest.param({"STRATA_POOL_FLY_APP": "same", "POOL_FLY_APP": "same"}, "same", "", "/var/run/docker.sock",
                     id="both-agreeing"),
        pytest.param({"STRATA_POOL_FLY_APP": "", "POOL_FLY_APP": "old"}, "old", "", "/var/run/docker.sock",
                     id="blank-seed-name-is-unset"),
    ],
)  # fmt: skip
def test_seed_names_are_read_and_todays_names_are_aliases(
    monkeypatch: pytest.MonkeyPatch, environ: dict[str, str], app: str, region: str, socket: str
) -> None:
    """STRATA_POOL_FLY_APP / _FLY_REGION / _DOCKER_SOCKET or their POOL_* aliases configure the same backends."""
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    settings = PoolBackendSettings()
    assert (settings.fly_app(), settings.fly_region(), settings.docker_socket) == (app, region, socket)


@pytest.mark.parametrize(
    ("primary", "alias"),
    [("STRATA_POOL_DOCKER_SOCKET", "POOL_DOCKER_SOCKET"), ("STRATA_POOL_FLY_APP", "POOL_FLY_APP"),
     ("STRATA_POOL_FLY_REGION", "POOL_FLY_REGION")],
)  # fmt: skip
def test_seed_name_and_alias_set_differently_stop_the_start_naming_both(
    monkeypatch: pytest.MonkeyPatch, primary: str, alias: str
) -> None:
    """Both set and different: an error naming both variables, not a silent pick."""
    monkeypatch.setenv(primary, "one")
    monkeypatch.setenv(alias, "two")
    with pytest.raises(ValueError, match=f"{primary} and {alias} name the same setting and differ"):
        PoolBackendSettings()


@pytest.mark.parametrize("primary", sorted(ALIASES))
def test_every_seed_name_reads_its_alias_and_refuses_a_disagreement(primary: str) -> None:
    """The test-only names (STRATA_POOL_REQUIRE_DOCKER, the live opt-ins, STRATA_POOL_RUNPOD_GPU) read the same way."""
    alias = ALIASES[primary]
    assert env_setting(primary, {alias: "1"}) == "1"
    assert env_setting(primary, {primary: "1", alias: "1"}) == "1"
    assert env_setting(primary, {}) is None
    with pytest.raises(ValueError, match=f"^{primary} and {alias} name the same setting and differ"):
        env_setting(primary, {primary: "1", alias: "0"})
