"""One idle-monitor tick for one volume, and what an issued stop does to the monitor's memory.

The service gathers, per tick: the volume lookup, each listed pod's /metrics scrape (parsed, or None when
unreachable) and, where the scrape failed, its control-plane observation. `tick` turns that into a
TickDecision — the new state to persist, the aggregate signal and the pod that produced it, at most one
stop order, readiness to publish or clear, and log events — and the service carries it out. After issuing
a stop it calls `after_stop` with what RunPod answered and persists the result.

Order of one tick:
1. Volume lookup Unreadable → Unknown: nothing at all changes (not even pruning — an unreadable list says
   nothing about which pods left), and no stop can be named.
2. Pods whose process ended unseen since the last tick (the controller's incarnation changed) are forgotten,
   and when the phase rested on them the volume takes the Down edge first (`incarnation`): a stop and a wake
   between two ticks start a new boot and a new readySince. So does a Ready whose ready pods all left while
   a replacement carries the aggregate.
3. Each listed pod is classified (`pod_signal`); the aggregate decides the phase step (`idle_phase`) and the
   runtime cap (`runtime_cap`).
4. Per-pod memory: a pod vLLM answered for keeps the scrape's counter as its baseline and publishes
   readiness the first time; a pod confirmed down or starting loses baseline and readiness, even when a
   busy sibling wins the aggregate (the process behind the id ended; RunPod reuses ids); an unreachable or
   unknown pod keeps both. Pods that left a readable volume list are pruned and their readiness cleared.
   Each answered pod's stall count moves by `stall_guard` (kept while it does not answer, dropped with the
   rest of its memory when its process ended).
5. Stops, widest first: the runtime cap (every pod on the volume not confirmed down — including a busy
   one, which is the phantom-busy backstop, and Unknown ones, since a run of Unknown ticks is the other
   thing it backs up); then the stall guard (every pod observed up, when the aggregate is Busy and every
   Busy pod is Stalled: a pod that really works wins); then StopIdle (every pod observed up; the aggregate
   being Idle means none is busy) — except inside the pod's warm hours, or the idle window before they open
   (`warm_hours`); then StopBootGrace (the booting and running-without-metrics pods, retained as stop
   targets).

`after_stop`: every targeted stop accepted is the Down edge — counters cleared, cap disarmed, readiness
cleared, baselines of the stopped pods dropped — so a re-wake inside the next tick starts a new boot and a
new readySince (#2052). Otherwise the stop was refused: the counter that fired resets (the cap keeps its
start, a refused stall stop zeroes every pod's stall count) and the phase is kept, so a full window elapses
before the next attempt; pods whose stop was accepted still lose their baseline and readiness.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from enum import StrEnum

from thermostat.policy.common.pod_model import Lookup, VolumeLookup
from thermostat.policy.common.warm_hours import WarmHours, inside_warm_hours
from thermostat.policy.idle.idle_phase import (
    Phase,
    PhaseEdge,
    PhaseStep,
    StopTrigger,
    advance_phase,
    after_accepted_stop,
    after_refused_stop,
    phase_stop_due,
)
from thermostat.policy.idle.incarnation import IncarnationCheck, check_incarnations, ready_pods_gone, stepped_down
from thermostat.policy.idle.monitor_options import MonitorOptions
from thermostat.policy.idle.monitor_state import MonitorState, PodMemory
from thermostat.policy.idle.pod_signal import (
    AggregateSignal,
    PodReading,
    PodSignal,
    PodVerdict,
    aggregate_signal,
    classify_pod,
)
from thermostat.policy.idle.request_activity import RequestCounts, classify_requests, with_requests
from thermostat.policy.idle.runtime_cap import advance_cap, cap_reached
from thermostat.policy.idle.stall_guard import StalledPod, advance_stall, stalled_pods
from thermostat.policy.idle.vllm_metrics import PodActivity


@dataclass(frozen=True, slots=True, kw_only=True)
class TickObservation:
    """TickObservation is everything one tick gathered: the volume lookup and a reading per listed pod.

    A listed pod without a reading counts as neither scraped nor observed (Unknown).
    """

    volume: VolumeLookup
    pods: tuple[PodReading, ...] = ()
    # the inference gateway's counts for the pod (None: unread, or no gateway): policy/idle/request_activity
    requests: RequestCounts | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class StopEvidence:
    """StopEvidence is why a stop fired: the counters and limits as they stood on the deciding tick."""

    idle_streak: int
    idle_threshold: int
    booting_ticks: int
    boot_grace_threshold: int
    up_since: datetime | None
    max_runtime: timedelta | None
    stall_threshold: int = 0
    stalled: tuple[StalledPod, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class StopOrder:
    """StopOrder asks the pod controller to stop these pods, giving the trigger for the audit trail."""

    trigger: StopTrigger
    pod_ids: tuple[str, ...]
    evidence: StopEvidence

    @property
    def message(self) -> str:
        e = self.evidence
        why = {
            StopTrigger.IDLE: f"idle streak {e.idle_streak}/{e.idle_threshold}",
            StopTrigger.BOOT_GRACE: f"not ready after {e.booting_ticks}/{e.boot_grace_threshold} booting ticks",
            StopTrigger.RUNTIME_CAP: f"up since {_iso(e.up_since)}, cap {e.max_runtime}",
            StopTrigger.BUDGET: "the pod's budget is exhausted (metering)",
            StopTrigger.STALL: f"in flight with no work for {e.stall_threshold} scrapes: "
            + "; ".join(p.describe() for p in e.stalled),
        }[self.trigger]
        return f"stopping {', '.join(self.pod_ids)} ({self.trigger}: {why})"


@dataclass(frozen=True, slots=True, kw_only=True)
class ReadinessChange:
    """ReadinessChange publishes a pod's readySince, or clears it when `ready_since` is None.

    A publish carries the pod's incarnation on the observe that saw it answer (None: the controller gave none),
    so the controller refuses it once that process has ended — a report that lands after a stop, or after a
    stop and a re-wake of the same id, must not bring readiness back (policy/wake/readiness_fence).
    """

    pod_id: str
    ready_since: datetime | None
    incarnation: int | None = None


class EventKind(StrEnum):
    """EventKind names a log-worthy moment of the monitor."""

    READY = "READY"
    BOOT_RESTARTED = "BOOT_RESTARTED"
    RESTARTED_UNSEEN = "RESTARTED_UNSEEN"
    READY_PODS_GONE = "READY_PODS_GONE"
    SEVERAL_PODS = "SEVERAL_PODS"
    STOP_REFUSED = "STOP_REFUSED"


class EventLevel(StrEnum):
    INFO = "INFO"
    WARNING = "WARNING"


@dataclass(frozen=True, slots=True, kw_only=True)
class MonitorEvent:
    """MonitorEvent is a line for the service to log at `level`; it never carries a secret."""

    kind: EventKind
    level: EventLevel
    message: str
    pod_id: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class TickDecision:
    """TickDecision is one tick decided: persist `state`, issue `stop`, apply `readiness`, log `events`."""

    state: MonitorState
    signal: AggregateSignal
    verdicts: tuple[PodVerdict, ...] = ()
    stop: StopOrder | None = None
    readiness: tuple[ReadinessChange, ...] = ()
    events: tuple[MonitorEvent, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class PodStopOutcome:
    """PodStopOutcome is whether RunPod accepted the stop of one pod."""

    pod_id: str
    ok: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class StopResult:
    """StopResult is what issuing a StopOrder returned, one outcome per targeted pod."""

    trigger: StopTrigger
    outcomes: tuple[PodStopOutcome, ...]

    @property
    def accepted(self) -> bool:
        """Every targeted stop accepted (and there was at least one)."""
        return bool(self.outcomes) and all(o.ok for o in self.outcomes)


@dataclass(frozen=True, slots=True, kw_only=True)
class StopAftermath:
    """StopAftermath is the state after a stop, the readiness it clears, and what to log."""

    state: MonitorState
    accepted: bool
    readiness: tuple[ReadinessChange, ...] = ()
    events: tuple[MonitorEvent, ...] = ()


def tick(
    state: MonitorState,
    observation: TickObservation,
    now: datetime,
    options: MonitorOptions,
    *,
    warm_hours: WarmHours | None = None,
) -> TickDecision:
    """Decide one tick of the idle monitor for one volume (see the module docstring for the order).

    `warm_hours` are the pod's (None: none): inside them, or in the idle window before they open, no idle stop.
    """
    _require_aware(now)
    volume = observation.volume
    if volume.lookup is Lookup.UNREADABLE:
        # Unknown holds every counter — but the cap is the backstop for a run of Unknown ticks: past it, the
        # pods remembered from the last readable list are stopped by id (the controller stops them unchecked).
        signal = aggregate_signal(volume, ())
        if state.pods and cap_reached(state.cap_started_at, now, options.max_runtime):
            order = StopOrder(
                trigger=StopTrigger.RUNTIME_CAP, pod_ids=tuple(state.pods), evidence=_evidence(state, options)
            )
            return TickDecision(state=state, signal=signal, stop=order)
        return TickDecision(state=state, signal=signal)
    listed = tuple(dict.fromkeys(volume.pod_ids)) if volume.lookup is Lookup.FOUND else ()
    readings = {reading.pod_id: reading for reading in observation.pods}
    incarnations = {pod_id: readings[pod_id].incarnation for pod_id in listed if pod_id in readings}
    checked = check_incarnations(state, listed, incarnations)
    cleared = tuple(ReadinessChange(pod_id=pod_id, ready_since=None) for pod_id in checked.cleared(state))
    restarted = _restarted_events(checked)
    state = checked.state
    verdicts = tuple(
        classify_pod(readings.get(pod_id) or PodReading(pod_id=pod_id), _memory(state, pod_id).baseline)
        for pod_id in listed
    )
    requests = classify_requests(observation.requests, state.requests_seen)
    aggregate = with_requests(aggregate_signal(volume, verdicts), requests, ready=state.counters.phase is Phase.READY)
    if ready_pods_gone(state, verdicts, aggregate.signal):
        restarted += (_ready_gone_event(aggregate),)
        state = stepped_down(state)
    step = advance_phase(state.counters, aggregate.signal)
    scrapes = {pod_id: readings[pod_id].scrape for pod_id in listed if pod_id in readings}
    pods, readiness = _remember(state, verdicts, incarnations, scrapes, now, options.stall_threshold)
    new_state = MonitorState(
        counters=step.counters,
        cap_started_at=advance_cap(state.cap_started_at, aggregate.signal, now),
        boot_started_at=_boot_start(state.boot_started_at, step.edge, now),
        pods=pods,
        requests_seen=requests.baseline,
    )
    return TickDecision(
        state=new_state,
        signal=aggregate,
        verdicts=verdicts,
        stop=_stop_order(
            new_state,
            step,
            verdicts,
            scrapes,
            now,
            options,
            warm=inside_warm_hours(warm_hours, now, lead=options.idle_window),
        ),
        # a clear of an ended pod comes first: its publish this tick (a fresh answer) is the last word
        readiness=cleared + readiness,
        events=restarted + _events(state, step, aggregate, listed, now, options),
    )


def after_stop(state: MonitorState, result: StopResult, now: datetime) -> StopAftermath:
    """Fold a stop's outcome into the state: accepted is the Down edge, refused resets the counter that fired."""
    _require_aware(now)
    stopped = {outcome.pod_id for outcome in result.outcomes if outcome.ok}
    readiness = [
        ReadinessChange(pod_id=pod_id, ready_since=None)
        for pod_id, memory in state.pods.items()
        if memory.ready_since and (pod_id in stopped or result.accepted)
    ]
    survivors = {pod_id: memory for pod_id, memory in state.pods.items() if pod_id not in stopped}
    if result.accepted:
        kept = {
            pod_id: PodMemory(baseline=m.baseline, incarnation=m.incarnation)
            for pod_id, m in survivors.items()
            if m.baseline is not None
        }
        down = MonitorState(counters=after_accepted_stop(), pods=kept, requests_seen=state.requests_seen)
        return StopAftermath(state=down, accepted=True, readiness=tuple(readiness))
    refused = [outcome.pod_id for outcome in result.outcomes if not outcome.ok]
    if result.trigger is StopTrigger.STALL:  # a full stall window before the next attempt, as for idle
        survivors = {pod_id: replace(memory, stall_ticks=0) for pod_id, memory in survivors.items()}
    kept_state = MonitorState(
        counters=after_refused_stop(state.counters, result.trigger),
        # The cap is the backstop, not a window to wait out again: a refused cap stop keeps its start, so the
        # next tick tries again — restarting a 6 h window on one RunPod 5xx would bill 6 more hours.
        cap_started_at=state.cap_started_at,
        boot_started_at=state.boot_started_at,
        pods=survivors,
        requests_seen=state.requests_seen,
    )
    event = MonitorEvent(
        kind=EventKind.STOP_REFUSED,
        level=EventLevel.WARNING,
        message=(
            f"stop ({result.trigger}) refused for {', '.join(refused) or 'every pod'}; "
            f"staying {state.phase}, "
            + (
                "next attempt on the next tick"
                if result.trigger is StopTrigger.RUNTIME_CAP
                else "next attempt after a full window"
            )
        ),
    )
    return StopAftermath(state=kept_state, accepted=False, readiness=tuple(readiness), events=(event,))


