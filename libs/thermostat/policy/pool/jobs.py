"""A job's states (worker-pool seed: types.py `Job`).

    queued ──claimed by a machine──▶ dispatched ──payload sent──▶ running ──▶ completed | failed | timed_out
     │ │                                 │                         ▲  │
     │ └──────── claimed and sent in one statement ────────────────┘  │
     │                                   │                            │
     └──────────── cancel ───────────────┴──────── cancel ────────────┴──▶ cancelled

`dispatched` is handed to a machine but not yet sent: a cancel there means the job never reaches the
machine and is not metered. Two claims skip it and make a job `running` at once, the claim being the job's
conditional send (it goes out right after the statement's answer), both only while the instance lease is
trusted for the call: a completion handing its machine the next queued job, and a submit that a warm
machine takes. Placement's claims (a booted machine's first job, an idle machine's next) are `dispatched`,
and `mark_sent` makes them `running` right before the send.

Back to `queued` in its old place: a `dispatched` job whose send the lease no longer trusts, whose machine
failed to boot, or whose claim no task sends (a lost answer); a `running` one only when the process's own
claim or mark made it so and nothing was sent. A `dispatched` or `running` job of a process that stopped or
lost its lease fails. Terminal states never change again.
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
