"""Whether the processes the monitor remembers are still the ones running: a stop and a wake between two ticks.

RunPod reuses a pod id across stop/start, and a stop (manual, or a wake's replacement) followed by a wake
can both land between two monitor ticks. The monitor then never observes the pod down: it still remembers
the old process's readiness and baseline and sits in Ready, while the controller cleared readySince on the
stop. Publishing only "the first time a pod answers" it would never send readiness again, and everything
waiting on readySince (GET, WatchPod, ensure_ready) waits out its deadline; the new model load would be
billed as idle. The controller's incarnation of each pod (the position of its newest accepted start,
create, stop or terminate) changes whenever that happens, so the monitor compares it before stepping:

    memory (before the tick)             this tick's observation          → what happens
    -----------------------------------  -------------------------------  ---------------------------------------
    taken under incarnation n            listed, incarnation n            kept
    taken under incarnation n            listed, incarnation unknown      kept (the controller could not say)
    taken without an incarnation         listed, any incarnation          kept (a state written before them)
    taken under incarnation n            listed, incarnation m ≠ n        ended: baseline and readiness dropped
    only an incarnation, the phase Down  listed, incarnation m ≠ n        kept (seen down: an ordinary wake)
    any                                  not listed                       not checked (the tick prunes it)

When a pod ended and no remembered pod that did not end still holds readiness, the phase it rested on is
stale: the volume takes the Down edge of a stop RunPod accepted (`after_stop`) — counters and boot start
cleared — but keeps the runtime cap armed: the monitor never saw the volume down, and a cap that an unseen
stop/wake could re-arm would be no backstop. The tick then steps from Down, so the restarted pod gets a
fresh boot budget, a new readySince published when it first answers, and an idle window counted from that
ready (the pod-control seed: idle starts at model-ready; a re-wake starts a new boot). A sibling that still
holds readiness keeps the phase: its process did not change. An Unreadable volume says nothing and is never
checked (the tick changes nothing on it).

A replacement pod (a new id: the stopped pod's start was refused and the wake created another, then
terminated the stale one) needs no incarnation: the pods Ready rested on are gone — no longer listed, or
observed ended — and none still holds readiness. When the tick's aggregate would carry Ready on (Busy, Idle
or UnreachableButRunning from the new pod) it is stale all the same: the volume steps from Down, so the new
pod's model load boots rather than accruing idle (`ready_pods_gone`). A Booting or NotRunning aggregate
already leaves Ready by the phase table, and an Unknown one advances nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from thermostat.policy.idle.idle_phase import Phase, after_accepted_stop
from thermostat.policy.idle.monitor_state import MonitorState, PodMemory
from thermostat.policy.idle.pod_signal import PodSignal, PodVerdict

# the aggregates on which the phase table would keep Ready going
_CARRIES_READY = frozenset({PodSignal.BUSY, PodSignal.IDLE, PodSignal.UNREACHABLE_BUT_RUNNING})


@dataclass(frozen=True, slots=True, kw_only=True)
class IncarnationCheck:
    """IncarnationCheck is the state to step this tick from, the pods whose process ended unseen (in
    remembered order) and whether the phase they held was reset (the Down edge)."""

    state: MonitorState
    ended: tuple[str, ...] = ()
    went_down: bool = False

    def cleared(self, before: MonitorState) -> tuple[str, ...]:
        """The ended pods whose published readiness must be cleared."""
        return tuple(pod_id for pod_id in self.ended if before.pods[pod_id].ready_since is not None)


def check_incarnations(
    state: MonitorState, listed: tuple[str, ...], incarnations: Mapping[str, int | None]
) -> IncarnationCheck:
    """Forget the pods whose process ended unseen; the Down edge when the phase rested on them (module table).

    `listed` is a readable volume list; `incarnations` the observed incarnation per listed pod (None or
    absent: unknown).
    """
    on_list = set(listed)
    ended = tuple(
        pod_id
        for pod_id, memory in state.pods.items()
        if pod_id in on_list and _changed(memory, incarnations.get(pod_id)) and _held(state, memory)
    )
    if not ended:
        return IncarnationCheck(state=state)
    survivors = {pod_id: memory for pod_id, memory in state.pods.items() if pod_id not in ended}
    if any(memory.ready_since is not None for memory in survivors.values()):
        return IncarnationCheck(state=replace(state, pods=survivors), ended=ended)
    # the phase, its counters and the boot start belonged to processes that are gone; the cap stays armed
    return IncarnationCheck(state=stepped_down(replace(state, pods=survivors)), ended=ended, went_down=True)


def ready_pods_gone(state: MonitorState, verdicts: Sequence[PodVerdict], signal: PodSignal) -> bool:
    """Ready rested on pods that are all gone (not listed, or observed ended) while the aggregate would carry
    it on: the tick must step from Down instead."""
    if state.phase is not Phase.READY or signal not in _CARRIES_READY:
        return False
    held = {pod_id for pod_id, memory in state.pods.items() if memory.ready_since is not None}
    return bool(held) and not any(v.pod_id in held and not v.process_ended for v in verdicts)


def stepped_down(state: MonitorState) -> MonitorState:
    """The Down edge of a process that ended unseen: counters and boot start cleared, cap and pods kept."""
    return MonitorState(
        counters=after_accepted_stop(),
        cap_started_at=state.cap_started_at,
        pods=state.pods,
        requests_seen=state.requests_seen,
    )


def _held(state: MonitorState, memory: PodMemory) -> bool:
    # a pod seen down remembers only its incarnation: its wake is the ordinary Down → Booting path, not news
    return state.phase is not Phase.DOWN or memory.baseline is not None or memory.ready_since is not None


def _changed(memory: PodMemory, observed: int | None) -> bool:
    return memory.incarnation is not None and observed is not None and observed != memory.incarnation
