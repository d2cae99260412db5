"""deploy/compose.yaml runs every registered service on one host over a real Postgres, after the migration step,
with its secrets from the environment; the structural check names each way it could drift."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from thermostat.chassis.registry import SERVICES
from tools import deploy_check


def test_every_registered_service_runs_after_the_migration_step_over_postgres(compose) -> None:
    assert deploy_check.compose_problems(compose) == []
    services = compose["services"]
    assert set(services) == {"postgres", "migrate", "edge", *(s.name for s in SERVICES)}
    assert services["postgres"]["image"] == "${POSTGRES_IMAGE:-postgres:18-alpine}"  # make images' stand-in: docs
    assert "name" not in compose  # Debian's docker-compose 1.29 refuses a top-level name: the project is -p
    assert services["migrate"]["depends_on"] == {"postgres": {"condition": "service_healthy"}}


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        pytest.param(lambda c: c["services"].pop("metering"), "no service metering", id="missing-service"),
        pytest.param(lambda c: c.update(name="thermostat"), "no top-level `name:`", id="top-level-name"),
        pytest.param(
            lambda c: c["services"]["pool-dispatcher"]["environment"].update(POOL_DISPATCHER_PORT="9"),
            "POOL_DISPATCHER_PORT and expose must be 50063",
            id="port-variable",
        ),
        pytest.param(
            lambda c: c["services"]["pod-controller"]["environment"].update(RUNPOD_API_KEY="rpa_123"),
            "RUNPOD_API_KEY must come from the environment",
            id="literal-secret",
        ),
        pytest.param(
            lambda c: c["services"]["metering"]["environment"].update(THERMOSTAT_INTERNAL_TOKEN="${X:-}"),
            "THERMOSTAT_INTERNAL_TOKEN must be required",
            id="internal-token-optional",
        ),
        pytest.param(
            lambda c: c["services"]["idle-monitor"].pop("depends_on"),
            "idle-monitor: starts only after migrate completed",
            id="no-migration-first",
        ),
        pytest.param(
            lambda c: c["services"]["idle-monitor"]["environment"].pop("POD_CONTROLLER_ADDR"),
            "POD_CONTROLLER_ADDR is not pod-controller:50061",
            id="address",
        ),
        pytest.param(
            lambda c: c["services"]["metering"]["environment"].update(DATABASE_URL="${DATABASE_URL:?}"),
            "DATABASE_URL does not point at the postgres service",
            id="external-database",
        ),
        pytest.param(lambda c: c["services"]["postgres"].pop("healthcheck"), "a postgres service", id="no-healthcheck"),
        pytest.param(lambda c: c["services"]["edge"].update(ports=[]), "publishes 8080", id="edge-unpublished"),
    ],
)
def test_a_compose_file_that_drifts_from_the_registry_is_named(
    compose, change: Callable[[dict], None], problem: str
) -> None:
    change(compose)
    assert any(problem in p for p in deploy_check.compose_problems(compose)), deploy_check.compose_problems(compose)