def _memory(state: MonitorState, pod_id: str) -> PodMemory:
    return state.pods.get(pod_id) or PodMemory()


def _remember(
    state: MonitorState,
    verdicts: tuple[PodVerdict, ...],
    incarnations: dict[str, int | None],
    scrapes: dict[str, PodActivity | None],
    now: datetime,
    stall_threshold: int,
) -> tuple[dict[str, PodMemory], tuple[ReadinessChange, ...]]:
    pods: dict[str, PodMemory] = {}
    readiness: list[ReadinessChange] = []
    for verdict in verdicts:
        before = _memory(state, verdict.pod_id)
        # what is remembered belongs to the incarnation observed now, so the next tick can tell a new process
        observed = incarnations.get(verdict.pod_id)
        incarnation = before.incarnation if observed is None else observed
        if verdict.answered:
            stall = advance_stall(
                before.stall_ticks, scrapes.get(verdict.pod_id), before.baseline, threshold=stall_threshold
            )
            after = PodMemory(
                baseline=verdict.baseline,
                ready_since=before.ready_since or now,
                incarnation=incarnation,
                stall_ticks=stall.ticks,
            )
            if before.ready_since is None:
                # only this tick's observe vouches for the process that answered: none observed, none sent
                readiness.append(ReadinessChange(pod_id=verdict.pod_id, ready_since=now, incarnation=observed))
        elif verdict.process_ended:
            after = PodMemory(incarnation=incarnation)
            if before.ready_since is not None:
                readiness.append(ReadinessChange(pod_id=verdict.pod_id, ready_since=None))
        else:
            after = replace(before, incarnation=incarnation)
        if after != PodMemory():
            pods[verdict.pod_id] = after
    listed = {verdict.pod_id for verdict in verdicts}
    readiness.extend(
        ReadinessChange(pod_id=pod_id, ready_since=None)
        for pod_id, memory in state.pods.items()
        if pod_id not in listed and memory.ready_since is not None
    )
    return pods, tuple(readiness)


