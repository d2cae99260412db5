"""The catalogue: a PUT body validated whole, every error naming the entry and the field; redaction."""

from __future__ import annotations

import json
from typing import Any

import pytest

from thermostat.policy.common.echo import ECHO_CHARS, LISTED_CHARS, LISTED_ITEMS
from thermostat.policy.pool.machine_type import (
    REDACTED,
    BackendKind,
    Catalogue,
    CatalogueRejected,
    MachineType,
    catalogue_to_json,
    parse_catalogue,
    parse_catalogue_json,
)


def entry(**fields: Any) -> dict[str, Any]:
    return {"name": "cpu-4x", "image": "strata-worker:latest", **fields}


def rejected(body: object) -> CatalogueRejected:
    result = parse_catalogue(body)
    assert isinstance(result, CatalogueRejected), result
    return result


def test_only_name_and_image_are_required_and_defaults_are_documented() -> None:
    """A minimal entry takes the documented defaults: the seed's example entry runs on docker."""
    result = parse_catalogue([{"name": "cpu-4x", "image": "strata-worker:latest"}])
    assert result == Catalogue(
        types=(
            MachineType(
                name="cpu-4x",
                image="strata-worker:latest",
                backend=BackendKind.DOCKER,
                cpus=None,
                memory_mb=None,
                disk_gb=None,
                gpu_type=None,
                gpu_count=1,
                max_workers=None,
                cool_down_seconds=300.0,
                health_check_failures=3,
                boot_timeout_seconds=300.0,
                job_timeout_seconds=3600.0,
                price_per_hour=None,
                min_tenure_seconds=None,
                env={},
                provider_options={},
                writable_root=False,
                scratch_mb=64,
                pids_limit=256,
                user="65534:65534",
                capabilities_add=(),
                runtime=None,
            ),
        )
    )


def test_the_confinement_fields_are_read_and_listed_in_the_get_shape() -> None:
    """A type relaxing its confinement names each field; GET lists them all, the strict defaults included."""
    result = parse_catalogue([
        entry(writable_root=True, scratch_mb=256, pids_limit=2048, user="worker:worker",
              capabilities_add=["CHOWN", "SETUID", "CHOWN"], runtime="runsc"),
        entry(name="strict"),
    ])  # fmt: skip
    assert isinstance(result, Catalogue)
    relaxed, strict = result.types
    assert (relaxed.writable_root, relaxed.scratch_mb, relaxed.pids_limit, relaxed.user) == (
        True, 256, 2048, "worker:worker"
    )  # fmt: skip
    assert (relaxed.capabilities_add, relaxed.runtime) == (("CHOWN", "SETUID"), "runsc")
    assert relaxed.relaxed == ("writable_root", "scratch_mb", "pids_limit", "user", "capabilities_add", "runtime")
    assert strict.relaxed == ()
    shown = catalogue_to_json(result, admin=False)[1]
    assert {key: shown[key] for key in strict.__slots__ if key in shown and key in STRICT} == STRICT


def test_egress_hosts_are_read_once_each_and_listed_empty_by_default() -> None:
    """`egress_hosts` keeps its order without duplicates and counts as relaxed; GET lists [] for a type without."""
    result = parse_catalogue([entry(egress_hosts=["pypi.org", "198.51.100.2:18080", "pypi.org"]), entry(name="no")])
    assert isinstance(result, Catalogue)
    opted, closed = result.types
    assert opted.egress_hosts == ("pypi.org", "198.51.100.2:18080")
    assert (opted.relaxed, closed.relaxed) == (("egress_hosts",), ())
    assert [shown["egress_hosts"] for shown in catalogue_to_json(result, admin=False)] == [
        ["pypi.org", "198.51.100.2:18080"], []
    ]  # fmt: skip


STRICT = {
    "writable_root": False, "scratch_mb": 64, "pids_limit": 256, "user": "65534:65534", "capabilities_add": [],
    "runtime": None,
}  # fmt: skip


