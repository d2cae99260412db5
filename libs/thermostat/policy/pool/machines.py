"""A machine's state machine, and what the pool's decisions see of a machine: one frozen observation per row.

Theory of operation. A machine belongs to one tenant for its life and runs one machine type's image. It is
placed (`starting`), answers its boot health check (`warm`: idle and trusted with work, or straight to `busy`
with the job handed to it at placement), runs exactly one job at a time (`busy`), and is retired (`stopping`)
until its provider stop succeeds; then its row goes (`stopped`). The SQL in services/thermostat/pool_dispatcher/
makes every move, fenced by the owning process's instance id and lease term; this table is what those
statements may do, and tests/integration/pool_dispatcher/test_state_conformance.py runs every statement that
writes a machine on real Postgres and checks each change it makes against it.

    state     event            → state    statements (pool_dispatcher/repository/*.sql)
    --------  ---------------  ---------  ---------------------------------------------------------------
    (no row)  PLACE            starting   insert_machine (the first queued job in line may be handed to it)
    starting  BOOTED           warm       machine_ready, no job handed (or it was cancelled meanwhile)
    starting  BOOTED_WITH_JOB  busy       machine_ready, its dispatched job handed to it
    starting  RETIRE           stopping   retire (shutdown), reclaim, recover_own, release_own (a deploy)
    starting  BOOT_FAILED      stopped    boot_failed (its job waits in the queue again)
    warm      CLAIM            busy       submit, take_next
    warm      RETIRE           stopping   retire (cool-down, health, stale image), reclaim, yield_machine (fair
                                          share, or a stale image making room under the tenant cap), adopt_released
                                          (no answer to the adopter's probe)
    busy      FREE             warm       complete (nothing next, or not kept), mark_sent and requeue_unsent
                                          (nothing was sent), release_own (its job was never sent)
    busy      RETIRE           stopping   complete (the job's outcome retires it, or it yields its slot),
                                          abandon_running, retire, hand_back (shutdown), reclaim, recover_own,
                                          release_own (its job ran past the grace)
    stopping  STOPPED          stopped    forget_machine (the provider stop succeeded)

Why each row:
- A machine that dies mid-job is a busy one whose worker call broke: the job fails (REPORTED_FAILED in
  jobs.py) and the same statement retires the machine (busy RETIRE): one in an unknown state is not trusted
  with the next job (job_outcome.py). A busy machine whose job completes takes the next queued job of its
  tenant and type in that statement, staying busy.
- `stopping` still exists at the provider, so it counts against the fleet cap until its stop succeeds; a
  stop that fails stays `stopping` and is retried. reclaim takes a lapsed process's machines in any state to
  stop them (a stopping one stays stopping, now this process's to finish).
- Fair share (fair_share.py) retires a machine after its current job: `yield_machine`, run by whichever process
  plans it under placement's lock, retires a warm machine at once (taking it over, as reclaim does: that process
  stops it) and only marks a busy one (`yield_to`, no state change; `unyield` clears a mark no longer needed).
  The marked machine's own completion then retires it instead of handing it the next job (busy RETIRE), and no
  claim takes a marked machine. The mark is read from the completion's snapshot, so a mark landing during it
  retires the machine after the next job instead: never mid-job, never with a job handed to a stopping machine.
- recover_own, on start under an id that owned rows, keeps warm machines (the caller probes them) and
  retires the rest: their jobs were lost with the old process.
- release_own (a deploy's SIGTERM, issue 23) keeps warm machines warm and marks them released (released_at): no
  state change, so no row; any process adopts one (adopt_released) after a probe, warm as it was, or retires it.
  The row's `idle_since` (kept by a trigger on every move into and out of warm) is its idle clock across them.

`idle_since` and the `now` the policies take are readings of one monotonic clock, never wall time, so a
clock step cannot reap a machine early or keep one forever (the service supplies both).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from thermostat.policy.pool.machine_type import Catalogue


class MachineState(StrEnum):
    STARTING = "starting"
    WARM = "warm"
    BUSY = "busy"
    STOPPING = "stopping"
    STOPPED = "stopped"  # the row is gone: the store has no such state


class MachineEvent(StrEnum):
    """MachineEvent is what happens to a machine; the table says from which state it may happen and where it leads."""

    PLACE = "place"
    BOOTED = "booted"
    BOOTED_WITH_JOB = "booted_with_job"
    BOOT_FAILED = "boot_failed"
    CLAIM = "claim"
    FREE = "free"
    RETIRE = "retire"
    STOPPED = "stopped"


_S, _W, _B, _X = MachineState.STARTING, MachineState.WARM, MachineState.BUSY, MachineState.STOPPING
_M = MachineEvent

# The table of the module docstring, row for row. None is "no row yet".
MACHINE_TRANSITIONS: Final[Mapping[tuple[MachineState | None, MachineEvent], MachineState]] = {
    (None, _M.PLACE): _S,
    (_S, _M.BOOTED): _W,
    (_S, _M.BOOTED_WITH_JOB): _B,
    (_S, _M.RETIRE): _X,
    (_S, _M.BOOT_FAILED): MachineState.STOPPED,
    (_W, _M.CLAIM): _B,
    (_W, _M.RETIRE): _X,
    (_B, _M.FREE): _W,
    (_B, _M.RETIRE): _X,
    (_X, _M.STOPPED): MachineState.STOPPED,
}


class RefusedMachineTransition(ValueError):
    """The event may not happen to a machine in that state (the table has no row for the pair)."""


def machine_after(state: MachineState | None, event: MachineEvent) -> MachineState:
    """The state `event` moves a machine in `state` (None: no row yet) to; RefusedMachineTransition when it may
    not."""
    try:
        return MACHINE_TRANSITIONS[(state, event)]
    except KeyError:
        raise RefusedMachineTransition(f"a machine {state or '(no row)'} cannot {event}") from None


LIVE_STATES = frozenset({MachineState.STARTING, MachineState.WARM, MachineState.BUSY})
"""A tenant's machines for its `max_workers` cap: a stopping machine no longer serves the tenant."""

FLEET_STATES = LIVE_STATES | {MachineState.STOPPING}
"""The fleet cap counts what exists at a provider, stopping machines included (a failed stop still bills)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Machine:
    """Machine is one machine as the decisions see it (no endpoint, no token)."""

    id: str
    tenant_id: str
    machine_type: str
    image: str
    state: MachineState
    idle_since: float = 0.0  # monotonic seconds: when it last became warm
    last_session_id: str | None = None  # the session of the last job it ran, for affinity
    health_misses: int = 0  # consecutive failed probes
    cool_down_seconds: float = 0.0  # its type's cool-down when it started, for a type since removed
    yield_to: str | None = None  # the tenant waiting at the fleet cap it gives its slot to after its job (fair_share)
    # since its boot ended, by the row's clock at the fleet read (None: still booting); rotation's tenure (rotation.py)
    held_seconds: float | None = None
    boot_seconds: float | None = None  # placement to health answer (None: still booting), the type's measured boot


def is_stale(machine: Machine, catalogue: Catalogue) -> bool:
    """A machine whose type was removed or whose type's image changed takes no new work."""
    current = catalogue.get(machine.machine_type)
    return current is None or current.image != machine.image


def of_tenant(machines: Iterable[Machine], tenant_id: str, machine_type: str) -> list[Machine]:
    return [m for m in machines if m.tenant_id == tenant_id and m.machine_type == machine_type]
