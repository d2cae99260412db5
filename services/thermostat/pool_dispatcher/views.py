"""The worker-pool seed's JSON and the pool's gRPC messages, built from the store's views.

What a caller reads of a job, a machine or a usage event is written here once: times as epoch seconds, unset
values null (JSON) or absent (gRPC's optional fields). A machine is never shown with its token (its endpoint and
provider id are shown, as the original strata-pool package shows them: neither reaches a worker's /execute without
the token), a job never with its payload, result, owner or credential (the views do not hold them). Where the
original package's names differ from today's, both are printed (`current_job_id` beside `job_id`, `completed_at`
beside `ended_at`, `duration_ms` beside `duration_seconds`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta

from google.api import httpbody_pb2

from thermostat.policy.pool.machines import MachineState
from thermostat.pool.v1 import pool_pb2

from .orphan_sweep import OrphanSweeper
from .repository import JobView, UsageView, WorkerView

JSON = "application/json"
JsonObject = dict[str, object]
HEALTH_STATES = (MachineState.STARTING, MachineState.WARM, MachineState.BUSY, MachineState.STOPPING)
"""/health prints these states even at zero, so a reader need not know them."""


def _epoch(value: datetime | None) -> float | None:
    return None if value is None else value.timestamp()


def job_json(job: JobView) -> JsonObject:
    """The seed's job JSON: times as epoch seconds, unset values null."""
    return {
        "id": job.id,
        "tenant_id": job.tenant_id,
        "machine_type": job.machine_type,
        "state": job.state,
        "submitted_at": _epoch(job.submitted_at),
        "priority": job.priority,
        "session_id": job.session_id,
        "worker_id": job.worker_id,
        "timeout_seconds": job.timeout_seconds,
        "error": job.error,
        "started_at": _epoch(job.started_at),
        "completed_at": _epoch(job.completed_at),
        "has_result": job.has_result,
        "handed_to_machines": job.handed_to_machines,
    }


def worker_json(w: WorkerView) -> JsonObject:
    """A machine as the REST listing prints it: never its token."""
    return {
        "id": w.id,
        "tenant_id": w.tenant_id,
        "machine_type": w.machine_type,
        "image": w.image,
        "backend": w.backend,
        "state": w.state,
        "region": w.region,
        "session_id": w.session_id,
        "job_id": w.job_id,
        "created_at": _epoch(w.created_at),
        "warm_at": _epoch(w.warm_at),
        "last_active_at": _epoch(w.last_active_at),
        "health_misses": w.health_misses,
        "current_job_id": w.job_id,
        "backend_id": w.provider_id,
        "endpoint": w.endpoint,
    }


def usage_json(e: UsageView) -> JsonObject:
    return {
        "position": e.position,
        "job_id": e.job_id,
        "tenant_id": e.tenant_id,
        "machine_type": e.machine_type,
        "worker_id": e.worker_id,
        "terminal_state": e.terminal_state,
        "duration_seconds": e.duration_seconds,
        "started_at": _epoch(e.started_at),
        "ended_at": _epoch(e.ended_at),
        "id": e.event_id,
        "duration_ms": e.duration_seconds * 1000.0,
        "completed_at": _epoch(e.ended_at),
    }


def orphans_json(sweeper: OrphanSweeper | None) -> JsonObject:
    """The last orphan sweep's findings (GET /v1/orphans); no sweeper: none, mode null."""
    if sweeper is None:
        return {"mode": None, "found_total": 0, "orphans": []}
    return {
        "mode": str(sweeper.mode),
        "found_total": sweeper.found_total,
        "orphans": [
            {
                "backend": found.backend,
                "provider_id": found.orphan.provider_id,
                "name": found.orphan.name,
                "machine_id": found.orphan.machine_id,
                "terminated": found.terminated,
            }
            for found in sweeper.last
        ],
    }


