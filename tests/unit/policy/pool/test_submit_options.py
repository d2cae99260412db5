"""Submit options: machine_type required, priority int64, timeouts cut to the type, bad times named (422)."""

from __future__ import annotations

import pytest

from tests.unit.policy.pool.conftest import catalogue, cpu
from thermostat.policy.pool.submit_options import (
    NAME_ECHO_CHARS,
    SubmitError,
    SubmitErrorKind,
    SubmitOptions,
    decide_submit_options,
    parse_submit_query,
)

CATALOGUE = catalogue(cpu(boot_timeout_seconds=60, job_timeout_seconds=100))


def options(query: dict[str, str], *, sync: bool = False) -> SubmitOptions:
    result = parse_submit_query(query, catalogue=CATALOGUE, sync=sync)
    assert isinstance(result, SubmitOptions), result
    return result


def error(query: dict[str, str], *, sync: bool = True) -> SubmitError:
    result = parse_submit_query(query, catalogue=CATALOGUE, sync=sync)
    assert isinstance(result, SubmitError), result
    return result


def test_defaults() -> None:
    """Only machine_type given: priority 0, no session, the type's job timeout, no wait for an async submit."""
    chosen = options({"machine_type": "cpu"})
    assert (chosen.machine_type.name, chosen.priority, chosen.session_id) == ("cpu", 0, None)
    assert (chosen.timeout_seconds, chosen.wait_seconds) == (100.0, None)


@pytest.mark.parametrize(
    ("query", "kind"),
    [
        pytest.param({}, SubmitErrorKind.MISSING, id="machine-type-missing"),
        pytest.param({"machine_type": ""}, SubmitErrorKind.MISSING, id="machine-type-blank"),
        pytest.param({"machine_type": "gpu"}, SubmitErrorKind.UNKNOWN_MACHINE_TYPE, id="machine-type-not-in-catalogue"),
    ],
)
def test_machine_type_is_required_and_must_be_in_the_catalogue(query: dict[str, str], kind: SubmitErrorKind) -> None:
    """No machine type, or one the catalogue lacks, is refused naming machine_type."""
    refused = error(query)
    assert (refused.kind, refused.parameter) == (kind, "machine_type")


@pytest.mark.parametrize(
    ("raw", "value"),
    [
        pytest.param("7", 7, id="positive"),
        pytest.param("-3", -3, id="negative"),
        pytest.param(str(2**63 - 1), 2**63 - 1, id="int64-max"),
        pytest.param(str(-(2**63)), -(2**63), id="int64-min"),
    ],
)
def test_priority_is_a_64_bit_integer(raw: str, value: int) -> None:
    """Any 64-bit integer is a priority."""
    assert options({"machine_type": "cpu", "priority": raw}).priority == value


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param(str(2**63), id="above-int64"),
        pytest.param(str(-(2**63) - 1), id="below-int64"),
        pytest.param("1.5", id="fraction"),
        pytest.param("+5", id="plus-sign"),
        pytest.param("1_0", id="underscore"),
        pytest.param("high", id="word"),
        pytest.param("", id="blank"),
    ],
)
def test_priority_that_is_not_a_64_bit_integer_is_refused(raw: str) -> None:
    """A priority outside int64 or not a plain integer is refused naming priority."""
    refused = error({"machine_type": "cpu", "priority": raw})
    assert (refused.kind, refused.parameter) == (SubmitErrorKind.INVALID, "priority")


@pytest.mark.parametrize(
    ("requested", "effective"),
    [
        pytest.param("30", 30.0, id="shortens"),
        pytest.param("100", 100.0, id="equal"),
        pytest.param("500", 100.0, id="never-extends"),
    ],
)
def test_timeout_may_shorten_the_types_job_timeout_never_extend_it(requested: str, effective: float) -> None:
    """timeout_seconds is cut to the type's job_timeout_seconds."""
    assert options({"machine_type": "cpu", "timeout_seconds": requested}).timeout_seconds == effective


