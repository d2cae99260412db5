"""A batch of sync jobs in one REST body (POST /v1/jobs/batch): read whole and strictly, each fault named by its
place in the body (nothing of the batch runs), each job the sync submit's query and its payload's bytes; and each
job's answer entry. One named test per rule of the job_batch module's contract."""

from __future__ import annotations

import base64
import json

import pytest

from tests.unit.policy.pool.conftest import catalogue, cpu
from thermostat.policy.common.strict_json import BodyError
from thermostat.policy.pool.job_batch import (
    MAX_BATCH_JOBS,
    BatchJob,
    answer_entry,
    carried_bytes,
    read_job_batch,
    result_left_out,
    results_carried,
)
from thermostat.policy.pool.submit_options import SubmitOptions, parse_submit_query

JOB_KNOWN = "known: machine_type, payload, priority, session_id, timeout_seconds, wait_seconds"
CATALOGUE = catalogue(cpu(boot_timeout_seconds=600, job_timeout_seconds=3600))


def batch(*jobs: object) -> bytes:
    return json.dumps({"jobs": list(jobs)}).encode()


def read(body: bytes, **limits: int) -> tuple[BatchJob, ...]:
    jobs = read_job_batch(body, **limits)
    assert isinstance(jobs, tuple), jobs
    return jobs


def refusal(body: bytes, **limits: int) -> str:
    jobs = read_job_batch(body, **limits)
    assert isinstance(jobs, BodyError), jobs
    return jobs.detail


def one(job: str) -> bytes:
    """A batch of one job written out as JSON text (numbers as the caller spelt them)."""
    return b'{"jobs": [' + job.encode() + b"]}"


# --- what a batch reads to ---------------------------------------------------------------------------------------


def test_each_job_is_the_sync_submits_query_as_strings_and_its_payloads_bytes_in_the_batchs_order() -> None:
    jobs = read(
        batch(
            {"machine_type": "cpu", "payload": "aGk=", "priority": 5, "session_id": "nb-1", "timeout_seconds": 20},
            {"machine_type": "gpu", "wait_seconds": 30.5},
        )
    )
    assert [dict(j.query) for j in jobs] == [
        {"machine_type": "cpu", "priority": "5", "session_id": "nb-1", "timeout_seconds": "20.0"},
        {"machine_type": "gpu", "wait_seconds": "30.5"},
    ]
    assert [j.payload for j in jobs] == [b"hi", b""]


def test_a_job_field_is_read_under_its_proto_name_or_its_lower_camel_json_name() -> None:
    (job,) = read(batch({"machineType": "cpu", "sessionId": "s", "timeoutSeconds": 1, "waitSeconds": 2}))
    assert dict(job.query) == {
        "machine_type": "cpu",
        "session_id": "s",
        "timeout_seconds": "1.0",
        "wait_seconds": "2.0",
    }


def test_a_field_left_out_is_not_in_the_query_so_the_submit_applies_its_default() -> None:
    (job,) = read(batch({"machine_type": "cpu"}))
    assert dict(job.query) == {"machine_type": "cpu"}


def test_what_only_the_submit_can_judge_is_left_to_it_not_refused_as_the_bodys_fault() -> None:
    """An empty job (no machine type), a non-positive time or an unknown type is that job's own 422 when it runs,
    not a 400 that stops the batch."""
    jobs = read(batch({}, {"machine_type": "nope"}, {"machine_type": "cpu", "timeout_seconds": -1}))
    assert [dict(j.query) for j in jobs] == [
        {},
        {"machine_type": "nope"},
        {"machine_type": "cpu", "timeout_seconds": "-1.0"},
    ]


def test_a_batch_may_hold_max_batch_jobs() -> None:
    assert len(read(batch(*[{"machine_type": "cpu"}] * MAX_BATCH_JOBS))) == MAX_BATCH_JOBS


# --- the body's shape --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "detail"),
    [
        pytest.param(b"[]", "body: must be a JSON object, not an array", id="array"),
        pytest.param(b'"jobs"', "body: must be a JSON object, not a string", id="string"),
        pytest.param(b"null", "body: must be a JSON object, not null", id="null"),
    ],
)
def test_a_body_that_is_not_an_object_is_refused_naming_the_body(body: bytes, detail: str) -> None:
    assert refusal(body) == detail


@pytest.mark.parametrize(
    ("body", "start"),
    [
        pytest.param(b"", "body: empty", id="empty"),
        pytest.param(b'{"jobs": [', "body: not JSON", id="truncated"),
        pytest.param(b"\xff", "body: not UTF-8", id="not-utf8"),
    ],
)
def test_a_body_that_cannot_be_read_is_refused_naming_the_body(body: bytes, start: str) -> None:
    assert refusal(body).startswith(start)


