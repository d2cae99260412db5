"""A batch of sync jobs in one REST request (`POST /v1/jobs/batch`), read strictly, and each job's answer.

REST pays its per-request cost (the edge's transcoding, a gRPC call to the dispatcher) once per batch instead of
once per job, as the RunJobs stream does for gRPC. The body is an object with one field, `jobs`: a list of at
most MAX_BATCH_JOBS job objects, each taking what `POST /v1/jobs/sync` takes as query parameters, with the
payload inside as base64 (RFC 4648, standard alphabet, padded, the bytes' one encoding; empty or absent: no
bytes):

    {"jobs": [{"machine_type": "echo", "payload": "aGk=", "priority": 5, "session_id": "nb-1",
               "timeout_seconds": 20, "wait_seconds": 30}, ...]}

The whole body is read before anything is queued: one thing wrong with it is 400 naming it
(`body.jobs[3].priority: must be a JSON integer, not a string`), and no job of the batch runs. What the sync
submit itself would refuse (an unknown machine type, a payload over the limit, a budget) is that job's answer
alone; the others run. The answer is a JSON list in the request's order, each entry what `POST /v1/jobs/sync`
would have answered for that job:

    200  {"status": 200, "job_id": "...", "result": "<base64>"}
    202  {"status": 202, "job_id": "...", "job": {...}}           still running when its wait ran out
    409 / 502 / 504  {"status": ..., "job_id": "...", "job": {...}}   cancelled / failed / timed out
    refused  {"status": 4xx or 5xx, "job_id": null or the failed job a budget refusal recorded, "detail": "..."}
    200 without its result  {"status": 200, "job_id": "...", "job": {...}, "detail": "..."}   see below

The answer is one gRPC message, bounded as a request is (the edge's body limit), whatever the workers return:
the results it carries, as base64, fit a budget (results_carried); a completed job whose result does not fit is
answered with its job and a detail, and its result is read with `GET /v1/jobs/{id}/result`.

Pure: bytes in, frozen values out.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from thermostat.policy.common.strict_json import (
    BodyError,
    BodyField,
    JsonKind,
    decode_json,
    is_object,
    kind_of,
    read_pairs,
    unknown_field,
)

MAX_BATCH_JOBS = 64
"""The most jobs one batch may hold: as many as one RunJobs stream keeps in flight."""

BATCH_BODY = (BodyField("jobs", JsonKind.STRING),)  # named in the unknown-field detail; read by hand below
JOB_FIELDS = (
    BodyField("machine_type", JsonKind.STRING),
    BodyField("payload", JsonKind.STRING),
    BodyField("priority", JsonKind.INTEGER),
    BodyField("session_id", JsonKind.STRING),
    BodyField("timeout_seconds", JsonKind.NUMBER),
    BodyField("wait_seconds", JsonKind.NUMBER),
)


@dataclass(frozen=True, slots=True)
class BatchJob:
    """One job of a batch: the sync submit's query parameters as strings (what `POST /v1/jobs/sync` would have
    been given) and the payload's bytes."""

    query: Mapping[str, str]
    payload: bytes


def read_job_batch(data: bytes, *, max_jobs: int = MAX_BATCH_JOBS) -> tuple[BatchJob, ...] | BodyError:
    """The batch's jobs in order, or the first thing wrong with the body (nothing of it is to run)."""
    decoded = decode_json(data)
    if isinstance(decoded, BodyError):
        return decoded
    if not is_object(decoded):
        return BodyError(f"body: must be a JSON object, not {kind_of(decoded)}")
    jobs: list[object] = []  # each value given for `jobs` (a null one included)
    for key, value in decoded:
        if key != "jobs":
            return unknown_field(key, BATCH_BODY)
        if jobs:
            return BodyError("body.jobs: given twice")
        jobs.append(value)
    if not jobs:
        return BodyError("body.jobs: required: a list of jobs")
    return _jobs(jobs[0], max_jobs)


def _jobs(jobs: object, max_jobs: int) -> tuple[BatchJob, ...] | BodyError:
    if not isinstance(jobs, list):
        return BodyError(f"body.jobs: must be a JSON list of job objects, not {kind_of(jobs)}")
    if not jobs:
        return BodyError("body.jobs: empty; a batch holds at least one job")
    if len(jobs) > max_jobs:
        return BodyError(f"body.jobs: {len(jobs)} jobs is over the limit of {max_jobs} per batch")
    read: list[BatchJob] = []
    for index, job in enumerate(jobs):
        one = _job(job, f"body.jobs[{index}]")
        if isinstance(one, BodyError):
            return one
        read.append(one)
    return tuple(read)


def _job(job: object, where: str) -> BatchJob | BodyError:
    values = read_pairs(job, JOB_FIELDS, where=where)
    if isinstance(values, BodyError):
        return values
    query: dict[str, str] = {}
    payload = b""
    for name, value in values.values.items():
        if name == "payload":
            assert isinstance(value, str)
            decoded = _base64(value)
            if decoded is None:
                return BodyError(f"{where}.payload: must be base64 (RFC 4648, standard alphabet, padded)")
            payload = decoded
        elif isinstance(value, float):
            query[name] = repr(value)  # exact: the submit's parser reads it back to the same double
        else:
            query[name] = str(value)
    return BatchJob(query=MappingProxyType(query), payload=payload)


def _base64(text: str) -> bytes | None:
    """The bytes `text` is the one encoding of (so "aGl=", which decoders also read as "hi", is refused: its pad bits
    are not zero), or None."""
    try:
        encoded = text.encode("ascii")
        decoded = base64.b64decode(encoded, validate=True)
    except (binascii.Error, UnicodeEncodeError):
        return None
    return decoded if base64.b64encode(decoded) == encoded else None


def answer_entry(
    status: int,
    job_id: str | None,
    *,
    result: bytes | None = None,
    job: Mapping[str, Any] | None = None,
    detail: str | None = None,
) -> dict[str, Any]:
    """One job's entry in the batch's answer: its status and job id, then the result, the job or the refusal."""
    entry: dict[str, Any] = {"status": status, "job_id": job_id}
    if result is not None:
        entry["result"] = base64.b64encode(result).decode("ascii")
    if job is not None:
        entry["job"] = dict(job)
    if detail is not None:
        entry["detail"] = detail
    return entry


def results_carried(sizes: Sequence[int | None], budget: int) -> tuple[bool, ...]:
    """For each entry (its result's size in bytes, None for no result) whether the answer carries the result: in the
    batch's order, each whose base64 still fits `budget` with the results carried before it. One that does not is
    left out and the next ones are still tried, so one large result does not push the small ones after it out."""
    carried: list[bool] = []
    used = 0
    for size in sizes:
        encoded = None if size is None else _base64_length(size)
        fits = encoded is not None and used + encoded <= budget
        used += encoded if encoded is not None and fits else 0
        carried.append(fits)
    return tuple(carried)


def carried_bytes(sizes: Sequence[int | None], carried: Sequence[bool]) -> int:
    """The base64 bytes of the results `carried` (results_carried's answer for `sizes`)."""
    return sum(_base64_length(size) for size, keep in zip(sizes, carried, strict=True) if keep and size is not None)


def _base64_length(size: int) -> int:
    return 4 * ((size + 2) // 3)


def result_left_out(job_id: str, size: int, budget: int) -> str:
    """The detail of a completed job whose result the answer does not carry."""
    return (
        f"result of {size} bytes left out: a batch's answer carries at most {budget} bytes of base64 results; "
        f"read it with GET /v1/jobs/{job_id}/result"
    )
