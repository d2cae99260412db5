"""The catalogue of machine types: what a caller may ask for, validated whole before anything is stored.

A `PUT /v1/machine-types` body is the whole catalogue, a JSON list of machine types in the shape GET
returns; only `name` and `image` are required. Every field's type and range is checked before anything is
stored (worker-pool seed: "a number sent as a string, an unknown key, a non-finite number, a max_workers below 1, a
timeout, cpus, memory_mb or disk_gb of zero or less, or a negative cool-down, health_check_failures or
gpu_count is a 400 naming the field"), and every error names the entry by index and name. Numbers are JSON
numbers, never strings, and never booleans (Python's `True` is an int; `"max_workers": true` is not 1).

Defaults, chosen for a pool that should not bill for idle machines by accident:
- `backend` the deployment's `POOL_DEFAULT_BACKEND`, `docker` unless set (the seed's default; `default_backend`
  here). Every backend is checked against what this deployment enables and configures, and the providers'
  limits, by `backends.check_backends` after parsing; `local` (a child process on this host, `image` its command
  line) only where a deployment enables it.
- `cpus`, `memory_mb`, `disk_gb` unset: the machine may take the whole host (worker-pool seed: Isolation).
- `gpu_type` unset, `gpu_count` 1 (read only with a `gpu_type`).
- `max_workers` unset: no per-tenant ceiling (right for a single-tenant pool, wrong for a hosted one).
- `cool_down_seconds` 300: an idle machine is stopped five minutes after its last job.
- `health_check_failures` 3: one miss is a dropped packet, three is a machine that is gone; 0 = no probing.
- `boot_timeout_seconds` 300 (a provider pulling an image takes minutes; a local process takes seconds).
- `job_timeout_seconds` 3600.
- `price_per_hour` unset: the type's machine time is metered but not priced (metering's pool spend reads it in
  USD per machine-hour; a number, 0 or more).
- `min_tenure_seconds` unset (null): the type's measured boot time. How long a machine holds its fleet slot, from its
  boot, before fair share's rotation may retire it after its current job for a tenant waiting at the fleet cap
  (thermostat.policy.pool.rotation): a boot's worth of work at least, so at most half of a rotation is boots. 0
  rotates after every job; a number, 0 or more.
Times are bounded by `MAX_TIMEOUT_SECONDS` (a day), so the longest sync wait a catalogue allows
(`MAX_WAIT_SECONDS`, boot + job) is a constant the edge's route timeout can cover.

The Docker backend's confinement (issue 36, hardening.py): `writable_root` false, `scratch_mb` 64, `pids_limit` 256,
`user` "65534:65534", `capabilities_add` [], `runtime` unset, `egress_hosts` [] (no route out; egress.py: a list of
`host` or `host:port` its machines reach through an egress proxy); the defaults are the strict ones, a type relaxes
what its workload needs. Only docker machines read them: `backends.check_backends` refuses a relaxed value (or a
runtime) on another backend, and a runtime the daemon does not list.

`env` and `provider_options` can hold credentials for the tenant's data: without the admin token their
values read `<redacted>` (keys stay, so a caller sees what is configured, not what it is).
"""

from __future__ import annotations

import json
import math
import re
import shlex
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from thermostat.policy.common.echo import cut, key_path, listed, quoted
from thermostat.policy.pool.egress import MAX_EGRESS_HOSTS, egress_host_refusal
from thermostat.policy.pool.hardening import (
    DEFAULT_PIDS_LIMIT,
    DEFAULT_SCRATCH_MB,
    DEFAULT_USER,
    DEFAULT_WRITABLE_ROOT,
    MAX_SCRATCH_MB,
    capability_refusal,
    runtime_name_refusal,
    user_refusal,
)

REDACTED = "<redacted>"

DEFAULT_GPU_COUNT = 1
DEFAULT_COOL_DOWN_SECONDS = 300.0
DEFAULT_HEALTH_CHECK_FAILURES = 3
DEFAULT_BOOT_TIMEOUT_SECONDS = 300.0
DEFAULT_JOB_TIMEOUT_SECONDS = 3600.0

MAX_TIMEOUT_SECONDS = 86_400.0
MAX_WAIT_SECONDS = 2 * MAX_TIMEOUT_SECONDS
MAX_INT = 2**31 - 1  # every integer field fits a Postgres integer column

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")


