"""Each setting is its argument, else its environment variable, else the default; tokens never print."""

from __future__ import annotations

import pytest

from thermostat.client import ClientConfig

ENV = {
    "THERMOSTAT_ADDR": "edge.internal:8080",
    "RIG_OPERATOR_TOKEN": "env-operator",
    "RIG_WAKE_TOKEN": "env-wake",
    "STRATA_POOL_TOKEN": "env-pool",
    "STRATA_POOL_ADMIN_TOKEN": "env-admin",
    "STRATA_TENANT": "env-tenant",
}


def test_every_setting_comes_from_the_environment_when_no_argument_names_it() -> None:
    config = ClientConfig.from_env(env=ENV)
    assert (config.target, config.operator_token) == ("edge.internal:8080", "env-operator")
    assert config.wake_token == "env-wake"
    assert (config.pool_token, config.pool_admin_token, config.tenant) == ("env-pool", "env-admin", "env-tenant")


def test_an_argument_wins_over_the_environment() -> None:
    config = ClientConfig.from_env(
        target="10.0.0.1:8080",
        operator_token="arg-operator",
        wake_token="arg-wake",
        pool_token="arg-pool",
        pool_admin_token="arg-admin",
        tenant="arg-tenant",
        env=ENV,
    )
    assert (config.target, config.operator_token, config.wake_token) == ("10.0.0.1:8080", "arg-operator", "arg-wake")
    assert (config.pool_token, config.pool_admin_token, config.tenant) == ("arg-pool", "arg-admin", "arg-tenant")


@pytest.mark.parametrize(
    ("pool_token", "pool_admin_token", "expected"),
    [
        pytest.param("arg-pool", None, ("arg-pool", None), id="a-given-pool-token-leaves-the-envs-admin-token-unread"),
        pytest.param("arg-pool", "arg-admin", ("arg-pool", "arg-admin"), id="both-given-both-used"),
        pytest.param(None, "arg-admin", ("env-pool", "arg-admin"), id="a-given-admin-token-beside-the-envs-pool-token"),
        pytest.param("  ", None, ("env-pool", "env-admin"), id="a-blank-pool-token-is-not-given"),
    ],
)
def test_a_pool_token_given_as_an_argument_is_the_one_pool_calls_use(
    pool_token: str | None, pool_admin_token: str | None, expected: tuple[str | None, str | None]
) -> None:
    """Issue 35: `--pool-token wrong` beside an exported admin token (which pool calls prefer) answered 0."""
    config = ClientConfig.from_env(pool_token=pool_token, pool_admin_token=pool_admin_token, env=ENV)
    assert (config.pool_token, config.pool_admin_token) == expected


def test_without_either_the_target_is_the_local_edge_and_tokens_are_unset() -> None:
    config = ClientConfig.from_env(env={})
    assert config.target == "127.0.0.1:8080"
    assert (config.operator_token, config.wake_token, config.pool_token, config.pool_admin_token) == (None,) * 4
    assert config.tenant is None and config.timeout == 30.0


def test_a_blank_argument_or_variable_counts_as_unset() -> None:
    config = ClientConfig.from_env(tenant="  ", env={"STRATA_TENANT": "env-tenant", "STRATA_POOL_TOKEN": " "})
    assert config.tenant == "env-tenant" and config.pool_token is None


def test_the_default_environment_is_the_process_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STRATA_TENANT", "from-os-environ")
    assert ClientConfig.from_env().tenant == "from-os-environ"


def test_tokens_are_left_out_of_the_repr() -> None:
    shown = repr(ClientConfig.from_env(env=ENV))
    assert "env-tenant" in shown
    assert not any(secret in shown for secret in ("env-operator", "env-wake", "env-pool", "env-admin"))


@pytest.mark.parametrize("bad", [0, -1, float("inf"), float("nan")])
def test_a_timeout_that_is_not_a_positive_number_is_refused_naming_it(bad: float) -> None:
    with pytest.raises(ValueError, match=r"^timeout:"):
        ClientConfig(timeout=bad)
    with pytest.raises(ValueError, match=r"^wait_timeout:"):
        ClientConfig(wait_timeout=bad)


def test_a_blank_target_is_refused_naming_it() -> None:
    with pytest.raises(ValueError, match=r"^target:"):
        ClientConfig(target=" ")


def test_a_service_target_overrides_the_edge_for_that_service_only() -> None:
    config = ClientConfig(target="edge:8080", pool_target="pool:50063")
    assert config.target_of("pool") == "pool:50063"
    assert config.target_of("pods") == config.target_of("metering") == "edge:8080"
