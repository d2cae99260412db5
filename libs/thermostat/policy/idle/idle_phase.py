"""The idle monitor's phase machine: Down → Booting → Ready, and when a phase asks for a stop (#2052).

Theory of operation. RUNNING is not usable: vLLM loads the model from the network volume for minutes
first, and a flat idle streak counted that load as idle (the first real wake, 2026-09-09, was usable for
8.7 of ~16 billed minutes). So the idle window starts at model-ready — the first tick on which vLLM answered
/metrics — and a separate boot budget stops a pod whose model never answers (#2041). One tick advances the
volume's aggregate PodSignal through this table:

    phase     signal                    → phase    idle_streak  booting_ticks  edge
    --------  ------------------------  ---------  -----------  -------------  --------------------------
    any       UNKNOWN                   same       kept         kept           — (a blip advances nothing)
    any       NOT_RUNNING               DOWN       0            0              WENT_DOWN (unless Down)
    DOWN      BOOTING / UNREACH_RUNNING BOOTING    0            1              BOOT_STARTED
    BOOTING   BOOTING / UNREACH_RUNNING BOOTING    0            +1             —
    READY     BOOTING                   BOOTING    0            1              BOOT_RESTARTED (#2101)
    DOWN      BUSY                      READY      0            0              BECAME_READY
    BOOTING   BUSY                      READY      0            0              BECAME_READY
    DOWN      IDLE                      READY      1            0              BECAME_READY
    BOOTING   IDLE                      READY      1            0              BECAME_READY
    READY     BUSY                      READY      0            0              —
    READY     IDLE / UNREACH_RUNNING    READY      +1           0              —

Why each row:
- Provisioning, Starting and Running-without-metrics share one boot budget, and its first tick counts;
  a positively observed new startup after Ready (#2101) starts a fresh budget instead of inheriting
  Ready, which would bill the new model load as idle.
- The ready tick counts as the first idle observation when it is Idle, so with the defaults a woken pod
  nobody talks to stops on the 15th consecutive idle scrape counting the ready scrape. A first scrape that
  carries a counter reads Busy (no baseline yet), so Booting → Ready normally enters with streak 0.
- UNREACHABLE_BUT_RUNNING while Ready is a vLLM that died after serving: billed, so it accrues (#1998).

Stops. StopIdle when Ready and the streak that just advanced reaches ceil(IDLE_MINUTES / CHECK_SECONDS);
StopBootGrace when Booting and the boot ticks that just advanced reach ceil(GRACE / CHECK_SECONDS), 0
disabling it. Only a tick that advanced the counter can fire it, so a Busy or Unknown tick never stops on
these grounds. A stop RunPod accepted is the Down edge (AfterStop); a refused stop resets only the counter
that fired and keeps the phase, so a full window elapses before the next attempt. The runtime cap is not a
phase rule — it runs on wall-clock time from the first up observation (see `runtime_cap`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import Enum, StrEnum

from thermostat.policy.idle.pod_signal import PodSignal


class Phase(StrEnum):
    """Phase is where the volume's pod is in its life as the monitor sees it."""

    DOWN = "DOWN"
    BOOTING = "BOOTING"
    READY = "READY"


class PhaseEdge(StrEnum):
    """PhaseEdge names the transition one tick made, if any."""

    NONE = "NONE"
    WENT_DOWN = "WENT_DOWN"
    BOOT_STARTED = "BOOT_STARTED"
    BOOT_RESTARTED = "BOOT_RESTARTED"
    BECAME_READY = "BECAME_READY"


class StopTrigger(StrEnum):
    """StopTrigger is why the monitor stops a pod; the values are the audit trail's trigger strings."""

    IDLE = "idle"
    BOOT_GRACE = "boot-grace"
    RUNTIME_CAP = "runtime-cap"
    BUDGET = "budget"  # metering says the pod's budget is exhausted (policy/idle/budget_stop.py)
    STALL = "stall"  # in flight, no work done for STALL_MINUTES (policy/idle/stall_guard.py)


@dataclass(frozen=True, slots=True, kw_only=True)
class PhaseCounters:
    """PhaseCounters are the phase and its two counters (RunPodIdleState in the pod-control seed)."""

    phase: Phase = Phase.DOWN
    idle_streak: int = 0
    booting_ticks: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class PhaseStep:
    """PhaseStep is one tick's advance: the new counters, the edge crossed, and which counter accrued."""

    counters: PhaseCounters
    edge: PhaseEdge
    idle_accrued: bool
    boot_accrued: bool