@pytest.mark.parametrize(
    ("given", "default", "backend"),
    [
        pytest.param({}, BackendKind.DOCKER, BackendKind.DOCKER, id="absent-is-the-default"),
        pytest.param({"backend": None}, BackendKind.DOCKER, BackendKind.DOCKER, id="null-is-the-default"),
        pytest.param({}, BackendKind.LOCAL, BackendKind.LOCAL, id="a-deployment-default-of-local"),
        pytest.param({"backend": "fly"}, BackendKind.LOCAL, BackendKind.FLY, id="named-wins-over-the-default"),
    ],
)
def test_an_entry_without_backend_runs_on_the_deployments_default(
    given: dict[str, Any], default: BackendKind, backend: BackendKind
) -> None:
    """POOL_DEFAULT_BACKEND (docker unless set) fills a missing or null `backend`; a named one stands."""
    result = parse_catalogue([entry(**given)], default_backend=default)
    assert isinstance(result, Catalogue)
    assert result.types[0].backend is backend


def test_an_image_is_read_as_a_command_line_only_for_local() -> None:
    """`image` is a command line only on local: on docker an unbalanced quote is just an image string's problem."""
    assert isinstance(parse_catalogue([entry(image="python -c 'unclosed")]), Catalogue)
    refused = parse_catalogue([entry(image="python -c 'unclosed")], default_backend=BackendKind.LOCAL)
    assert isinstance(refused, CatalogueRejected)
    assert refused.errors[0].field == "image"


def test_every_field_is_read() -> None:
    """Each field of the PUT shape lands in its attribute."""
    body = entry(
        backend="runpod",
        cpus=4,
        memory_mb=8192,
        disk_gb=20,
        gpu_type="NVIDIA H100 80GB PCIe",
        gpu_count=2,
        max_workers=5,
        cool_down_seconds=60,
        health_check_failures=0,
        boot_timeout_seconds=600,
        job_timeout_seconds=90.5,
        price_per_hour=3.25,
        min_tenure_seconds=45,
        env={"STRATA_WORKER_ALLOWED_HOSTS": ".internal"},
        provider_options={"gpu": {"minCudaVersion": "12.8"}, "cloud": "SECURE"},
    )
    result = parse_catalogue([body])
    assert isinstance(result, Catalogue)
    (machine_type,) = result.types
    assert machine_type.backend is BackendKind.RUNPOD
    assert (machine_type.cpus, machine_type.memory_mb, machine_type.disk_gb) == (4.0, 8192, 20)
    assert (machine_type.gpu_type, machine_type.gpu_count, machine_type.max_workers) == ("NVIDIA H100 80GB PCIe", 2, 5)
    assert machine_type.cool_down_seconds == 60.0
    assert machine_type.health_check_failures == 0
    assert (machine_type.boot_timeout_seconds, machine_type.job_timeout_seconds) == (600.0, 90.5)
    assert machine_type.price_per_hour == 3.25
    assert machine_type.min_tenure_seconds == 45.0
    assert machine_type.env == {"STRATA_WORKER_ALLOWED_HOSTS": ".internal"}
    assert machine_type.provider_options == {"gpu": {"minCudaVersion": "12.8"}, "cloud": "SECURE"}


@pytest.mark.parametrize(
    ("given", "tenure"),
    [
        pytest.param({}, None, id="absent-is-the-measured-boot"),
        pytest.param({"min_tenure_seconds": None}, None, id="null-is-the-measured-boot"),
        pytest.param({"min_tenure_seconds": 0}, 0.0, id="zero-rotates-after-every-job"),
    ],
)
def test_min_tenure_defaults_to_the_types_measured_boot(given: dict[str, Any], tenure: float | None) -> None:
    """`min_tenure_seconds` absent or null leaves it to the measured boot (None); 0 is a setting of its own."""
    result = parse_catalogue([entry(**given)])
    assert isinstance(result, Catalogue)
    assert result.types[0].min_tenure_seconds == tenure
    assert catalogue_to_json(result, admin=False)[0]["min_tenure_seconds"] == tenure


def test_get_shape_round_trips_through_put() -> None:
    """What GET returns (with the admin token) is a valid PUT body for the same catalogue."""
    original = parse_catalogue([entry(cpus=2, env={"A": "b"}, max_workers=3, price_per_hour=0.5, min_tenure_seconds=0)])
    assert isinstance(original, Catalogue)
    assert parse_catalogue(catalogue_to_json(original, admin=True)) == original