def test_jobs_missing_is_refused_naming_it() -> None:
    assert refusal(b"{}") == "body.jobs: required: a list of jobs"


def test_jobs_empty_is_refused_naming_it() -> None:
    assert refusal(b'{"jobs": []}') == "body.jobs: empty; a batch holds at least one job"


@pytest.mark.parametrize(
    ("value", "kind"),
    [
        pytest.param(b'{"machine_type": "cpu"}', "an object", id="object"),
        pytest.param(b'"cpu"', "a string", id="string"),
        pytest.param(b"3", "a number", id="number"),
        pytest.param(b"null", "null", id="null"),
    ],
)
def test_jobs_that_is_not_a_list_is_refused_naming_it(value: bytes, kind: str) -> None:
    assert refusal(b'{"jobs": ' + value + b"}") == f"body.jobs: must be a JSON list of job objects, not {kind}"


def test_jobs_over_max_batch_jobs_is_refused_naming_the_limit() -> None:
    detail = refusal(batch(*[{"machine_type": "cpu"}] * (MAX_BATCH_JOBS + 1)))
    assert detail == f"body.jobs: {MAX_BATCH_JOBS + 1} jobs is over the limit of {MAX_BATCH_JOBS} per batch"


def test_the_limit_is_the_callers_to_lower() -> None:
    assert refusal(batch({}, {}), max_jobs=1) == "body.jobs: 2 jobs is over the limit of 1 per batch"


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(b'{"jobs": [{}], "jobs": [{}]}', id="twice"),
        pytest.param(b'{"jobs": null, "jobs": [{"machine_type": "cpu"}]}', id="null-then-a-list"),
    ],
)
def test_jobs_given_twice_is_refused_naming_it_whatever_the_first_value(body: bytes) -> None:
    assert refusal(body) == "body.jobs: given twice"


@pytest.mark.parametrize("key", ["job", "Jobs", "machine_type", "batch"])
def test_an_unknown_top_level_field_is_refused_naming_it_and_jobs(key: str) -> None:
    assert refusal(f'{{"jobs": [{{}}], "{key}": 1}}'.encode()) == f"body.{key}: unknown field; known: jobs"


# --- each job's fields -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("job", "kind"),
    [
        pytest.param(b"[]", "an array", id="array"),
        pytest.param(b'"cpu"', "a string", id="string"),
        pytest.param(b"null", "null", id="null"),
    ],
)
def test_a_job_that_is_not_an_object_is_refused_naming_its_place(job: bytes, kind: str) -> None:
    assert refusal(b'{"jobs": [{}, ' + job + b"]}") == f"body.jobs[1]: must be a JSON object, not {kind}"


@pytest.mark.parametrize("key", ["bogus", "machine", "tenant_id", "result"])
def test_an_unknown_job_field_is_refused_naming_its_place_and_the_known_ones(key: str) -> None:
    assert refusal(batch({"machine_type": "cpu"}, {key: 1})) == f"body.jobs[1].{key}: unknown field; {JOB_KNOWN}"


def test_a_job_field_given_twice_is_refused_naming_its_place() -> None:
    assert refusal(one('{"machine_type": "a", "machineType": "b"}')).startswith("body.jobs[0].machineType: given twice")


@pytest.mark.parametrize(
    ("field", "value", "wrong"),
    [
        pytest.param("machine_type", 7, "must be a JSON string, not a number", id="machine-type-number"),
        pytest.param("payload", ["aGk="], "must be a JSON string, not an array", id="payload-array"),
        pytest.param("session_id", True, "must be a JSON string, not a boolean", id="session-boolean"),
        pytest.param("priority", "5", "must be a JSON integer, not a string", id="priority-string"),
        pytest.param("priority", 1.5, "must be a JSON integer, not a number", id="priority-fraction"),
        pytest.param("priority", 5.0, "must be a JSON integer, not a number", id="priority-written-with-a-fraction"),
        pytest.param("timeout_seconds", "20", "must be a JSON number, not a string", id="timeout-string"),
        pytest.param("wait_seconds", {"s": 1}, "must be a JSON number, not an object", id="wait-object"),
        pytest.param("wait_seconds", None, "null is not a value; leave the field out to leave it unset", id="null"),
    ],
)
def test_a_job_field_of_the_wrong_type_is_refused_naming_its_place(field: str, value: object, wrong: str) -> None:
    assert refusal(batch({"machine_type": "cpu"}, {field: value})) == f"body.jobs[1].{field}: {wrong}"


