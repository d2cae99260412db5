"""The catalogue against this deployment: unconfigured backends and RunPod's hard limits, one test per rule."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from tests.unit.policy.pool.conftest import catalogue, cpu
from thermostat.policy.pool.backends import (
    DEFAULT_ENABLED,
    BackendChoice,
    backend_choice,
    backend_use,
    check_backends,
    check_enabled,
    check_runtimes,
    names_runtime,
    runpod_vcpu_count,
)
from thermostat.policy.pool.machine_type import BackendKind, Catalogue, CatalogueRejected, MachineType

ALL = {BackendKind.DOCKER, BackendKind.RUNPOD, BackendKind.FLY}


def refused(result: object) -> str:
    assert isinstance(result, CatalogueRejected), result
    return result.detail


def test_catalogue_on_configured_backends_is_accepted_as_given() -> None:
    """Every type on a configured backend passes unchanged."""
    given = catalogue(cpu(name="a", backend=BackendKind.DOCKER), cpu(name="b", backend=BackendKind.FLY))
    assert check_backends(given, configured=ALL) is given


def test_local_needs_no_setting_once_enabled() -> None:
    """The local backend, enabled, needs no setting."""
    given = catalogue(cpu(backend=BackendKind.LOCAL))
    assert check_backends(given, configured=(), enabled={BackendKind.LOCAL}) is given


@pytest.mark.parametrize(
    ("backend", "enabled"),
    [
        pytest.param(BackendKind.LOCAL, DEFAULT_ENABLED, id="local-by-default"),
        pytest.param(BackendKind.FLY, {BackendKind.DOCKER, BackendKind.LOCAL}, id="a-provider-left-out"),
    ],
)
def test_type_on_a_backend_not_enabled_is_refused_naming_the_field_and_the_setting(
    backend: BackendKind, enabled: set[BackendKind]
) -> None:
    """Not enabled wins over configured: the 400 names the entry's backend field and POOL_ENABLED_BACKENDS."""
    names = ", ".join(sorted(kind.value for kind in enabled))
    detail = refused(check_backends(catalogue(cpu(backend=backend)), configured=ALL, enabled=enabled))
    assert detail == (
        f"machine_types[0] ('cpu').backend: the {backend.value} backend is not enabled in this deployment "
        f"(POOL_ENABLED_BACKENDS: {names}); add it to POOL_ENABLED_BACKENDS to allow it"
    )


def test_check_enabled_names_each_type_on_a_disabled_backend_only() -> None:
    """The start-up check: a type on a disabled backend is named; an unconfigured one is left to the per-job check."""
    given = catalogue(cpu(name="a", backend=BackendKind.LOCAL), cpu(name="b", backend=BackendKind.FLY))
    result = check_enabled(given, enabled=DEFAULT_ENABLED)
    assert isinstance(result, CatalogueRejected)
    assert [(error.index, error.field) for error in result.errors] == [(0, "backend")]
    assert check_enabled(given, enabled={*DEFAULT_ENABLED, BackendKind.LOCAL}) is given


@pytest.mark.parametrize(
    ("enabled", "default", "choice"),
    [
        pytest.param(None, None, BackendChoice(enabled=DEFAULT_ENABLED, default=BackendKind.DOCKER), id="unset"),
        pytest.param(" ", "", BackendChoice(enabled=DEFAULT_ENABLED, default=BackendKind.DOCKER), id="blank-is-unset"),
        pytest.param(
            "local, Docker", "local",
            BackendChoice(enabled=frozenset({BackendKind.LOCAL, BackendKind.DOCKER}), default=BackendKind.LOCAL),
            id="local-enabled-and-default",
        ),
        pytest.param(
            "fly", "fly", BackendChoice(enabled=frozenset({BackendKind.FLY}), default=BackendKind.FLY), id="fly-only"
        ),
    ],
)  # fmt: skip
def test_backend_choice_reads_the_two_settings(enabled: str | None, default: str | None, choice: BackendChoice) -> None:
    """Docker, RunPod and Fly are enabled and docker is the default unless the deployment says otherwise."""
    assert backend_choice(enabled, default) == choice


@pytest.mark.parametrize(
    ("enabled", "default", "message"),
    [
        pytest.param("docker,lambda", None, "POOL_ENABLED_BACKENDS: 'lambda' is not a backend; choose from local, "
                     "docker, runpod, fly", id="unknown-enabled"),
        pytest.param(",,", None, "POOL_ENABLED_BACKENDS: names no backend", id="empty-list"),
        pytest.param(None, "podman", "POOL_DEFAULT_BACKEND: 'podman' is not a backend", id="unknown-default"),
        pytest.param(None, "local", "POOL_DEFAULT_BACKEND: local is not among POOL_ENABLED_BACKENDS (docker, fly, "
                     "runpod)", id="default-not-enabled"),
        pytest.param("fly", None, "POOL_DEFAULT_BACKEND: docker is not among POOL_ENABLED_BACKENDS (fly)",
                     id="docker-default-left-out"),
    ],
)  # fmt: skip
def test_backend_choice_refuses_naming_the_variable(enabled: str | None, default: str | None, message: str) -> None:
    """A bad value stops the start naming the variable."""
    with pytest.raises(ValueError, match="^" + re.escape(message)):
        backend_choice(enabled, default)