class BackendKind(StrEnum):
    """BackendKind names who provides a machine: a local process, a Docker container, a RunPod pod, a Fly Machine."""

    LOCAL = "local"
    DOCKER = "docker"
    RUNPOD = "runpod"
    FLY = "fly"


@dataclass(frozen=True, slots=True, kw_only=True)
class MachineType:
    """MachineType is one catalogue entry: the image a tenant's jobs run on and the limits around it."""

    name: str
    image: str
    backend: BackendKind = BackendKind.DOCKER
    cpus: float | None = None
    memory_mb: int | None = None
    disk_gb: int | None = None
    gpu_type: str | None = None
    gpu_count: int = DEFAULT_GPU_COUNT
    max_workers: int | None = None
    cool_down_seconds: float = DEFAULT_COOL_DOWN_SECONDS
    health_check_failures: int = DEFAULT_HEALTH_CHECK_FAILURES
    boot_timeout_seconds: float = DEFAULT_BOOT_TIMEOUT_SECONDS
    job_timeout_seconds: float = DEFAULT_JOB_TIMEOUT_SECONDS
    price_per_hour: float | None = None
    min_tenure_seconds: float | None = None  # None: the type's measured boot time (rotation.py)
    env: Mapping[str, str] = field(default_factory=dict)
    provider_options: Mapping[str, Any] = field(default_factory=dict)
    writable_root: bool = DEFAULT_WRITABLE_ROOT
    scratch_mb: int = DEFAULT_SCRATCH_MB
    pids_limit: int = DEFAULT_PIDS_LIMIT
    user: str = DEFAULT_USER
    capabilities_add: tuple[str, ...] = ()
    runtime: str | None = None
    egress_hosts: tuple[str, ...] = ()

    @property
    def relaxed(self) -> tuple[str, ...]:
        """The confinement fields this type sets away from the strict defaults (a runtime counts)."""
        return tuple(name for name, strict in STRICT_CONFINEMENT.items() if getattr(self, name) != strict)


STRICT_CONFINEMENT: Mapping[str, object] = {
    "writable_root": DEFAULT_WRITABLE_ROOT, "scratch_mb": DEFAULT_SCRATCH_MB, "pids_limit": DEFAULT_PIDS_LIMIT,
    "user": DEFAULT_USER, "capabilities_add": (), "runtime": None, "egress_hosts": (),
}  # fmt: skip


@dataclass(frozen=True, slots=True, kw_only=True)
class Catalogue:
    """Catalogue is the whole set of machine types, names unique; order is the order they were given in."""

    types: tuple[MachineType, ...] = ()

    def get(self, name: str) -> MachineType | None:
        return next((machine_type for machine_type in self.types if machine_type.name == name), None)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(machine_type.name for machine_type in self.types)


@dataclass(frozen=True, slots=True, kw_only=True)
class CatalogueError:
    """CatalogueError names one invalid field: the entry (index and, when readable, name) and the field."""

    index: int | None
    name: str | None
    field: str | None
    message: str
    key: str | None = None  # a key inside the field (`env.KEY`)

    def __str__(self) -> str:
        where = "machine_types" if self.index is None else f"machine_types[{self.index}]"
        if self.name is not None:  # the caller's text: an entry's name is read before it is validated
            where += f" ({quoted(self.name)})"
        if self.field is not None:
            where = key_path(self.field, where)
        if self.key is not None:
            where = key_path(self.key, where)
        return f"{where}: {self.message}"


@dataclass(frozen=True, slots=True, kw_only=True)
class CatalogueRejected:
    """CatalogueRejected is a PUT body refused whole (400): nothing of it is stored."""

    errors: tuple[CatalogueError, ...]

    @property
    def detail(self) -> str:
        """The errors found, the first few spelt out: a body of thousands of bad entries still gets its 400."""
        return listed([str(error) for error in self.errors], sep="; ", noun="more errors")


def parse_catalogue_json(
    text: str | bytes, *, default_backend: BackendKind = BackendKind.DOCKER
) -> Catalogue | CatalogueRejected:
    """Decode a PUT body and validate it. `NaN` and `Infinity` (which Python's json accepts) are refused."""

    def refuse_constant(constant: str) -> float:
        raise ValueError(f"{constant} is not a finite number")

    try:
        body = json.loads(text, parse_constant=refuse_constant)
    except (ValueError, UnicodeDecodeError) as error:
        return _rejected(CatalogueError(index=None, name=None, field=None, message=f"not valid JSON: {error}"))
    return parse_catalogue(body, default_backend=default_backend)