def test_a_priority_with_an_exponent_is_not_an_integer() -> None:
    assert refusal(one('{"priority": 1e3}')) == "body.jobs[0].priority: must be a JSON integer, not a number"


@pytest.mark.parametrize(
    "priority",
    [
        pytest.param(2**53 + 1, id="past-2**53"),
        pytest.param(2**63 - 1, id="int64-max"),
        pytest.param(-(2**63), id="int64-min"),
        pytest.param(0, id="zero"),
    ],
)
def test_a_priority_is_read_exactly_as_an_int64(priority: int) -> None:
    """A double would round 2**53 + 1; the query carries the caller's integer, which the submit reads back."""
    (job,) = read(one(f'{{"machine_type": "cpu", "priority": {priority}}}'))
    assert job.query["priority"] == str(priority)
    chosen = parse_submit_query(job.query, catalogue=CATALOGUE, sync=True)
    assert isinstance(chosen, SubmitOptions) and chosen.priority == priority


@pytest.mark.parametrize(
    "literal",
    [
        pytest.param(str(2**63), id="int64-max-plus-one"),
        pytest.param(str(-(2**63) - 1), id="int64-min-minus-one"),
        pytest.param("9" * 399, id="just-short-of-the-long-literal"),
        pytest.param("9" * 400, id="long-literal"),
        pytest.param("-" + "9" * 5000, id="past-ints-digit-limit"),
    ],
)
def test_a_priority_outside_int64_is_refused_naming_it_however_long(literal: str) -> None:
    assert refusal(one(f'{{"priority": {literal}}}')) == "body.jobs[0].priority: must be a 64-bit integer"


@pytest.mark.parametrize(
    ("literal", "value"),
    [
        pytest.param("0.5", 0.5, id="half"),
        pytest.param("0.1", 0.1, id="not-exact-in-binary"),
        pytest.param("20", 20.0, id="integer"),
        pytest.param("1e-7", 1e-7, id="small-exponent"),
        pytest.param("3599.999999999999", 3599.999999999999, id="many-digits"),
        pytest.param("5e-324", 5e-324, id="smallest-double"),
    ],
)
def test_a_time_becomes_query_text_the_submit_reads_back_to_the_same_double(literal: str, value: float) -> None:
    (job,) = read(one(f'{{"machine_type": "cpu", "timeout_seconds": {literal}, "wait_seconds": {literal}}}'))
    chosen = parse_submit_query(job.query, catalogue=CATALOGUE, sync=True)
    assert isinstance(chosen, SubmitOptions), chosen
    assert (chosen.timeout_seconds, chosen.wait_seconds) == (value, value)


@pytest.mark.parametrize("literal", ["1e999", "-1e999", "9" * 400])
def test_a_time_past_a_doubles_range_is_refused_naming_it(literal: str) -> None:
    assert refusal(one(f'{{"timeout_seconds": {literal}}}')) == "body.jobs[0].timeout_seconds: must be a finite number"


@pytest.mark.parametrize("literal", [b"NaN", b"Infinity"])
def test_nan_and_infinity_are_not_json(literal: bytes) -> None:
    assert refusal(b'{"jobs": [{"wait_seconds": ' + literal + b"}]}").startswith("body: not JSON")


@pytest.mark.parametrize("field", ["machine_type", "session_id"])
def test_a_nul_in_a_string_is_refused_naming_its_place(field: str) -> None:
    detail = refusal(one(f'{{"{field}": "a\\u0000b"}}'))
    assert detail == f"body.jobs[0].{field}: must not contain a NUL character (U+0000)"


def test_a_lone_surrogate_in_a_string_is_refused_naming_its_place() -> None:
    detail = refusal(one('{"session_id": "\\udc80"}'))
    assert detail == "body.jobs[0].session_id: is not valid Unicode text (a lone surrogate)"


def test_the_first_fault_in_the_bodys_order_is_the_one_named() -> None:
    assert refusal(batch({"machine_type": "cpu"}, {"priority": "x"}, {"bogus": 1})).startswith("body.jobs[1].")


# --- the payload as base64 ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "payload",
    [
        pytest.param(bytes(range(256)) + b"\x00\r\n", id="every-byte"),
        pytest.param(b"a", id="two-pads"),
        pytest.param(b"ab", id="one-pad"),
        pytest.param(b"abc", id="no-pad"),
    ],
)
def test_a_payload_is_standard_padded_base64_of_any_bytes(payload: bytes) -> None:
    (job,) = read(batch({"machine_type": "cpu", "payload": base64.b64encode(payload).decode()}))
    assert job.payload == payload