@pytest.mark.parametrize(
    ("fields", "field", "message"),
    [
        pytest.param(
            {"max_workers": "5"}, "max_workers", "must be an integer, not a string", id="number-sent-as-string"
        ),
        pytest.param({"cpus": "4"}, "cpus", "must be a number, not a string", id="cpus-as-string"),
        pytest.param({"gpus": 1}, "gpus", "is not a machine type field", id="unknown-key"),
        pytest.param({"cpus": float("nan")}, "cpus", "must be a finite number", id="nan-cpus"),
        pytest.param(
            {"cool_down_seconds": float("inf")}, "cool_down_seconds", "must be a finite number", id="infinite-cool-down"
        ),
        pytest.param({"max_workers": 0}, "max_workers", "must be at least 1", id="max-workers-below-one"),
        pytest.param(
            {"max_workers": True}, "max_workers", "must be an integer, not a boolean", id="boolean-is-not-a-number"
        ),
        pytest.param({"max_workers": 2.5}, "max_workers", "must be an integer", id="fractional-integer"),
        pytest.param(
            {"boot_timeout_seconds": 0}, "boot_timeout_seconds", "must be greater than 0", id="zero-boot-timeout"
        ),
        pytest.param(
            {"job_timeout_seconds": -1}, "job_timeout_seconds", "must be greater than 0", id="negative-job-timeout"
        ),
        pytest.param(
            {"job_timeout_seconds": 10**6}, "job_timeout_seconds", "at most 86400", id="job-timeout-over-a-day"
        ),
        pytest.param({"cpus": 0}, "cpus", "must be greater than 0", id="zero-cpus"),
        pytest.param({"price_per_hour": -0.5}, "price_per_hour", "must not be negative", id="negative-price"),
        pytest.param({"price_per_hour": "1.5"}, "price_per_hour", "must be a number, not a string", id="price-string"),
        pytest.param({"price_per_hour": float("nan")}, "price_per_hour", "must be a finite number", id="nan-price"),
        pytest.param({"min_tenure_seconds": -1}, "min_tenure_seconds", "must not be negative", id="negative-tenure"),
        pytest.param(
            {"min_tenure_seconds": "60"}, "min_tenure_seconds", "must be a number, not a string", id="tenure-string"
        ),
        pytest.param({"min_tenure_seconds": 10**6}, "min_tenure_seconds", "at most 86400", id="tenure-over-a-day"),
        pytest.param({"memory_mb": 0}, "memory_mb", "must be at least 1", id="zero-memory"),
        pytest.param({"disk_gb": -5}, "disk_gb", "must be at least 1", id="negative-disk"),
        pytest.param({"cool_down_seconds": -1}, "cool_down_seconds", "must not be negative", id="negative-cool-down"),
        pytest.param(
            {"health_check_failures": -1},
            "health_check_failures",
            "must not be negative",
            id="negative-health-failures",
        ),
        pytest.param({"gpu_count": -1}, "gpu_count", "must not be negative", id="negative-gpu-count"),
        pytest.param({"backend": "k8s"}, "backend", "must be one of local, docker, runpod, fly", id="unknown-backend"),
        pytest.param({"env": {"TOKEN": 5}}, "env", "'TOKEN' must be a string", id="env-value-not-string"),
        pytest.param({"env": ["A=b"]}, "env", "must be an object of strings", id="env-not-object"),
        pytest.param({"provider_options": "x"}, "provider_options", "must be an object", id="options-not-object"),
        pytest.param(
            {"image": "python -c 'unclosed", "backend": "local"},
            "image",
            "not a command line",
            id="local-image-unparseable",
        ),
        pytest.param({"image": "  "}, "image", "must be a non-empty string", id="blank-image"),
        pytest.param({"name": "has space"}, "name", "must be 1-63 letters", id="bad-name"),
        pytest.param({"writable_root": "yes"}, "writable_root", "must be true or false", id="writable-root-string"),
        pytest.param({"writable_root": 1}, "writable_root", "must be true or false", id="writable-root-number"),
        pytest.param({"scratch_mb": 0}, "scratch_mb", "must be at least 1", id="zero-scratch"),
        pytest.param({"scratch_mb": 2**21}, "scratch_mb", "must be at most 1048576", id="scratch-over-a-terabyte"),
        pytest.param({"pids_limit": 0}, "pids_limit", "must be at least 1", id="zero-pids-limit"),
        pytest.param({"pids_limit": -1}, "pids_limit", "must be at least 1", id="unlimited-pids-is-refused"),
        pytest.param({"pids_limit": "64"}, "pids_limit", "must be an integer", id="pids-limit-string"),
        pytest.param({"user": "root"}, "user", "must not be root", id="root-by-name"),
        pytest.param({"user": "0"}, "user", "must not be root", id="root-by-number"),
        pytest.param({"user": "000:1000"}, "user", "must not be root", id="root-by-padded-number"),
        pytest.param({"user": "worker:0"}, "user", "must not be root", id="root-group"),
        pytest.param({"user": "a b"}, "user", "must be user or user:group", id="user-with-space"),
        pytest.param({"user": 1000}, "user", "must be a non-empty string", id="user-number"),
        pytest.param(
            {"capabilities_add": ["SYS_ADMIN"]}, "capabilities_add", "Docker's default set", id="sys-admin-refused"
        ),
        pytest.param(
            {"capabilities_add": ["CAP_CHOWN"]}, "capabilities_add", "Docker's default set", id="cap-prefix-refused"
        ),
        pytest.param({"capabilities_add": "CHOWN"}, "capabilities_add", "must be a list", id="capabilities-string"),
        pytest.param({"capabilities_add": [1]}, "capabilities_add", "must be a list", id="capability-number"),
        pytest.param({"runtime": "run sc"}, "runtime", "must be 1-63 letters", id="runtime-with-space"),
        pytest.param({"runtime": ""}, "runtime", "must be a non-empty string", id="empty-runtime"),
        pytest.param({"egress_hosts": "pypi.org"}, "egress_hosts", "must be a list", id="egress-hosts-string"),
        pytest.param({"egress_hosts": [443]}, "egress_hosts", "must be a list", id="egress-host-number"),
        pytest.param({"egress_hosts": ["*"]}, "egress_hosts", "DNS name or IPv4", id="egress-to-everywhere"),
        pytest.param({"egress_hosts": ["pypi.org:0"]}, "egress_hosts", "port 1-65535", id="egress-port-0"),
        pytest.param(
            {"egress_hosts": [f"h{n}.org" for n in range(65)]}, "egress_hosts", "at most 64", id="egress-too-many"
        ),
    ],
)
def test_invalid_field_is_rejected_naming_entry_and_field(fields: dict[str, Any], field: str, message: str) -> None:
    """Each invalid field is a 400 naming the entry (index and name) and the field; nothing is stored."""
    result = rejected([entry(name="ok"), entry(name="gpu", **fields) if "name" not in fields else entry(**fields)])
    (error,) = result.errors
    assert error.index == 1
    assert error.field == field
    assert message in error.message
    assert str(error).startswith("machine_types[1]")
    assert f".{field}:" in str(error)
    if "name" not in fields:
        assert "('gpu')" in str(error)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        pytest.param([{"image": "x"}], "name", id="missing-name"),
        pytest.param([{"name": "a"}], "image", id="missing-image"),
    ],
)
def test_missing_required_field_is_named(body: list[dict[str, Any]], field: str) -> None:
    """A missing name or image is an error naming that field."""
    (error,) = rejected(body).errors
    assert (error.index, error.field, error.message) == (0, field, "is required")