def _restarted_events(checked: IncarnationCheck) -> tuple[MonitorEvent, ...]:
    if not checked.ended:
        return ()
    outcome = (
        "stale readiness cleared, fresh boot budget and idle window"
        if checked.went_down
        else "its memory is dropped; a sibling still holds readiness"
    )
    return tuple(
        MonitorEvent(
            kind=EventKind.RESTARTED_UNSEEN,
            level=EventLevel.INFO,
            message=f"pod {pod_id} was stopped or restarted between two ticks; {outcome}",
            pod_id=pod_id,
        )
        for pod_id in checked.ended
    )


def _ready_gone_event(aggregate: AggregateSignal) -> MonitorEvent:
    return MonitorEvent(
        kind=EventKind.READY_PODS_GONE,
        level=EventLevel.INFO,
        message=f"every pod that was ready is gone; {aggregate.pod_id} starts a fresh boot budget and idle window",
        pod_id=aggregate.pod_id,
    )


def _boot_start(before: datetime | None, edge: PhaseEdge, now: datetime) -> datetime | None:
    if edge in (PhaseEdge.BOOT_STARTED, PhaseEdge.BOOT_RESTARTED):
        return now
    if edge is PhaseEdge.WENT_DOWN:
        return None
    return before


def _evidence(state: MonitorState, options: MonitorOptions) -> StopEvidence:
    return StopEvidence(
        idle_streak=state.counters.idle_streak,
        idle_threshold=options.idle_threshold,
        booting_ticks=state.counters.booting_ticks,
        boot_grace_threshold=options.boot_grace_threshold,
        up_since=state.cap_started_at,
        max_runtime=options.max_runtime,
        stall_threshold=options.stall_threshold,
    )