def parse_catalogue(
    body: object, *, default_backend: BackendKind = BackendKind.DOCKER
) -> Catalogue | CatalogueRejected:
    """Validate a decoded catalogue (a list of objects); every error found is reported, none stored. An entry without
    `backend` runs on `default_backend` (the deployment's POOL_DEFAULT_BACKEND)."""
    if not isinstance(body, list):
        return _rejected(CatalogueError(index=None, name=None, field=None, message="must be a JSON list"))
    errors: list[CatalogueError] = []
    types: list[MachineType] = []
    first_index: dict[str, int] = {}
    for index, entry in enumerate(body):
        parsed = _parse_entry(index, entry, errors, default_backend)
        if parsed is None:
            continue
        if parsed.name in first_index:
            errors.append(
                CatalogueError(
                    index=index,
                    name=parsed.name,
                    field="name",
                    message=f"duplicates machine_types[{first_index[parsed.name]}]",
                )
            )
            continue
        first_index[parsed.name] = index
        types.append(parsed)
    if errors:
        return CatalogueRejected(errors=tuple(errors))
    return Catalogue(types=tuple(types))


def machine_type_to_json(machine_type: MachineType, *, admin: bool) -> dict[str, Any]:
    """The GET shape (also the PUT shape); `env` and `provider_options` values redacted unless `admin`."""

    def shown(values: Mapping[str, Any]) -> dict[str, Any]:
        return dict(values) if admin else dict.fromkeys(values, REDACTED)

    return {
        "name": machine_type.name,
        "image": machine_type.image,
        "backend": machine_type.backend.value,
        "cpus": machine_type.cpus,
        "memory_mb": machine_type.memory_mb,
        "disk_gb": machine_type.disk_gb,
        "gpu_type": machine_type.gpu_type,
        "gpu_count": machine_type.gpu_count,
        "max_workers": machine_type.max_workers,
        "cool_down_seconds": machine_type.cool_down_seconds,
        "health_check_failures": machine_type.health_check_failures,
        "boot_timeout_seconds": machine_type.boot_timeout_seconds,
        "job_timeout_seconds": machine_type.job_timeout_seconds,
        "price_per_hour": machine_type.price_per_hour,
        "min_tenure_seconds": machine_type.min_tenure_seconds,
        "env": shown(machine_type.env),
        "provider_options": shown(machine_type.provider_options),
        "writable_root": machine_type.writable_root,
        "scratch_mb": machine_type.scratch_mb,
        "pids_limit": machine_type.pids_limit,
        "user": machine_type.user,
        "capabilities_add": list(machine_type.capabilities_add),
        "runtime": machine_type.runtime,
        "egress_hosts": list(machine_type.egress_hosts),
    }


def catalogue_to_json(catalogue: Catalogue, *, admin: bool) -> list[dict[str, Any]]:
    return [machine_type_to_json(machine_type, admin=admin) for machine_type in catalogue.types]


FIELDS = frozenset(
    {
        "name", "image", "backend", "cpus", "memory_mb", "disk_gb", "gpu_type", "gpu_count", "max_workers",
        "cool_down_seconds", "health_check_failures", "boot_timeout_seconds", "job_timeout_seconds", "env",
        "provider_options", "price_per_hour", "min_tenure_seconds", "writable_root", "scratch_mb", "pids_limit",
        "user", "capabilities_add", "runtime", "egress_hosts",
    }
)  # fmt: skip


class _Invalid(Exception):
    """One field's error while reading an entry."""


