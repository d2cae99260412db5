"""`make run PROMETHEUS=1`: the variables read strictly (a bad one named), the scrape config templated for the
stack's ports."""

from __future__ import annotations

import pytest

from thermostat.dev.prometheus import PrometheusSettings, prometheus_from_env, scrape_config, stack_targets


@pytest.mark.parametrize(
    ("environ", "settings"),
    [
        pytest.param({}, None, id="unset-none"),
        pytest.param({"PROMETHEUS": "0"}, None, id="zero-none"),
        pytest.param({"PROMETHEUS": "1"}, PrometheusSettings(), id="one-defaults"),
        pytest.param(
            {"PROMETHEUS": "true", "PROMETHEUS_PORT": "0", "PROMETHEUS_SCRAPE_INTERVAL": "1s"},
            PrometheusSettings(port=0, interval="1s"),
            id="free-port-fast-scrape",
        ),
    ],
)
def test_prometheus_settings_from_the_environment(environ, settings) -> None:
    assert prometheus_from_env(environ) == settings


@pytest.mark.parametrize(
    ("environ", "named"),
    [
        pytest.param({"PROMETHEUS": "maybe"}, "PROMETHEUS=", id="not-a-switch"),
        pytest.param({"PROMETHEUS": "1", "PROMETHEUS_PORT": "http"}, "PROMETHEUS_PORT=", id="port-not-a-number"),
        pytest.param(
            {"PROMETHEUS": "1", "PROMETHEUS_SCRAPE_INTERVAL": "1"}, "PROMETHEUS_SCRAPE_INTERVAL=", id="no-unit"
        ),
    ],
)
def test_a_bad_prometheus_variable_is_an_error_naming_it(environ, named) -> None:
    with pytest.raises(ValueError, match=named):
        prometheus_from_env(environ)


def test_the_shipped_scrape_config_is_templated_with_the_stacks_ports() -> None:
    targets = stack_targets(
        {"pod-controller": 1001, "idle-monitor": 1002, "pool-dispatcher": 1003, "metering": 1004},
        "http://127.0.0.1:1005/stats/prometheus",
    )
    config = scrape_config(targets, interval="1s")
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert {name: job["static_configs"][0]["targets"] for name, job in jobs.items()} == {
        name: [where] for name, where in targets.items()
    }
    assert jobs["edge"]["metrics_path"] == "/stats/prometheus"
    assert all(job["static_configs"][0]["labels"] == {"system": "thermostat"} for job in jobs.values())
    assert config["global"] == {"scrape_interval": "1s", "evaluation_interval": "1s"}
    assert config["rule_files"][0].endswith("deploy/prometheus/rules.yml")
