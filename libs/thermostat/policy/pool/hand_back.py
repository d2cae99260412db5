"""Hand-back: a job whose machine could not be reached before any byte was sent goes to another machine.

Issue 29: a warm machine killed behind the pool's back (a container OOM-killed, a host rebooted) stays warm until
its probes miss `health_check_failures` times, one scaler pass apart; inside that window every job sent to it
failed with "worker unreachable: Connection refused", the failure the worker-pool seed says probing exists to
prevent ("a dead warm machine is discovered by the next job being sent to it, and that job fails for reasons that
have nothing to do with the code in the cell"). A refused connection means the payload never reached a worker, so
the job cannot have run: handing it to another machine cannot run it twice.

Theory of operation. The worker client reports how the call ended (thermostat.policy.pool.job_outcome.ReplyKind);
only UNREACHABLE says no byte of the request went out (refused, no route, unknown name, connect timeout, TLS
refused: thermostat.providers.pool.http1's `Unreachable`). Everything else may have run the job:

    reply                               refused before   decision
    UNREACHABLE (no byte sent)          fewer than 1     HAND_BACK: the machine is retired at once (as a failed
                                                         probe streak would retire it) and the job goes back to
                                                         the queue keeping its priority and its place in its
                                                         tenant's queue; a warm machine of the tenant takes it or
                                                         placement boots one, and its caller's wait goes on
    UNREACHABLE (no byte sent)          1 or more        GIVE_UP: the job fails, its error naming each attempt
                                                         (machine and reason), and the machine is retired: a
                                                         broken image or network does not loop
    BROKEN (sent; lost mid-call)        any              NOT_REFUSED: a failure, as job_outcome says (the job may
    DEADLINE (its timeout)              any              have run); the machine is retired there
    ANSWERED (any status, a gateway's)  any              NOT_REFUSED: the worker (or its provider's proxy, which
    TOO_LARGE                           any              the payload reached) answered: job_outcome decides

The bound is MAX_REFUSALS machines: after that many refused the job, it fails. A hand-back writes no usage event
(the attempt ran for no time on a machine that was not there); the job's final outcome writes its one event, as
any job's does. The job's JSON says how many machines it was handed to (`handed_to_machines`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from thermostat.policy.pool.job_outcome import MAX_ERROR_CHARS, JobOutcome, ReplyKind, WorkerReply
from thermostat.policy.pool.jobs import JobState

MAX_REFUSALS = 2
"""Machines that may refuse one job before it fails: one dead warm machine is absorbed, a second in a row is more
likely the image or the network than bad luck, and the caller hears it instead of waiting on a loop."""


class HandBackAction(StrEnum):
    """HandBackAction is what a worker reply means for sending the job elsewhere."""

    NOT_REFUSED = "not_refused"  # the request may have reached a worker: job_outcome decides, as always
    HAND_BACK = "hand_back"  # retire the machine, queue the job again in its place
    GIVE_UP = "give_up"  # retire the machine, fail the job naming each attempt


@dataclass(frozen=True, slots=True, kw_only=True)
class Refusal:
    """Refusal is one machine that could not be reached with the job, and the worker client's words for why."""

    machine_id: str
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class HandBackDecision:
    """HandBackDecision: the action, this attempt's refusal (None when not refused), and for GIVE_UP the job's end."""

    action: HandBackAction
    refusal: Refusal | None = None
    outcome: JobOutcome | None = None


def decide_hand_back(
    reply: WorkerReply, *, machine_id: str, refused_before: Sequence[Refusal], max_refusals: int = MAX_REFUSALS
) -> HandBackDecision:
    """Map one worker reply for the job sent to `machine_id`; `refused_before`: the machines that refused it so far."""
    if reply.kind is not ReplyKind.UNREACHABLE:
        return HandBackDecision(action=HandBackAction.NOT_REFUSED)
    refusal = Refusal(machine_id=machine_id, reason=reply.error or "no connection")
    attempts = (*refused_before, refusal)
    if len(attempts) < max_refusals:
        return HandBackDecision(action=HandBackAction.HAND_BACK, refusal=refusal)
    return HandBackDecision(
        action=HandBackAction.GIVE_UP,
        refusal=refusal,
        outcome=JobOutcome(state=JobState.FAILED, result=None, error=refusals_error(attempts), retire_machine=True),
    )


def refusals_error(attempts: Sequence[Refusal]) -> str:
    """The error of a job no machine could be reached with: each attempt, machine and reason, in order."""
    each = "; ".join(f"machine {a.machine_id}: {a.reason}" for a in attempts)
    return f"worker unreachable on {len(attempts)} machines, none was sent the job: {each}"[:MAX_ERROR_CHARS]


def handed_to_machines(*, refused: int, on_machine: bool) -> int:
    """How many machines a job was handed to: those that refused it and handed it back, and the one it is on (or
    ended on) if any. A job that failed at the bound is on its last refusing machine, which was not handed back."""
    return refused + (1 if on_machine else 0)
