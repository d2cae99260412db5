"""The request values of the jobs' two widest statements (jobs.sql `submit` and `complete`): one frozen value per
call, built by name, whose `params()` are the statement's named parameters, so nothing is passed by position."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from .values import Owner


@dataclass(frozen=True, slots=True, kw_only=True)
class SubmitWrite:
    """One submit: the job, the warm machine it may claim (tenant, type, current image) and how it goes out."""

    job_id: str
    tenant_id: str
    machine_type: str
    image: str
    priority: int
    session_id: str | None
    timeout_seconds: float
    payload: bytes
    owner: Owner
    trace: Mapping[str, str]
    send_now: bool  # a claimed job is running (the statement is its conditional send), else dispatched
    done_channel: str | None = None  # this process's sync wait, which a completion in another process notifies
    count_queued: int = 0  # how far the queue ahead of a job that queued is counted (policy/pool/submit_batch)

    def params(self) -> dict[str, object]:
        return {
            "job_id": uuid.UUID(self.job_id),
            "tenant_id": self.tenant_id,
            "machine_type": self.machine_type,
            "image": self.image,
            "priority": self.priority,
            "session_id": self.session_id,
            "timeout_seconds": self.timeout_seconds,
            "payload": self.payload,
            "traceparent": self.trace.get("traceparent"),
            "tracestate": self.trace.get("tracestate"),
            "send_now": self.send_now,
            "done_channel": self.done_channel,
            "count_queued": self.count_queued,
            **self.owner.params(),
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class CompletionWrite:
    """One completion: the job's end as its machine reported it, and what the machine does next."""

    job_id: str
    machine_id: str
    state: str
    result: bytes | None
    error: str | None
    duration_seconds: float  # measured on the monotonic clock
    owner: Owner
    retire: bool
    take_next: bool  # the machine is kept and its image current: it may take the next queued job
    send_next: bool  # that job is running (the statement is its conditional send), else dispatched
    tenant_id: str
    machine_type: str
    notified_result_bytes: int  # the largest result a notification to another process's sync wait carries
    channel: str  # this process's own (its sync waits are woken here, not notified)

    def params(self) -> dict[str, object]:
        return {
            "job_id": uuid.UUID(self.job_id),
            "machine_id": uuid.UUID(self.machine_id),
            "state": self.state,
            "result": self.result,
            "error": self.error,
            "duration_seconds": self.duration_seconds,
            "retire": self.retire,
            "take_next": self.take_next,
            "send_next": self.send_next,
            "tenant_id": self.tenant_id,
            "machine_type": self.machine_type,
            "notified_result_bytes": self.notified_result_bytes,
            "channel": self.channel,
            **self.owner.params(),
        }
