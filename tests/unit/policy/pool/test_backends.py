"""The catalogue against this deployment: unconfigured backends and RunPod's hard limits, one test per rule."""

from __future__ import annotations

import pytest

from tests.unit.policy.pool.conftest import catalogue, cpu
from thermostat.policy.pool.backends import backend_use, check_backends, runpod_vcpu_count
from thermostat.policy.pool.machine_type import BackendKind, CatalogueRejected, MachineType

ALL = {BackendKind.DOCKER, BackendKind.RUNPOD, BackendKind.FLY}


def refused(result: object) -> str:
    assert isinstance(result, CatalogueRejected), result
    return result.detail


def test_catalogue_on_configured_backends_is_accepted_as_given() -> None:
    """Every type on a configured backend passes unchanged."""
    given = catalogue(cpu(name="a", backend=BackendKind.DOCKER), cpu(name="b", backend=BackendKind.FLY))
    assert check_backends(given, configured=ALL) is given


def test_local_is_always_configured() -> None:
    """The local backend needs no setting."""
    given = catalogue(cpu(backend=BackendKind.LOCAL))
    assert check_backends(given, configured=()) is given


@pytest.mark.parametrize(
    ("backend", "setting"),
    [
        (BackendKind.DOCKER, "POOL_DOCKER_SOCKET (or a unix:// DOCKER_HOST)"),
        (BackendKind.RUNPOD, "POOL_RUNPOD_API_KEY (or RUNPOD_API_KEY)"),
        (BackendKind.FLY, "FLY_API_TOKEN, POOL_FLY_APP and POOL_FLY_REGION"),
    ],
)
def test_type_on_an_unconfigured_backend_is_refused_naming_the_setting(backend: BackendKind, setting: str) -> None:
    """The 400 names the entry, the field and what to set."""
    detail = refused(check_backends(catalogue(cpu(backend=backend, job_timeout_seconds=60)), configured=()))
    assert detail.startswith(f"machine_types[0] ('cpu').backend: the {backend.value} backend is not configured: set ")
    assert setting in detail


def test_shell_can_name_exactly_what_is_missing() -> None:
    """A precise reason from the shell (one Fly setting of three) replaces the generic list."""
    result = check_backends(
        catalogue(cpu(backend=BackendKind.FLY)), configured=(), missing_settings={BackendKind.FLY: "POOL_FLY_REGION"}
    )
    assert refused(result) == "machine_types[0] ('cpu').backend: the fly backend is not configured: set POOL_FLY_REGION"


def test_runpod_job_timeout_over_the_proxy_limit_is_refused_saying_why() -> None:
    """A job is one request through RunPod's proxy, which ends it after 100 s."""
    detail = refused(check_backends(catalogue(cpu(backend=BackendKind.RUNPOD)), configured=ALL))
    assert detail.startswith(
        "machine_types[0] ('cpu').job_timeout_seconds: must be at most 100 seconds for the runpod backend, got 3600"
    )
    assert "RunPod's proxy ends any request after 100 s (HTTP 524)" in detail


def test_runpod_job_timeout_of_exactly_the_limit_is_accepted() -> None:
    """100 s is within the proxy's limit."""
    given = catalogue(cpu(backend=BackendKind.RUNPOD, job_timeout_seconds=100))
    assert check_backends(given, configured=ALL) is given


def test_long_jobs_are_fine_on_other_backends() -> None:
    """The 100 s limit is RunPod's proxy's, not the pool's."""
    given = catalogue(cpu(backend=BackendKind.DOCKER), cpu(name="f", backend=BackendKind.FLY))
    assert check_backends(given, configured=ALL) is given


def test_runpod_cpu_type_over_32_cpus_is_refused() -> None:
    """RunPod's CPU pods stop at 32 vCPUs."""
    detail = refused(check_backends(catalogue(cpu(backend=BackendKind.RUNPOD, cpus=48, job_timeout_seconds=60)),
                                    configured=ALL))  # fmt: skip
    assert detail == "machine_types[0] ('cpu').cpus: must be at most 32 for a runpod CPU pod, got 48"


def test_every_error_of_every_entry_is_reported() -> None:
    """Two entries, three problems: all three in one 400."""
    result = check_backends(
        catalogue(cpu(name="a", backend=BackendKind.RUNPOD, cpus=64), cpu(name="b", backend=BackendKind.DOCKER)),
        configured=(),
    )
    assert isinstance(result, CatalogueRejected)
    assert [(error.index, error.field) for error in result.errors] == [
        (0, "backend"), (0, "job_timeout_seconds"), (0, "cpus"), (1, "backend"),
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("cpus", "count"), [(None, 2), (1, 2), (2, 2), (3, 4), (4.5, 8), (8, 8), (9, 16), (31.5, 32), (33, None)]
)
def test_vcpu_count_rounds_up_to_a_power_of_two_from_2_to_32(cpus: float | None, count: int | None) -> None:
    """cpus round up to 2, 4, 8, 16 or 32; more than 32 cannot be had."""
    assert runpod_vcpu_count(cpus) == count


@pytest.mark.parametrize(
    ("types", "configured", "line"),
    [
        pytest.param(
            (cpu(name="a", backend=BackendKind.LOCAL),),
            ALL,
            "backends configured: docker, fly, local, runpod; used by the catalogue: local; "
            "configured, no type uses: docker, fly, runpod",
            id="only-local-types-of-four-configured",
        ),
        pytest.param(
            (cpu(name="a", backend=BackendKind.LOCAL), cpu(name="b", backend=BackendKind.DOCKER)),
            {BackendKind.DOCKER},
            "backends configured: docker, local; used by the catalogue: docker, local",
            id="every-configured-backend-used",
        ),
        pytest.param(
            (cpu(name="a", backend=BackendKind.FLY),),
            (),
            "backends configured: local; used by the catalogue: fly; configured, no type uses: local; "
            "used, not configured: fly",
            id="a-type-on-an-unconfigured-backend",
        ),
        pytest.param(
            (),
            (),
            "backends configured: local; used by the catalogue: none; configured, no type uses: local",
            id="empty-catalogue",
        ),
    ],
)
def test_the_log_line_says_what_is_configured_and_what_the_catalogue_uses(
    types: tuple[MachineType, ...], configured: set[BackendKind], line: str
) -> None:
    assert backend_use(catalogue(*types), configured=configured) == line