@pytest.mark.parametrize(
    ("backend", "setting"),
    [
        (BackendKind.DOCKER, "STRATA_POOL_DOCKER_SOCKET (or a unix:// DOCKER_HOST)"),
        (BackendKind.RUNPOD, "POOL_RUNPOD_API_KEY (or RUNPOD_API_KEY)"),
        (BackendKind.FLY, "FLY_API_TOKEN, STRATA_POOL_FLY_APP and STRATA_POOL_FLY_REGION"),
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
            {*ALL, BackendKind.LOCAL},
            "backends configured: docker, fly, local, runpod; used by the catalogue: local; "
            "configured, no type uses: docker, fly, runpod",
            id="only-local-types-of-four-configured",
        ),
        pytest.param(
            (cpu(name="a", backend=BackendKind.LOCAL), cpu(name="b", backend=BackendKind.DOCKER)),
            {BackendKind.DOCKER, BackendKind.LOCAL},
            "backends configured: docker, local; used by the catalogue: docker, local",
            id="every-configured-backend-used",
        ),
        pytest.param(
            (cpu(name="a", backend=BackendKind.FLY),),
            {BackendKind.LOCAL},
            "backends configured: local; used by the catalogue: fly; configured, no type uses: local; "
            "used, not configured: fly",
            id="a-type-on-an-unconfigured-backend",
        ),
        pytest.param(
            (),
            {BackendKind.LOCAL},
            "backends configured: local; used by the catalogue: none; configured, no type uses: local",
            id="empty-catalogue",
        ),
        pytest.param(
            (cpu(name="a", backend=BackendKind.DOCKER),),
            {BackendKind.DOCKER},
            "backends configured: docker; used by the catalogue: docker",
            id="local-not-enabled-is-not-listed",
        ),
    ],
)
def test_the_log_line_says_what_is_configured_and_what_the_catalogue_uses(
    types: tuple[MachineType, ...], configured: set[BackendKind], line: str
) -> None:
    assert backend_use(catalogue(*types), configured=configured) == line


@pytest.mark.parametrize("backend", [BackendKind.RUNPOD, BackendKind.FLY, BackendKind.LOCAL])
def test_a_confinement_field_on_a_backend_that_does_not_apply_it_is_refused_naming_it(backend: BackendKind) -> None:
    """Only docker reads writable_root … runtime: set on another backend it would claim a confinement not there."""
    relaxed = MachineType(
        name="t", image="img", backend=backend, job_timeout_seconds=60, user="worker", runtime="runsc"
    )
    result = check_backends(Catalogue(types=(relaxed,)), configured=list(BackendKind))
    assert isinstance(result, CatalogueRejected)
    assert [error.field for error in result.errors] == ["user", "runtime"]
    assert "docker backend only" in result.errors[0].message


@pytest.mark.parametrize("backend", [BackendKind.RUNPOD, BackendKind.FLY, BackendKind.LOCAL])
def test_egress_hosts_on_a_backend_without_an_egress_proxy_are_refused_naming_it(backend: BackendKind) -> None:
    """Only docker machines sit behind an egress proxy: an allow-list elsewhere would claim a limit not there."""
    opted = MachineType(name="t", image="img", backend=backend, job_timeout_seconds=60, egress_hosts=("pypi.org",))
    result = check_backends(Catalogue(types=(opted,)), configured=list(BackendKind))
    assert isinstance(result, CatalogueRejected)
    assert [error.field for error in result.errors] == ["egress_hosts"]
    assert isinstance(check_backends(Catalogue(types=(replace(opted, backend=BackendKind.DOCKER),)),
                                     configured=list(BackendKind)), Catalogue)  # fmt: skip


def test_the_strict_defaults_are_accepted_on_every_backend() -> None:
    """A type that relaxes nothing is served by any backend."""
    types = tuple(MachineType(name=k.value, image="img", backend=k, job_timeout_seconds=60) for k in BackendKind)
    assert isinstance(check_backends(Catalogue(types=types), configured=list(BackendKind)), Catalogue)


def on_runtime(runtime: str | None, backend: BackendKind = BackendKind.DOCKER) -> MachineType:
    return MachineType(name=f"t-{runtime}", image="img", backend=backend, runtime=runtime)


def test_a_runtime_the_daemon_lists_is_accepted_and_one_it_does_not_is_refused_naming_its_runtimes() -> None:
    """Each docker type's runtime is checked against GET /info's Runtimes; the refusal lists what the daemon has."""
    types = Catalogue(types=(on_runtime("runsc"), on_runtime("kata-runtime"), on_runtime(None)))
    result = check_runtimes(types, ("runc", "runsc"))
    assert isinstance(result, CatalogueRejected)
    assert [str(error) for error in result.errors] == [
        "machine_types[1] ('t-kata-runtime').runtime: the Docker daemon has no runtime 'kata-runtime'; it has: "
        "runc, runsc"
    ]
    assert check_runtimes(Catalogue(types=(on_runtime("runsc"),)), ("runc", "runsc")) == Catalogue(
        types=(on_runtime("runsc"),)
    )


def test_a_runtime_is_refused_when_the_daemons_runtimes_could_not_be_read() -> None:
    """A runtime is never taken on trust: every boot of the type would fail."""
    result = check_runtimes(Catalogue(types=(on_runtime("runsc"),)), "docker: daemon at /s did not answer")
    assert isinstance(result, CatalogueRejected)
    assert result.errors[0].field == "runtime"
    assert "could not be read (docker: daemon at /s did not answer)" in result.errors[0].message


def test_the_daemon_is_asked_only_for_a_catalogue_naming_a_docker_runtime() -> None:
    assert names_runtime(Catalogue(types=(on_runtime("runsc"),)))
    assert not names_runtime(Catalogue(types=(on_runtime(None),)))
