"""A job's state machine (worker-pool seed: types.py `Job`): which event moves a job from which state to which.

Theory of operation. A job is queued, handed to one machine (`dispatched`), sent to it (`running`), and ends
in one of four terminal states that never change again. The SQL in services/thermostat/pool_dispatcher/ makes
every move, each in one statement fenced by the owning process's instance id and lease term; this table is
what those statements may do, and tests/integration/pool_dispatcher/test_state_conformance.py runs every
statement that writes a job on real Postgres and checks each change it makes against it.

    state       event               → state      statements (pool_dispatcher/repository/*.sql)
    ----------  ------------------  -----------  ------------------------------------------------------------
    (no row)    SUBMIT              queued       submit (no warm machine, or a queued job ahead), submit_queued
    (no row)    SUBMIT_TO_WARM      dispatched   submit, claimed by a warm machine; mark_sent sends it
    (no row)    SUBMIT_AND_SEND     running      submit, claimed and sent in one statement (lease trusted)
    (no row)    REFUSE              failed       record_refusal (over the tenant's budget: never queued)
    queued      CLAIM               dispatched   take_next, insert_machine, complete's hand-off (lease untrusted)
    queued      CLAIM_AND_SEND      running      complete's hand-off to its machine (lease trusted)
    queued      CANCEL              cancelled    cancel
    queued      TYPE_REMOVED        failed       replace_catalogue
    dispatched  MARK_SENT           running      mark_sent
    dispatched  REQUEUE             queued       requeue_unsent, boot_failed, release_own
    dispatched  CANCEL              cancelled    cancel
    dispatched  TYPE_REMOVED        failed       boot_failed (its type left the catalogue while it booted)
    dispatched  OWNER_LOST          failed       reclaim, recover_own
    running     REPORTED_COMPLETED  completed    complete
    running     REPORTED_FAILED     failed       complete
    running     REPORTED_TIMED_OUT  timed_out    complete
    running     REQUEUE             queued       requeue_unsent (the caller's own mark landed, nothing was sent)
    running     HAND_BACK           queued       hand_back (its machine refused the connection: nothing was sent)
    running     CANCEL              cancelled    cancel
    running     ABANDON             failed       abandon_running (no task drives it)
    running     OWNER_LOST          failed       reclaim, recover_own, release_own (past the grace)

Why each row:
- `dispatched` is handed to a machine but not yet sent: a cancel there means the job never reaches the
  machine and is not metered. The two claims that skip it (SUBMIT_AND_SEND, CLAIM_AND_SEND) are the job's
  conditional send, made only while the instance lease is trusted for the call; the payload goes out right
  after the statement's answer.
- REQUEUE puts a job back in its old place (its queue sequence is kept): a `dispatched` job whose send the
  lease no longer trusts, whose machine failed to boot, or whose claim no task sends; a `running` one only
  when this process's own claim or mark made it so and nothing was sent.
- HAND_BACK (policy/pool/hand_back.py) is REQUEUE for a job whose machine could not be reached before any byte
  of the request went out: the job cannot have run, so it goes back in its place and its machine is retired.
- OWNER_LOST: a `dispatched` or `running` job of a process that stopped or lost its lease fails; nobody
  would report it.
- A `running` job that is cancelled keeps its owner, so the process running it still records its usage when
  the machine answers; that answer (complete) leaves it `cancelled` and drops the result.

Terminal states have no row: nothing moves a finished job. Retention ends its row once it has been kept
POOL_JOB_RETENTION_HOURS (prune_jobs, thermostat.policy.pool.retention): a delete, not a transition, and only of a
finished job no process owns (a job cancelled while running stays until its machine answers).
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Final


class JobState(StrEnum):
    QUEUED = "queued"
    DISPATCHED = "dispatched"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    CANCELLED = "cancelled"


class JobEvent(StrEnum):
    """JobEvent is what happens to a job; the table says from which state it may happen and where it leads."""

    SUBMIT = "submit"
    SUBMIT_TO_WARM = "submit_to_warm"
    SUBMIT_AND_SEND = "submit_and_send"
    REFUSE = "refuse"
    CLAIM = "claim"
    CLAIM_AND_SEND = "claim_and_send"
    MARK_SENT = "mark_sent"
    REQUEUE = "requeue"
    REPORTED_COMPLETED = "reported_completed"
    REPORTED_FAILED = "reported_failed"
    REPORTED_TIMED_OUT = "reported_timed_out"
    CANCEL = "cancel"
    ABANDON = "abandon"
    HAND_BACK = "hand_back"
    OWNER_LOST = "owner_lost"
    TYPE_REMOVED = "type_removed"


_Q, _D, _R = JobState.QUEUED, JobState.DISPATCHED, JobState.RUNNING
_E = JobEvent

# The table of the module docstring, row for row. None is "no row yet".
JOB_TRANSITIONS: Final[Mapping[tuple[JobState | None, JobEvent], JobState]] = {
    (None, _E.SUBMIT): _Q,
    (None, _E.SUBMIT_TO_WARM): _D,
    (None, _E.SUBMIT_AND_SEND): _R,
    (None, _E.REFUSE): JobState.FAILED,
    (_Q, _E.CLAIM): _D,
    (_Q, _E.CLAIM_AND_SEND): _R,
    (_Q, _E.CANCEL): JobState.CANCELLED,
    (_Q, _E.TYPE_REMOVED): JobState.FAILED,
    (_D, _E.MARK_SENT): _R,
    (_D, _E.REQUEUE): _Q,
    (_D, _E.CANCEL): JobState.CANCELLED,
    (_D, _E.TYPE_REMOVED): JobState.FAILED,
    (_D, _E.OWNER_LOST): JobState.FAILED,
    (_R, _E.REPORTED_COMPLETED): JobState.COMPLETED,
    (_R, _E.REPORTED_FAILED): JobState.FAILED,
    (_R, _E.REPORTED_TIMED_OUT): JobState.TIMED_OUT,
    (_R, _E.REQUEUE): _Q,
    (_R, _E.HAND_BACK): _Q,
    (_R, _E.CANCEL): JobState.CANCELLED,
    (_R, _E.ABANDON): JobState.FAILED,
    (_R, _E.OWNER_LOST): JobState.FAILED,
}

TERMINAL_STATES: Final = frozenset(s for s in JobState if not any(state is s for state, _ in JOB_TRANSITIONS))
"""completed, failed, timed_out and cancelled: the states no event leaves."""


class RefusedJobTransition(ValueError):
    """The event may not happen to a job in that state (the table has no row for the pair)."""


def job_after(state: JobState | None, event: JobEvent) -> JobState:
    """The state `event` moves a job in `state` (None: no row yet) to; RefusedJobTransition when it may not."""
    try:
        return JOB_TRANSITIONS[(state, event)]
    except KeyError:
        raise RefusedJobTransition(f"a job {state or '(no row)'} cannot {event}") from None