def _stop_order(
    state: MonitorState,
    step: PhaseStep,
    verdicts: tuple[PodVerdict, ...],
    scrapes: dict[str, PodActivity | None],
    now: datetime,
    options: MonitorOptions,
    *,
    warm: bool,
) -> StopOrder | None:
    evidence = _evidence(state, options)
    if cap_reached(state.cap_started_at, now, options.max_runtime):
        not_down = tuple(v.pod_id for v in verdicts if v.signal is not PodSignal.NOT_RUNNING)
        if not_down:
            return StopOrder(trigger=StopTrigger.RUNTIME_CAP, pod_ids=not_down, evidence=evidence)
    up = tuple(v.pod_id for v in verdicts if v.signal.is_up)
    stalled = stalled_pods(state, verdicts, scrapes, options.stall_threshold)
    if stalled and up:
        return StopOrder(trigger=StopTrigger.STALL, pod_ids=up, evidence=replace(evidence, stalled=stalled))
    trigger = phase_stop_due(
        step, idle_threshold=options.idle_threshold, boot_grace_threshold=options.boot_grace_threshold
    )
    if trigger is StopTrigger.IDLE and warm:
        return None  # warm hours: the streak keeps counting, and the first idle tick after them stops the pod
    if trigger is None or not up:
        return None
    return StopOrder(trigger=trigger, pod_ids=up, evidence=evidence)