@pytest.mark.parametrize("job", [{"machine_type": "cpu", "payload": ""}, {"machine_type": "cpu"}])
def test_an_empty_or_absent_payload_is_no_bytes(job: dict[str, str]) -> None:
    assert read(batch(job))[0].payload == b""


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("aGk", id="padding-missing"),
        pytest.param("aGk==", id="padding-excess"),
        pytest.param("aGk=aGk=", id="padding-inside"),
        pytest.param("====", id="padding-only"),
        pytest.param("a===", id="one-character-short"),
        pytest.param("aGl=", id="pad-bits-not-zero"),
        pytest.param("_-8=", id="url-safe-alphabet"),
        pytest.param("aG k=", id="space"),
        pytest.param("aGk=\n", id="newline"),
        pytest.param("aGk\u00e9", id="not-ascii"),
    ],
)
def test_a_payload_that_is_not_strict_base64_is_refused_naming_its_place(text: str) -> None:
    detail = refusal(batch({"machine_type": "cpu"}, {"machine_type": "cpu", "payload": text}))
    assert detail == "body.jobs[1].payload: must be base64 (RFC 4648, standard alphabet, padded)"


# --- each job's answer entry -------------------------------------------------------------------------------------


def test_a_completed_job_is_its_status_id_and_result_as_base64() -> None:
    assert answer_entry(200, "j-1", result=b"\x00\xff") == {"status": 200, "job_id": "j-1", "result": "AP8="}


def test_an_empty_result_is_an_empty_string_not_absent() -> None:
    assert answer_entry(200, "j-1", result=b"") == {"status": 200, "job_id": "j-1", "result": ""}


def test_a_job_that_ended_another_way_or_runs_on_is_its_status_id_and_job() -> None:
    job = {"id": "j-2", "state": "failed", "error": "cell raised"}
    assert answer_entry(502, "j-2", job=job) == {"status": 502, "job_id": "j-2", "job": job}


@pytest.mark.parametrize(
    ("status", "job_id"),
    [pytest.param(422, None, id="nothing-queued"), pytest.param(409, "j-3", id="budget-recorded-a-failed-job")],
)
def test_a_refused_job_is_its_status_its_job_id_or_null_and_the_detail(status: int, job_id: str | None) -> None:
    entry = answer_entry(status, job_id, detail="machine_type: 'x' is not in the catalogue")
    assert entry == {"status": status, "job_id": job_id, "detail": "machine_type: 'x' is not in the catalogue"}
    assert json.loads(json.dumps(entry))["job_id"] == job_id  # null, not left out


def test_an_entry_is_json_as_it_stands() -> None:
    entry = answer_entry(200, "j", result=bytes(range(256)))
    assert base64.b64decode(json.loads(json.dumps(entry))["result"]) == bytes(range(256))


# --- which results the answer carries ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sizes", "budget", "carried"),
    [
        pytest.param([3, 3, 3], 12, (True, True, True), id="all-fit-exactly"),
        pytest.param([3, 3, 4], 12, (True, True, False), id="the-one-past-the-budget-is-left-out"),
        pytest.param([9, 3], 8, (False, True), id="a-large-one-does-not-push-out-the-small-ones-after-it"),
        pytest.param([None, 0, None], 0, (False, True, False), id="no-result-is-never-carried-an-empty-one-always"),
        pytest.param([1, 2, 3], 4, (True, False, False), id="sized-as-base64-padded"),
    ],
)
def test_results_are_carried_in_the_batchs_order_while_their_base64_fits_the_budget(
    sizes: list[int | None], budget: int, carried: tuple[bool, ...]
) -> None:
    assert results_carried(sizes, budget) == carried


def test_the_sizes_counted_are_the_base64_the_answer_holds() -> None:
    for size in range(0, 40):
        assert 4 * ((size + 2) // 3) == len(base64.b64encode(b"x" * size))
        assert results_carried([size], len(base64.b64encode(b"x" * size))) == (True,)


def test_a_result_left_out_says_how_large_the_budget_and_where_to_read_it() -> None:
    assert result_left_out("j-1", 100, 64) == (
        "result of 100 bytes left out: a batch's answer carries at most 64 bytes of base64 results; "
        "read it with GET /v1/jobs/j-1/result"
    )


def test_the_bytes_carried_are_the_base64_lengths_of_the_results_carried_only() -> None:
    sizes = [3, None, 4, 0, 10]
    carried = (True, False, False, True, True)
    assert carried_bytes(sizes, carried) == 4 + 0 + 16
    assert carried_bytes(sizes, results_carried(sizes, 1000)) == 4 + 8 + 0 + 16
