"""A job's states (worker-pool seed: types.py `Job`).

    queued ──claimed by a machine──▶ dispatched ──payload sent──▶ running ──▶ completed | failed | timed_out
       │                                 │                          │
       └──────────── cancel ─────────────┴──────── cancel ──────────┴──▶ cancelled

`dispatched` is handed to a machine but not yet sent: a cancel there means the job never reaches the
machine and is not metered. Terminal states never change again.
"""

from __future__ import annotations

from enum import StrEnum


class JobState(StrEnum):
    QUEUED = "queued"
    DISPATCHED = "dispatched"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    CANCELLED = "cancelled"


TERMINAL_STATES = frozenset({JobState.COMPLETED, JobState.FAILED, JobState.TIMED_OUT, JobState.CANCELLED})