def _events(
    before: MonitorState,
    step: PhaseStep,
    aggregate: AggregateSignal,
    listed: tuple[str, ...],
    now: datetime,
    options: MonitorOptions,
) -> tuple[MonitorEvent, ...]:
    events: list[MonitorEvent] = []
    if len(listed) > 1:
        events.append(
            MonitorEvent(
                kind=EventKind.SEVERAL_PODS,
                level=EventLevel.WARNING,
                message=f"{len(listed)} pods on the volume ({_some(listed)}); {aggregate.signal} from "
                f"{aggregate.pod_id}",
            )
        )
    pod = aggregate.pod_id
    if step.edge is PhaseEdge.BECAME_READY:
        started = before.boot_started_at
        elapsed = _duration(now - started) if started is not None else "an unobserved boot"
        grace = _duration(options.boot_grace) if options.boot_grace is not None else "off"
        events.append(
            MonitorEvent(
                kind=EventKind.READY,
                level=EventLevel.INFO,
                message=f"pod {pod} ready after {elapsed} (boot grace {grace})",
                pod_id=pod,
            )
        )
    elif step.edge is PhaseEdge.BOOT_RESTARTED:
        events.append(
            MonitorEvent(
                kind=EventKind.BOOT_RESTARTED,
                level=EventLevel.INFO,
                message=f"pod {pod} is starting again after ready; stale readiness cleared, fresh boot budget",
                pod_id=pod,
            )
        )
    return tuple(events)


def _duration(value: timedelta) -> str:
    return str(timedelta(seconds=round(value.total_seconds())))


def _iso(value: datetime | None) -> str:
    return value.isoformat() if value is not None else "unknown"


def _require_aware(now: datetime) -> None:
    if now.tzinfo is None:
        raise ValueError("now must be timezone-aware")


def _some(ids: tuple[str, ...], shown: int = 10) -> str:
    """The first few ids: a warning each tick must not grow with the volume (1,000 pods were ~15 KB a tick)."""
    more = len(ids) - shown
    return ", ".join(ids[:shown]) + (f", … {more} more" if more > 0 else "")