@pytest.mark.parametrize(
    ("query", "wait"),
    [
        pytest.param({}, 160.0, id="default-300-cut-to-boot-plus-job"),
        pytest.param({"wait_seconds": "5"}, 5.0, id="short-wait-kept"),
        pytest.param({"wait_seconds": "1000"}, 160.0, id="long-wait-cut"),
        pytest.param({"timeout_seconds": "10"}, 70.0, id="cut-to-the-shortened-job-timeout"),
    ],
)
def test_wait_defaults_to_300_cut_to_boot_plus_job_timeout(query: dict[str, str], wait: float) -> None:
    """wait_seconds bounds the wait: default 300, never past boot + job timeout."""
    assert options({"machine_type": "cpu", **query}, sync=True).wait_seconds == wait


def test_default_wait_of_300_stands_when_the_type_allows_it() -> None:
    """A type with long timeouts keeps the 300 s default wait."""
    result = decide_submit_options(catalogue=catalogue(cpu()), machine_type="cpu", sync=True)
    assert isinstance(result, SubmitOptions)
    assert result.wait_seconds == 300.0


@pytest.mark.parametrize("parameter", ["timeout_seconds", "wait_seconds"])
@pytest.mark.parametrize("raw", ["0", "-1", "nan", "inf", "Infinity", "1e400", "ten", ""])
def test_non_positive_or_non_finite_time_is_refused_naming_it(parameter: str, raw: str) -> None:
    """A time that is not positive and finite is a 422 naming the parameter; nothing is queued."""
    refused = error({"machine_type": "cpu", parameter: raw})
    assert (refused.kind, refused.parameter) == (SubmitErrorKind.INVALID, parameter)
    assert refused.detail.startswith(f"{parameter}: ")


@pytest.mark.parametrize("value", [0.0, -2.0, float("nan"), float("inf")])
def test_typed_times_follow_the_same_rule(value: float) -> None:
    """The gRPC path's typed times are checked like query strings."""
    result = decide_submit_options(catalogue=CATALOGUE, machine_type="cpu", timeout_seconds=value)
    assert isinstance(result, SubmitError)
    assert result.parameter == "timeout_seconds"


def test_session_id_is_kept_and_bounded() -> None:
    """session_id is optional, kept as given, and refused when absurdly long."""
    assert options({"machine_type": "cpu", "session_id": "nb-1"}).session_id == "nb-1"
    assert error({"machine_type": "cpu", "session_id": "x" * 300}).parameter == "session_id"


def test_an_unknown_machine_type_is_repeated_cut_to_a_bounded_length() -> None:
    """The name is the caller's text and the error travels in a header: a body-sized name is not echoed whole."""
    message = error({"machine_type": "g" * 20_000}).message
    assert message.startswith("unknown machine type: " + repr("g" * NAME_ECHO_CHARS + "…")) and len(message) < 250


def test_an_unknown_machine_type_is_refused_in_the_original_packages_words_however_large_the_catalogue() -> None:
    """`unknown machine type: '<name>'`, what the strata-pool package's clients match on; a catalogue of hundreds of
    types is not listed (the refusal travels as a gRPC status; GET /v1/machine-types lists them)."""
    names = [f"type-{i:03d}-" + "x" * 50 for i in range(400)]
    result = parse_submit_query({"machine_type": "nope"}, catalogue=catalogue(*(cpu(name=n) for n in names)), sync=True)
    assert isinstance(result, SubmitError) and result.kind is SubmitErrorKind.UNKNOWN_MACHINE_TYPE
    assert result.message == "unknown machine type: 'nope'"


@pytest.mark.parametrize("parameter", ["priority", "timeout_seconds", "wait_seconds"])
def test_a_bad_value_is_repeated_cut_to_a_bounded_length(parameter: str) -> None:
    """The value is the caller's text and the error travels in a header: a body-sized value is not echoed whole."""
    failure = error({"machine_type": "cpu", parameter: "9x" * 10_000})
    assert failure.parameter == parameter
    assert failure.message.endswith("got '" + "9x" * 32 + "'…") and len(failure.message) < 200