def health_json(machine_types: Iterable[str], counts: Mapping[str, int]) -> JsonObject:
    """GET /health's pool entry: the catalogue's type names and the machines by state, the usual ones at zero
    (`machines`), and the original strata-pool package's `workers`, only the states present. The edge prints its
    members at the top of /health too (the registry's health_top_fallback)."""
    machines = {**{str(state): 0 for state in HEALTH_STATES}, **counts}
    workers = {state: count for state, count in counts.items() if count > 0}
    return {"machine_types": list(machine_types), "machines": machines, "workers": workers}


def job_message(job: JobView) -> pool_pb2.Job:
    message = pool_pb2.Job(
        id=job.id,
        tenant_id=job.tenant_id,
        machine_type=job.machine_type,
        state=job.state,
        submitted_at=job.submitted_at.timestamp(),
        priority=job.priority,
        timeout_seconds=job.timeout_seconds,
        has_result=job.has_result,
        handed_to_machines=job.handed_to_machines,
    )
    for name in ("session_id", "worker_id", "error"):
        if getattr(job, name) is not None:
            setattr(message, name, getattr(job, name))
    for name in ("started_at", "completed_at"):
        value = getattr(job, name)
        if value is not None:
            setattr(message, name, value.timestamp())
    # the typed fields beside the deprecated ones (issue 38): the enum, Timestamps and a Duration
    message.job_state = JOB_STATES[job.state]
    message.submit_time.FromDatetime(job.submitted_at)
    if job.started_at is not None:
        message.start_time.FromDatetime(job.started_at)
    if job.completed_at is not None:
        message.complete_time.FromDatetime(job.completed_at)
    message.timeout.FromTimedelta(timedelta(seconds=job.timeout_seconds))
    return message


JOB_STATES = {
    "queued": pool_pb2.JOB_STATE_QUEUED,
    "dispatched": pool_pb2.JOB_STATE_DISPATCHED,
    "running": pool_pb2.JOB_STATE_RUNNING,
    "completed": pool_pb2.JOB_STATE_COMPLETED,
    "failed": pool_pb2.JOB_STATE_FAILED,
    "timed_out": pool_pb2.JOB_STATE_TIMED_OUT,
    "cancelled": pool_pb2.JOB_STATE_CANCELLED,
}
"""The job states (policy/pool/jobs.py's JobState values) as the contract's enum."""


def workers_message(workers: Iterable[WorkerView]) -> pool_pb2.ListWorkersResponse:
    response = pool_pb2.ListWorkersResponse()
    for w in workers:
        item = response.workers.add(
            id=w.id,
            tenant_id=w.tenant_id,
            machine_type=w.machine_type,
            image=w.image,
            backend=w.backend,
            state=w.state,
            created_at=w.created_at.timestamp(),
            health_misses=w.health_misses,
        )
        for name in ("region", "session_id", "job_id", "endpoint"):
            if getattr(w, name) is not None:
                setattr(item, name, getattr(w, name))
        if w.job_id is not None:
            item.current_job_id = w.job_id
        if w.provider_id is not None:
            item.backend_id = w.provider_id
        for name in ("warm_at", "last_active_at"):
            if getattr(w, name) is not None:
                setattr(item, name, getattr(w, name).timestamp())
    return response


def usage_message(events: list[UsageView], after_position: int) -> pool_pb2.ListUsageResponse:
    """A page of the usage feed; with no event, `next_position` stays where the caller read from."""
    response = pool_pb2.ListUsageResponse(next_position=events[-1].position if events else after_position)
    for e in events:
        response.events.add(
            position=e.position,
            job_id=e.job_id,
            tenant_id=e.tenant_id,
            machine_type=e.machine_type,
            worker_id=e.worker_id,
            terminal_state=e.terminal_state,
            duration_seconds=e.duration_seconds,
            started_at=e.started_at.timestamp(),
            ended_at=e.ended_at.timestamp(),
            id=e.event_id,
            duration_ms=e.duration_seconds * 1000.0,
            completed_at=e.ended_at.timestamp(),
        )
    return response


def body(data: bytes, content_type: str = "application/octet-stream") -> httpbody_pb2.HttpBody:
    return httpbody_pb2.HttpBody(content_type=content_type, data=data)


def json_body(value: object) -> httpbody_pb2.HttpBody:
    return body(json.dumps(value).encode(), JSON)
