"""Which backends a catalogue may name, and what each provider cannot do: the catalogue's second check.

`parse_catalogue` checks each field on its own; `check_backends` then checks the parsed catalogue against
this deployment and the providers' hard limits, before anything is stored (a 400 with every error, each
naming the entry and the field, like the field checks):
- A type naming a backend the deployment has not enabled (`POOL_ENABLED_BACKENDS`) is refused naming that
  setting. `local` runs a type's `image` as a command line on the dispatcher's host, so it is enabled only when
  a deployment asks for it (`make run` and the tests do): otherwise whoever holds the admin token could run a
  command on the pool host, and the seed's own example PUT (`"image": "strata-worker:latest"`, no backend) would be
  accepted as a command that fails every boot while its jobs wait (issue 23).
- A type naming a backend that is not configured is refused, saying which setting is missing: a type
  nobody can start would queue jobs that fail only at boot. `local` needs no setting.
- A runpod type whose `job_timeout_seconds` exceeds 100 is refused: RunPod's proxy (Cloudflare) ends any
  request after 100 s with a 524, and the pool's call to a worker lasts the whole job, so a longer job
  fails however high its timeout is set (worker-pool seed, "The RunPod backend").
- A runpod CPU type (no gpu_type) asking for more than 32 cpus is refused: RunPod's CPU pods come in
  2, 4, 8, 16 or 32 vCPUs, and the backend rounds up to the next of those.
- A type on any backend but docker that sets a confinement field away from its strict default (hardening.py:
  `writable_root`, `scratch_mb`, `pids_limit`, `user`, `capabilities_add`, `runtime`; egress.py's `egress_hosts`) is
  refused naming the field: only the Docker backend applies them, and a setting nothing reads would claim a
  confinement that is not there.
`check_runtimes` then checks each docker type's `runtime` against the runtimes the daemon lists (`GET /info`): one it
does not list is refused naming the field and those it has; a daemon that could not be read refuses every runtime
named, saying why (a runtime cannot be taken on trust: every boot of the type would fail).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass

from thermostat.policy.pool.hardening import runtime_refusal
from thermostat.policy.pool.machine_type import (
    BackendKind,
    Catalogue,
    CatalogueError,
    CatalogueRejected,
)

RUNPOD_PROXY_LIMIT_SECONDS = 100.0
RUNPOD_VCPU_COUNTS = (2, 4, 8, 16, 32)
RUNPOD_MAX_VCPUS = RUNPOD_VCPU_COUNTS[-1]

ENABLED_SETTING = "POOL_ENABLED_BACKENDS"
DEFAULT_SETTING = "POOL_DEFAULT_BACKEND"
# Every provider, never local: a deployment that wants machines as commands on its own host says so.
DEFAULT_ENABLED = frozenset({BackendKind.DOCKER, BackendKind.RUNPOD, BackendKind.FLY})
DEFAULT_BACKEND = BackendKind.DOCKER  # the seed's default


@dataclass(frozen=True, slots=True, kw_only=True)
class BackendChoice:
    """BackendChoice is what a deployment lets its catalogue name: the backends enabled, and the one an entry
    without `backend` runs on (always among them)."""

    enabled: frozenset[BackendKind] = DEFAULT_ENABLED
    default: BackendKind = DEFAULT_BACKEND


def backend_choice(enabled: str | None, default: str | None) -> BackendChoice:
    """POOL_ENABLED_BACKENDS (comma-separated; unset or blank: docker, runpod, fly) and POOL_DEFAULT_BACKEND (unset or
    blank: docker). ValueError naming the variable for an unknown name, an empty list, or a default not enabled."""
    choices = ", ".join(kind.value for kind in BackendKind)

    def kind(value: str, setting: str) -> BackendKind:
        try:
            return BackendKind(value.strip().lower())
        except ValueError:
            raise ValueError(f"{setting}: {value.strip()!r} is not a backend; choose from {choices}") from None

    kinds = DEFAULT_ENABLED
    if enabled is not None and enabled.strip():
        names = [name for name in enabled.split(",") if name.strip()]
        if not names:
            raise ValueError(f"{ENABLED_SETTING}: names no backend; choose from {choices}")
        kinds = frozenset(kind(name, ENABLED_SETTING) for name in names)
    chosen = DEFAULT_BACKEND if default is None or not default.strip() else kind(default, DEFAULT_SETTING)
    if chosen not in kinds:
        enabled_names = ", ".join(sorted(k.value for k in kinds))
        raise ValueError(
            f"{DEFAULT_SETTING}: {chosen.value} is not among {ENABLED_SETTING} ({enabled_names}); enable it there or "
            f"choose one of those"
        )
    return BackendChoice(enabled=kinds, default=chosen)


# What to set for each backend, named in the refusal when the shell passes no more precise reason.
REQUIRED_SETTINGS: Mapping[BackendKind, str] = {
    BackendKind.DOCKER: "STRATA_POOL_DOCKER_SOCKET (or a unix:// DOCKER_HOST) naming a Docker daemon's socket",
    BackendKind.RUNPOD: "POOL_RUNPOD_API_KEY (or RUNPOD_API_KEY)",
    BackendKind.FLY: "FLY_API_TOKEN, STRATA_POOL_FLY_APP and STRATA_POOL_FLY_REGION",
}


def runpod_vcpu_count(cpus: float | None) -> int | None:
    """The vCPU count a RunPod CPU pod is created with: cpus rounded up to 2, 4, 8, 16 or 32; unset is 2;
    None when more than 32 are asked for."""
    wanted = 0.0 if cpus is None else cpus
    return next((count for count in RUNPOD_VCPU_COUNTS if count >= math.ceil(wanted)), None)


def backend_use(catalogue: Catalogue, *, configured: Collection[BackendKind]) -> str:
    """What the catalogue uses of the backends this process has configured, in one line for the log: a newcomer
    reading `configured: docker, local, runpod` alone took all three for in use when only local types exist."""
    available = sorted(set(configured), key=lambda kind: kind.value)
    used = sorted({t.backend for t in catalogue.types}, key=lambda kind: kind.value)
    unused = [kind for kind in available if kind not in used]
    missing = [kind for kind in used if kind not in available]

    def names(kinds: list[BackendKind]) -> str:
        return ", ".join(kind.value for kind in kinds) or "none"

    line = f"backends configured: {names(available)}; used by the catalogue: {names(used)}"
    if unused:
        line += f"; configured, no type uses: {names(unused)}"
    if missing:
        line += f"; used, not configured: {names(missing)}"
    return line


def not_enabled(backend: BackendKind, enabled: Collection[BackendKind]) -> str:
    """The refusal of a type whose backend the deployment has not enabled, naming the setting."""
    names = ", ".join(sorted(kind.value for kind in enabled))
    return (
        f"the {backend.value} backend is not enabled in this deployment ({ENABLED_SETTING}: {names}); "
        f"add it to {ENABLED_SETTING} to allow it"
    )


def check_enabled(catalogue: Catalogue, *, enabled: Collection[BackendKind]) -> Catalogue | CatalogueRejected:
    """The catalogue as given, or each type naming a backend the deployment has not enabled (a catalogue at start)."""
    errors = tuple(
        CatalogueError(index=index, name=t.name, field="backend", message=not_enabled(t.backend, enabled))
        for index, t in enumerate(catalogue.types)
        if t.backend not in enabled
    )
    return CatalogueRejected(errors=errors) if errors else catalogue


def check_backends(
    catalogue: Catalogue,
    *,
    configured: Collection[BackendKind],
    missing_settings: Mapping[BackendKind, str] | None = None,
    enabled: Collection[BackendKind] = frozenset(BackendKind),
) -> Catalogue | CatalogueRejected:
    """The catalogue as given, or every reason it cannot be served by this deployment.

    `enabled` is what the deployment allows (POOL_ENABLED_BACKENDS); `configured` is the set of backends this
    process can start machines on (local, when enabled, needs no setting and is configured); `missing_settings`
    may say, per unconfigured backend, what exactly is missing (the shell knows, e.g. "POOL_FLY_REGION");
    otherwise REQUIRED_SETTINGS names everything the backend needs.
    """
    errors: list[CatalogueError] = []
    available = {*configured, BackendKind.LOCAL}
    for index, machine_type in enumerate(catalogue.types):

        def refuse(field: str, message: str, index: int = index, name: str = machine_type.name) -> None:
            errors.append(CatalogueError(index=index, name=name, field=field, message=message))

        backend = machine_type.backend
        if backend not in enabled:
            refuse("backend", not_enabled(backend, enabled))
        elif backend not in available:
            setting = (missing_settings or {}).get(backend) or REQUIRED_SETTINGS.get(backend, "its settings")
            refuse("backend", f"the {backend.value} backend is not configured: set {setting}")
        if backend is BackendKind.RUNPOD:
            if machine_type.job_timeout_seconds > RUNPOD_PROXY_LIMIT_SECONDS:
                refuse(
                    "job_timeout_seconds",
                    f"must be at most {RUNPOD_PROXY_LIMIT_SECONDS:g} seconds for the runpod backend, got "
                    f"{machine_type.job_timeout_seconds:g}: RunPod's proxy ends any request after "
                    f"{RUNPOD_PROXY_LIMIT_SECONDS:g} s (HTTP 524) and a job is one request; run longer jobs on "
                    "docker or fly",
                )
            if machine_type.gpu_type is None and runpod_vcpu_count(machine_type.cpus) is None:
                refuse("cpus", f"must be at most {RUNPOD_MAX_VCPUS} for a runpod CPU pod, got {machine_type.cpus:g}")
        if backend is not BackendKind.DOCKER:
            for name in machine_type.relaxed:
                refuse(name, f"is applied by the docker backend only; a {backend.value} machine does not read it")
    if errors:
        return CatalogueRejected(errors=tuple(errors))
    return catalogue


def check_runtimes(catalogue: Catalogue, listed: Collection[str] | str) -> Catalogue | CatalogueRejected:
    """The catalogue, or each docker type whose `runtime` the daemon does not list; `listed` is the daemon's
    runtimes, or why they could not be read."""
    errors: list[CatalogueError] = []
    for index, machine_type in enumerate(catalogue.types):
        if machine_type.backend is not BackendKind.DOCKER or machine_type.runtime is None:
            continue
        if isinstance(listed, str):
            problem: str | None = f"cannot be checked: the Docker daemon's runtimes could not be read ({listed})"
        else:
            problem = runtime_refusal(machine_type.runtime, listed)
        if problem is not None:
            errors.append(CatalogueError(index=index, name=machine_type.name, field="runtime", message=problem))
    return CatalogueRejected(errors=tuple(errors)) if errors else catalogue


def names_runtime(catalogue: Catalogue) -> bool:
    """Whether a docker type of the catalogue names a runtime (only then is the daemon asked)."""
    return any(t.backend is BackendKind.DOCKER and t.runtime is not None for t in catalogue.types)
