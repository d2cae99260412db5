"""How a pool dispatcher process leaves (issue 23 item 1: a deploy keeps the fleet), and what the next one keeps.

Theory of operation. A rolling deploy sends SIGTERM to one replica at a time; before this rule the process's
close stopped every machine it owned and failed its in-flight jobs, so every deploy was a cold start for every warm
machine and a failed cell for every running job. Now the signal says which departure it is:

    signal            departure    machines                                    in-flight jobs
    SIGTERM           RELEASE      warm ones released (running, idle clock     drained within the grace; then
                                   kept in the row) for any process to adopt   unsent → queued, running → failed
    SIGINT            STOP_FLEET   every one stopped (Ctrl-C: the stack, or    drained within the grace; then
                                   an operator, takes the pool away)           failed (the machines stop)
    none (a close()   STOP_FLEET   every one stopped (an embedding caller or   as SIGINT
    called directly)               a test closing a dispatcher it started)

The dev stack (`make run`) stops a pool dispatcher with SIGINT when the whole stack goes away and restarts one
that exited (a SIGTERM to it alone keeps the fleet); Kubernetes sends SIGTERM.

What a job still in flight when the grace runs out becomes (`fate_at_grace`): never sent (dispatched) goes back
to the queue in its place, since nothing ran and another process runs it once; running fails with a clear error,
because the worker's answer would reach no one and running it again could run it twice.

What a process keeps of a released or its own machine (`adopt`): warm and answering its health probe: kept, with
the cool-down left on its row's idle clock; anything else (no answer, not warm) is stopped, never reused (the
seed's recover(): keep warm + healthy, re-stop what is unhealthy or stopping).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from thermostat.policy.pool.jobs import JobState
from thermostat.policy.pool.machines import MachineState


class Departure(StrEnum):
    RELEASE = "release"  # a deploy: the machines stay for the next process
    STOP_FLEET = "stop_fleet"  # the pool goes away: its machines stop


DEPARTURE_BY_SIGNAL: dict[str | None, Departure] = {
    "SIGTERM": Departure.RELEASE,
    "SIGINT": Departure.STOP_FLEET,
    None: Departure.STOP_FLEET,
}


def departure_for(signal_name: str | None) -> Departure:
    """The departure a stop by `signal_name` (its `signal.Signals` name; None: no signal) makes."""
    return DEPARTURE_BY_SIGNAL.get(signal_name, Departure.STOP_FLEET)


class AtGrace(StrEnum):
    REQUEUE = "requeue"
    FAIL = "fail"


def fate_at_grace(state: JobState) -> AtGrace | None:
    """What a job of the departing process becomes when its grace ran out (None: not in flight, untouched)."""
    if state is JobState.DISPATCHED:
        return AtGrace.REQUEUE
    if state is JobState.RUNNING:
        return AtGrace.FAIL
    return None


def grace_error(instance_id: str, grace_seconds: float) -> str:
    """The error a job still running when its process's shutdown grace ran out fails with."""
    return (
        f"dispatcher instance {instance_id} shut down (a deploy) and its {grace_seconds:g} s grace ran out while the "
        "job ran; not retried (it may have run): submit it again"
    )


class Adoption(StrEnum):
    KEEP = "keep"
    STOP = "stop"


@dataclass(frozen=True, slots=True, kw_only=True)
class Adopted:
    """A machine taken over (released by a deploy, or this id's own after a restart): kept or stopped, and the
    idle seconds its cool-down counts from (its row's clock), so it keeps what is left rather than a fresh one."""

    verdict: Adoption
    idle_seconds: float


def adopt(*, state: MachineState, healthy: bool, idle_seconds: float | None) -> Adopted:
    """Keep a warm machine that answered its probe, with its row's idle time; stop anything else."""
    idle = max(0.0, idle_seconds or 0.0)
    if state is MachineState.WARM and healthy:
        return Adopted(verdict=Adoption.KEEP, idle_seconds=idle)
    return Adopted(verdict=Adoption.STOP, idle_seconds=idle)
