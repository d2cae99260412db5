"""The job-done notification as the complete statement words it (on `pool_jobs_done` or an instance's own
channel): the job id, and for a completed job with a small result, the state and the result in base64 (broken
into lines the way PostgreSQL's encode() does); and each instance's channel name."""

from __future__ import annotations

import base64

from thermostat.pool_dispatcher.repository import JOBS_DONE, job_done_channel, parse_job_done

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


def test_each_instance_has_a_channel_of_its_own_within_postgres_name_limit() -> None:
    longest = "i" * 100  # POOL_INSTANCE_ID's longest
    channels = {job_done_channel(instance) for instance in ("alpha", "beta", 'a b;"c', longest)}
    assert len(channels) == 4
    assert all(len(channel.encode()) <= 63 and channel.startswith(f"{JOBS_DONE}_") for channel in channels)
    assert job_done_channel("alpha") == job_done_channel("alpha")  # a restart under the id listens where it did