def _parse_entry(
    index: int, entry: object, errors: list[CatalogueError], default_backend: BackendKind
) -> MachineType | None:
    if not isinstance(entry, dict):
        errors.append(CatalogueError(index=index, name=None, field=None, message="must be a JSON object"))
        return None
    raw_name = entry.get("name")
    name = raw_name if isinstance(raw_name, str) and raw_name else None
    found_before = len(errors)

    def read(key: str, parse: Any, *args: Any) -> Any:
        try:
            return parse(entry, key, *args)
        except _Invalid as error:
            errors.append(CatalogueError(index=index, name=name, field=key, message=str(error)))
            return None

    for key in sorted(set(entry) - FIELDS, key=str):
        errors.append(CatalogueError(index=index, name=name, field=str(key), message="is not a machine type field"))
    values = {
        "name": read("name", _name),
        "image": read("image", _required_text),
        "backend": read("backend", _backend),
        "cpus": read("cpus", _number, True, False),
        "memory_mb": read("memory_mb", _integer, 1, True),
        "disk_gb": read("disk_gb", _integer, 1, True),
        "gpu_type": read("gpu_type", _optional_text),
        "gpu_count": read("gpu_count", _integer, 0, False),
        "max_workers": read("max_workers", _integer, 1, True),
        "cool_down_seconds": read("cool_down_seconds", _seconds, False),
        "health_check_failures": read("health_check_failures", _integer, 0, False),
        "boot_timeout_seconds": read("boot_timeout_seconds", _seconds, True),
        "job_timeout_seconds": read("job_timeout_seconds", _seconds, True),
        "price_per_hour": read("price_per_hour", _number, False, False),
        "min_tenure_seconds": read("min_tenure_seconds", _optional_seconds),
        "env": read("env", _env),
        "provider_options": read("provider_options", _options),
        "writable_root": read("writable_root", _boolean),
        "scratch_mb": read("scratch_mb", _integer, 1, False),
        "pids_limit": read("pids_limit", _integer, 1, False),
        "user": read("user", _checked_text, user_refusal),
        "capabilities_add": read("capabilities_add", _capabilities),
        "runtime": read("runtime", _checked_text, runtime_name_refusal),
        "egress_hosts": read("egress_hosts", _egress_hosts),
    }
    if values["scratch_mb"] is not None and values["scratch_mb"] > MAX_SCRATCH_MB:
        read("scratch_mb", _too_large, MAX_SCRATCH_MB)
    if "backend" not in entry or entry["backend"] is None:
        values["backend"] = default_backend
    if values["backend"] is BackendKind.LOCAL and values["image"] is not None:
        read("image", _command_line)
    if len(errors) > found_before:
        return None
    return MachineType(**{key: value for key, value in values.items() if value is not None})


def _boolean(entry: dict[str, Any], key: str) -> bool | None:
    value = entry.get(key)
    if value is None:
        return None
    if not isinstance(value, bool):
        raise _Invalid(f"must be true or false, not {_json_type(value)}")
    return value


def _checked_text(entry: dict[str, Any], key: str, refusal: Any) -> str | None:
    value = _optional_text(entry, key)
    if value is None:
        return None
    problem = refusal(value)
    if problem is not None:
        raise _Invalid(f"{problem}, got {quoted(value)}")
    return value


def _capabilities(entry: dict[str, Any], key: str) -> tuple[str, ...] | None:
    return _checked_list(entry, key, "capability names", capability_refusal)


def _egress_hosts(entry: dict[str, Any], key: str) -> tuple[str, ...] | None:
    return _checked_list(entry, key, "host or host:port", egress_host_refusal, maximum=MAX_EGRESS_HOSTS)


def _checked_list(
    entry: dict[str, Any], key: str, what: str, refusal: Callable[[str], str | None], *, maximum: int | None = None
) -> tuple[str, ...] | None:
    """A list of strings each passing `refusal` (None: accepted), duplicates dropped in order; absent is None."""
    value = entry.get(key)
    if value is None:
        return None
    if not isinstance(value, list):
        raise _Invalid(f"must be a list of {what}, not {_json_type(value)}")
    if maximum is not None and len(value) > maximum:
        raise _Invalid(f"must list at most {maximum} hosts, got {len(value)}")
    for item in value:
        if not isinstance(item, str):
            raise _Invalid(f"must be a list of {what}, holding {_json_type(item)}")
        problem = refusal(item)
        if problem is not None:
            raise _Invalid(f"{quoted(item)}: {problem}")
    return tuple(dict.fromkeys(value))


def _too_large(entry: dict[str, Any], key: str, maximum: int) -> None:
    raise _Invalid(f"must be at most {maximum}, got {_got(entry[key])}")


def _name(entry: dict[str, Any], key: str) -> str:
    value = _required_text(entry, key)
    if not _NAME.fullmatch(value):
        raise _Invalid("must be 1-63 letters, digits, '.', '_' or '-', starting with a letter or digit")
    return value


