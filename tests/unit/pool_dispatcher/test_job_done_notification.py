"""The `pool_jobs_done` notification as the complete statement words it: the job id, and for a completed job with
a small result, the state and the result in base64 (broken into lines the way PostgreSQL's encode() does)."""

from __future__ import annotations

import base64

from thermostat.pool_dispatcher.repository import parse_job_done

JOB = "2d0f3c59-7a6e-4f0b-9a55-0c6fd0d1c3a1"


def pg_base64(data: bytes) -> str:
    """PostgreSQL's encode(…, 'base64'): a newline after every 76 characters."""
    text = base64.b64encode(data).decode()
    return "\n".join(text[i : i + 76] for i in range(0, len(text), 76))


def test_a_bare_job_id_announces_no_result() -> None:
    assert parse_job_done(JOB) == (JOB, None)


def test_a_completion_carries_its_result_bytes_verbatim_across_line_breaks() -> None:
    result = bytes(range(256)) * 3  # every byte value, longer than one base64 line
    assert parse_job_done(f"{JOB} completed {pg_base64(result)}") == (JOB, result)


def test_a_completion_with_an_empty_result_announces_empty_bytes() -> None:
    assert parse_job_done(f"{JOB} completed ") == (JOB, b"")


def test_a_state_other_than_completed_announces_no_result() -> None:
    assert parse_job_done(f"{JOB} failed ") == (JOB, None)
