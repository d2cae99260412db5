"""The dev stack's Envoy runs with as many worker threads as the Kubernetes edge and the benches give it (one),
not Envoy's default of one per hardware thread; EDGE_CONCURRENCY changes it, and a bad value names the variable."""

from __future__ import annotations

from pathlib import Path

import pytest

from thermostat.dev.envoy import envoy_command
from thermostat.dev.stack.supervisor import EDGE_CONCURRENCY, StackConfig, edge_concurrency_from
from tools.k8s_manifests import EDGE_WORKERS

CONFIG, ADDRESS = Path("/cfg/envoy.yaml"), Path("/tmp/admin-address")


def test_the_dev_stack_runs_envoy_with_the_kubernetes_edges_worker_count() -> None:
    assert StackConfig().edge_concurrency == EDGE_CONCURRENCY == EDGE_WORKERS == 1


def test_the_command_line_carries_the_concurrency_after_the_config_and_admin_address() -> None:
    args = envoy_command(CONFIG, log_level="warning", admin_address_path=ADDRESS, concurrency=1)
    assert args[1:] == [
        "-c",
        str(CONFIG),
        "--disable-hot-restart",
        "--log-level",
        "warning",
        "--admin-address-path",
        str(ADDRESS),
        "--concurrency",
        "1",
    ]
    assert Path(args[0]).name == "envoy"


def test_without_a_concurrency_the_command_line_leaves_envoys_default() -> None:
    assert "--concurrency" not in envoy_command(CONFIG, log_level="info", admin_address_path=ADDRESS)


@pytest.mark.parametrize(
    ("value", "workers"),
    [
        pytest.param(None, 1, id="unset-one"),
        pytest.param("", 1, id="empty-one"),
        pytest.param("4", 4, id="four"),
        pytest.param(" 2 ", 2, id="spaces-around"),
    ],
)
def test_edge_concurrency_is_read_from_the_environment(value: str | None, workers: int) -> None:
    assert edge_concurrency_from(value) == workers


@pytest.mark.parametrize("value", ["0", "-1", "two", "1.5"])
def test_a_bad_edge_concurrency_names_the_variable(value: str) -> None:
    with pytest.raises(ValueError, match=f"EDGE_CONCURRENCY: '{value}' is not a whole number of at least 1"):
        edge_concurrency_from(value)