def _required_text(entry: dict[str, Any], key: str) -> str:
    if key not in entry:
        raise _Invalid("is required")
    value = entry[key]
    if not isinstance(value, str) or not value.strip():
        raise _Invalid("must be a non-empty string")
    return value


def _optional_text(entry: dict[str, Any], key: str) -> str | None:
    value = entry.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise _Invalid("must be a non-empty string or null")
    return value


def _backend(entry: dict[str, Any], key: str) -> BackendKind | None:
    value = entry.get(key)
    if value is None:
        return None
    choices = ", ".join(kind.value for kind in BackendKind)
    if not isinstance(value, str) or value not in {kind.value for kind in BackendKind}:
        raise _Invalid(f"must be one of {choices}")
    return BackendKind(value)


def _command_line(entry: dict[str, Any], key: str) -> None:
    try:
        argv = shlex.split(entry[key])
    except ValueError as error:
        raise _Invalid(f"is not a command line for the local backend ({error})") from None
    if not argv:
        raise _Invalid("is an empty command line")


def _number(entry: dict[str, Any], key: str, positive: bool, required: bool) -> float | None:
    value = entry.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise _Invalid(f"must be a number, not {_json_type(value)}")
    try:
        number = float(value)
    except OverflowError:  # an integer literal of hundreds of digits
        raise _Invalid("must be a finite number") from None
    if not math.isfinite(number):
        raise _Invalid("must be a finite number")
    if positive and number <= 0:
        raise _Invalid(f"must be greater than 0, got {_got(value)}")
    if number < 0:
        raise _Invalid(f"must not be negative, got {_got(value)}")
    return number


def _seconds(entry: dict[str, Any], key: str, positive: bool) -> float | None:
    if key not in entry:
        return None
    number = _number(entry, key, positive, True)
    assert number is not None
    if number > MAX_TIMEOUT_SECONDS:
        raise _Invalid(f"must be at most {MAX_TIMEOUT_SECONDS:g} seconds, got {_got(entry[key])}")
    return number


def _optional_seconds(entry: dict[str, Any], key: str) -> float | None:
    """Seconds, 0 or more, at most a day; absent or null: the field's default."""
    if entry.get(key) is None:
        return None
    return _seconds(entry, key, False)


def _integer(entry: dict[str, Any], key: str, minimum: int, nullable: bool) -> int | None:
    if key not in entry or (nullable and entry[key] is None):
        return None
    value = entry[key]
    if isinstance(value, float) and not math.isfinite(value):
        raise _Invalid("must be a finite number")
    if not isinstance(value, int) or isinstance(value, bool):
        raise _Invalid(f"must be an integer, not {_json_type(value)}")
    if value < minimum:
        rule = "must not be negative" if minimum == 0 else f"must be at least {minimum}"
        raise _Invalid(f"{rule}, got {_got(value)}")
    if value > MAX_INT:
        raise _Invalid(f"must be at most {MAX_INT}, got {_got(value)}")
    return value


def _got(value: float) -> str:
    """A number as given, cut: a JSON integer may run to thousands of digits."""
    return cut(str(value), 24)


def _env(entry: dict[str, Any], key: str) -> dict[str, str] | None:
    value = entry.get(key)
    if value is None:
        return None
    if not isinstance(value, dict):
        raise _Invalid(f"must be an object of strings, not {_json_type(value)}")
    for name, setting in value.items():
        if not name or "=" in name or "\0" in name:
            raise _Invalid(f"has an invalid variable name {quoted(name)}")
        if not isinstance(setting, str) or "\0" in setting:
            raise _Invalid(f"{quoted(name)} must be a string")  # the value itself is never echoed
    return dict(value)


def _options(entry: dict[str, Any], key: str) -> dict[str, Any] | None:
    value = entry.get(key)
    if value is None:
        return None
    if not isinstance(value, dict):
        raise _Invalid(f"must be an object, not {_json_type(value)}")
    if not _all_finite(value.values()):
        raise _Invalid("must hold finite numbers only")
    return dict(value)


def _all_finite(values: Iterable[object]) -> bool:
    for value in values:
        if isinstance(value, float) and not math.isfinite(value):
            return False
        if isinstance(value, dict) and not _all_finite(value.values()):
            return False
        if isinstance(value, list) and not _all_finite(value):
            return False
    return True


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def _rejected(error: CatalogueError) -> CatalogueRejected:
    return CatalogueRejected(errors=(error,))