def test_duplicate_names_are_rejected_naming_both_entries() -> None:
    """Two entries with one name: the second is the error, pointing at the first."""
    (error,) = rejected([entry(), entry(image="other")]).errors
    assert (error.index, error.name, error.field) == (1, "cpu-4x", "name")
    assert "duplicates machine_types[0]" in error.message


def test_every_error_is_reported_at_once() -> None:
    """A body with several faults reports all of them, so a caller fixes it in one round."""
    result = rejected([entry(max_workers=0, cpus="2"), {"image": "x"}])
    assert [(e.index, e.field) for e in result.errors] == [(0, "cpus"), (0, "max_workers"), (1, "name")]


@pytest.mark.parametrize(
    "body",
    [pytest.param({"name": "a"}, id="object"), pytest.param("cpu", id="string"), pytest.param(None, id="null")],
)
def test_body_must_be_a_list(body: object) -> None:
    """The PUT body is a top-level JSON array."""
    (error,) = rejected(body).errors
    assert error.message == "must be a JSON list"


def test_entry_must_be_an_object() -> None:
    """A list element that is not an object is named by its index."""
    (error,) = rejected([entry(), "cpu-4x"]).errors
    assert (error.index, error.field, error.message) == (1, None, "must be a JSON object")


@pytest.mark.parametrize(
    "text",
    [
        pytest.param('[{"name": "a", "image": "b", "cpus": NaN}]', id="nan-literal"),
        pytest.param('[{"name": "a", "image": "b", "cpus": Infinity}]', id="infinity-literal"),
        pytest.param('[{"name": "a", "image": "b", "cpus": 1e400}]', id="overflowing-number"),
        pytest.param("[{", id="not-json"),
    ],
)
def test_json_text_with_non_finite_numbers_is_rejected(text: str) -> None:
    """NaN and Infinity literals (accepted by Python's json) and overflowing numbers are refused."""
    result = parse_catalogue_json(text)
    assert isinstance(result, CatalogueRejected)
    assert "finite" in result.detail or "not valid JSON" in result.detail