class _Count(Enum):
    KEEP = "kept"
    ZERO = "0"
    ONE = "1"
    ADD_ONE = "+1"

    def apply(self, value: int) -> int:
        return {_Count.KEEP: value, _Count.ZERO: 0, _Count.ONE: 1, _Count.ADD_ONE: value + 1}[self]

    @property
    def accrues(self) -> bool:
        return self in (_Count.ONE, _Count.ADD_ONE)


@dataclass(frozen=True, slots=True)
class _Rule:
    to: Phase | None  # None: stay
    idle_streak: _Count
    booting_ticks: _Count


_D, _B, _R = Phase.DOWN, Phase.BOOTING, Phase.READY
_S = PodSignal
_K, _0, _1, _INC = _Count.KEEP, _Count.ZERO, _Count.ONE, _Count.ADD_ONE

# The table of the module docstring, row for row.
_TABLE: dict[tuple[Phase, PodSignal], _Rule] = {
    (_D, _S.UNKNOWN): _Rule(None, _K, _K),
    (_B, _S.UNKNOWN): _Rule(None, _K, _K),
    (_R, _S.UNKNOWN): _Rule(None, _K, _K),
    (_D, _S.NOT_RUNNING): _Rule(_D, _0, _0),
    (_B, _S.NOT_RUNNING): _Rule(_D, _0, _0),
    (_R, _S.NOT_RUNNING): _Rule(_D, _0, _0),
    (_D, _S.BOOTING): _Rule(_B, _0, _1),
    (_D, _S.UNREACHABLE_BUT_RUNNING): _Rule(_B, _0, _1),
    (_B, _S.BOOTING): _Rule(_B, _0, _INC),
    (_B, _S.UNREACHABLE_BUT_RUNNING): _Rule(_B, _0, _INC),
    (_R, _S.BOOTING): _Rule(_B, _0, _1),
    (_D, _S.BUSY): _Rule(_R, _0, _0),
    (_B, _S.BUSY): _Rule(_R, _0, _0),
    (_D, _S.IDLE): _Rule(_R, _1, _0),
    (_B, _S.IDLE): _Rule(_R, _1, _0),
    (_R, _S.BUSY): _Rule(_R, _0, _0),
    (_R, _S.IDLE): _Rule(_R, _INC, _0),
    (_R, _S.UNREACHABLE_BUT_RUNNING): _Rule(_R, _INC, _0),
}


def advance_phase(counters: PhaseCounters, signal: PodSignal) -> PhaseStep:
    """Advance the phase machine by one tick's aggregate signal (see the module table)."""
    rule = _TABLE[(counters.phase, signal)]
    to = rule.to or counters.phase
    advanced = PhaseCounters(
        phase=to,
        idle_streak=rule.idle_streak.apply(counters.idle_streak),
        booting_ticks=rule.booting_ticks.apply(counters.booting_ticks),
    )
    return PhaseStep(
        counters=advanced,
        edge=_edge(counters.phase, to),
        idle_accrued=rule.idle_streak.accrues,
        boot_accrued=rule.booting_ticks.accrues,
    )


def phase_stop_due(step: PhaseStep, *, idle_threshold: int, boot_grace_threshold: int) -> StopTrigger | None:
    """StopIdle or StopBootGrace when the counter this tick advanced reached its threshold, else None."""
    counters = step.counters
    if counters.phase is Phase.READY and step.idle_accrued and counters.idle_streak >= idle_threshold:
        return StopTrigger.IDLE
    if (
        counters.phase is Phase.BOOTING
        and step.boot_accrued
        and boot_grace_threshold > 0
        and counters.booting_ticks >= boot_grace_threshold
    ):
        return StopTrigger.BOOT_GRACE
    return None


def after_accepted_stop() -> PhaseCounters:
    """A stop RunPod accepted is the Down edge: a re-wake inside the next tick starts a new boot."""
    return PhaseCounters()


def after_refused_stop(counters: PhaseCounters, trigger: StopTrigger) -> PhaseCounters:
    """A refused stop resets only the counter that fired and keeps the phase."""
    if trigger is StopTrigger.IDLE:
        return replace(counters, idle_streak=0)
    if trigger is StopTrigger.BOOT_GRACE:
        return replace(counters, booting_ticks=0)
    return counters


def _edge(before: Phase, after: Phase) -> PhaseEdge:
    if before is after:
        return PhaseEdge.NONE
    if after is Phase.DOWN:
        return PhaseEdge.WENT_DOWN
    if after is Phase.READY:
        return PhaseEdge.BECAME_READY
    return PhaseEdge.BOOT_RESTARTED if before is Phase.READY else PhaseEdge.BOOT_STARTED