def test_env_values_are_never_echoed_in_errors() -> None:
    """An invalid env value's content does not reach the error (it may be a credential)."""
    result = rejected([entry(env={"TOKEN": ["s3cr3t"]})])
    assert "s3cr3t" not in result.detail


@pytest.mark.parametrize(
    ("admin", "env", "options"),
    [
        pytest.param(False, {"KEY": REDACTED}, {"cloud": REDACTED, "gpu": REDACTED}, id="api-token-redacted"),
        pytest.param(True, {"KEY": "s3cr3t"}, {"cloud": "SECURE", "gpu": {"a": 1}}, id="admin-sees-values"),
    ],
)
def test_env_and_provider_options_values_are_redacted_without_admin(
    admin: bool, env: dict[str, str], options: dict[str, Any]
) -> None:
    """Without the admin token env and provider_options keep their keys and read `<redacted>`."""
    catalogue = parse_catalogue([entry(env={"KEY": "s3cr3t"}, provider_options={"cloud": "SECURE", "gpu": {"a": 1}})])
    assert isinstance(catalogue, Catalogue)
    (shown,) = catalogue_to_json(catalogue, admin=admin)
    assert shown["env"] == env
    assert shown["provider_options"] == options
    assert ("s3cr3t" in json.dumps(shown)) is admin


def test_a_body_of_thousands_of_bad_entries_names_the_first_errors_and_counts_the_rest() -> None:
    """Every error is found, but the detail spells out only the first ones: it travels as a gRPC status, which a
    client refuses past 16 KiB, so a longer one would reach the caller as "Stream removed" instead of a 400."""
    result = rejected([entry(name=f"t{i}", bogus=1) for i in range(2000)])
    assert len(result.errors) == 2000
    assert result.detail.startswith("machine_types[0] ('t0').bogus: is not a machine type field; ")
    assert result.detail.endswith(f"; … and {2000 - LISTED_ITEMS} more errors")
    assert len(result.detail) <= LISTED_CHARS + 100


@pytest.mark.parametrize(
    ("fields", "echo"),
    [
        pytest.param({"name": "é" * 10_000}, "('" + "\\xe9" * ECHO_CHARS + "'…)", id="unvalidated-name"),
        pytest.param({"ü" * 10_000: 1}, '["' + "\\u00fc" * ECHO_CHARS + '"…]', id="unknown-key"),
        pytest.param({"env": {"=" * 10_000: "v"}}, "'" + "=" * ECHO_CHARS + "'…", id="env-variable-name"),
        pytest.param({"memory_mb": 10**4000}, "got " + "1" + "0" * 23 + "…", id="integer-of-4000-digits"),
    ],
)
def test_the_callers_text_in_an_error_is_cut_and_ascii(fields: dict[str, Any], echo: str) -> None:
    (error,) = rejected([entry(**fields)]).errors
    assert echo in str(error) and str(error).replace("…", "").isascii() and len(str(error)) < 600


def test_an_integer_too_large_for_a_float_is_not_a_finite_number() -> None:
    """`cpus` as an integer literal of 400 digits is refused naming the field (float() of it overflows)."""
    (error,) = rejected([entry(cpus=10**400)]).errors
    assert (error.field, error.message) == ("cpus", "must be a finite number")
