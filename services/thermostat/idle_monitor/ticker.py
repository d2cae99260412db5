"""One tick of one named pod: gather (controller observe + concurrent /metrics scrapes), decide (the pure
`tick` policy), persist, and carry out (readiness reports, stops through the controller, log lines).

The monitor never calls RunPod itself: it observes and stops through the pod controller's internal RPCs,
naming the trigger, so control lives in one place. A controller that cannot be reached reads as an
unreadable volume — Unknown, which holds every counter (fail closed: a blip is neither idle nor down).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import datetime

import grpc

from thermostat.chassis import tracing
from thermostat.chassis.request_context import outgoing_metadata
from thermostat.chassis.timestamps import stamp
from thermostat.pods.v1 import pods_pb2, pods_pb2_grpc
from thermostat.policy.common.pod_model import Lookup, PodObservation, PodStatus, VolumeLookup
from thermostat.policy.common.warm_hours import WarmHours
from thermostat.policy.idle.budget_stop import billing_pods, budget_stop_targets
from thermostat.policy.idle.idle_phase import StopTrigger
from thermostat.policy.idle.monitor_options import MonitorOptions
from thermostat.policy.idle.monitor_state import MonitorState
from thermostat.policy.idle.monitor_tick import (
    EventLevel,
    MonitorEvent,
    PodStopOutcome,
    ReadinessChange,
    StopEvidence,
    StopOrder,
    StopResult,
    TickDecision,
    TickObservation,
    after_stop,
    tick,
)
from thermostat.policy.idle.monitor_watch import ControllerAnswer
from thermostat.policy.idle.pod_signal import PodReading
from thermostat.policy.idle.request_activity import RequestCounts
from thermostat.policy.idle.vllm_metrics import PodActivity, parse_vllm_metrics
from thermostat.store.connections import STORE_ERRORS

from .metrics import MonitorMetrics
from .repository import MonitorRepository, SavedState
from .scrape_clients import ScrapeClients
from .watch import answer_of_error

log = logging.getLogger("thermostat.idle_monitor")

_TRIGGERS = {
    StopTrigger.IDLE: pods_pb2.STOP_TRIGGER_IDLE,
    StopTrigger.BOOT_GRACE: pods_pb2.STOP_TRIGGER_BOOT_GRACE,
    StopTrigger.RUNTIME_CAP: pods_pb2.STOP_TRIGGER_RUNTIME_CAP,
    StopTrigger.BUDGET: pods_pb2.STOP_TRIGGER_BUDGET,
    StopTrigger.STALL: pods_pb2.STOP_TRIGGER_STALL,
}

BudgetCheck = Callable[[str], Awaitable[bool | None]]
"""Asks metering whether the named pod's budget is exhausted; None when it cannot say."""
_LEVELS = {EventLevel.INFO: logging.INFO, EventLevel.WARNING: logging.WARNING}


# UNCONFIGURED says nothing about the pods, and UNSPECIFIED (a controller that predates the enum) even less
_LOOKUPS: dict[int, Lookup] = {
    pods_pb2.LOOKUP_RESULT_FOUND: Lookup.FOUND,
    pods_pb2.LOOKUP_RESULT_NOT_FOUND: Lookup.NOT_FOUND,
}
_STATUSES: dict[int, PodStatus] = {pods_pb2.PodStatus.Value(f"POD_STATUS_{s}"): s for s in PodStatus}


def _lookup(value: int) -> Lookup:
    return _LOOKUPS.get(value, Lookup.UNREADABLE)


def _status(value: int) -> PodStatus:
    return _STATUSES.get(value, PodStatus.UNKNOWN)


def _observation(pod: pods_pb2.ObservedPod) -> PodObservation:
    return PodObservation(
        lookup=_lookup(pod.lookup_result),
        pod_id=pod.pod_id,
        status=_status(pod.pod_status),
        gpu_count=pod.gpu_count,
        gpu_id=pod.gpu_id or None,
    )


class PodTicker:
    """Ticks one named pod. `may_act` is asked right before a stop: only the lease holder stops."""

    def __init__(
        self,
        *,
        pod_name: str,
        controller: pods_pb2_grpc.PodControllerInternalStub,
        scrapes: ScrapeClients,
        states: MonitorRepository,
        options: MonitorOptions,
        replica: str,
        scrape_timeout: float,
        controller_timeout: float,
        heard: Callable[[ControllerAnswer, str], None] | None = None,
        budget: BudgetCheck | None = None,
        metrics: MonitorMetrics | None = None,
        warm_hours: WarmHours | None = None,
    ) -> None:
        self.metrics = metrics or MonitorMetrics()
        self.warm_hours = warm_hours
        self.pod_name = pod_name
        self.controller = controller
        self.scrapes = scrapes
        self.states = states
        self.options = options
        self.replica = replica
        self.scrape_timeout = scrape_timeout
        self.controller_timeout = controller_timeout
        # each observation is also the controller's answer about the pod's configuration (the pod's watch)
        self.heard = heard or (lambda answer, detail: None)
        # Readiness changes the controller did not take. The state publishes each change once (the tick a pod
        # first answers), so a dropped report would leave GetPod's readySince empty for the whole boot —
        # "waking, not usable yet" while the pod serves. Retried every tick until taken or superseded.
        self._unpublished: dict[str, ReadinessChange] = {}
        self._started = False
        self.budget = budget

    def republish(self, state: MonitorState) -> None:
        """Report the stored readiness again on the next tick (a new leader; reports are idempotent), each with
        the incarnation it was taken under: the controller refuses it if that process has ended since."""
        for pod_id, memory in state.pods.items():
            if memory.ready_since is not None:
                change = ReadinessChange(pod_id=pod_id, ready_since=memory.ready_since, incarnation=memory.incarnation)
                self._unpublished.setdefault(pod_id, change)

    async def observe(self) -> tuple[TickObservation, bool]:
        """The volume and a reading per pod; False when the controller says the pod is unconfigured."""
        try:
            volume = await self.controller.ObserveVolume(
                pods_pb2.ObserveVolumeRequest(name=self.pod_name),
                timeout=self.controller_timeout,
                metadata=outgoing_metadata(),
            )
        except grpc.aio.AioRpcError as error:
            log.warning("pod %s: controller unreachable (%s); tick holds", self.pod_name, error.code().name)
            self.heard(answer_of_error(error), error.code().name)
            return TickObservation(volume=VolumeLookup(lookup=Lookup.UNREADABLE)), True
        if not volume.configured:
            self.heard(ControllerAnswer.UNCONFIGURED, "")
            return TickObservation(volume=VolumeLookup(lookup=Lookup.UNREADABLE)), False
        self.heard(ControllerAnswer.CONFIGURED, "")
        scrapes = await asyncio.gather(
            *(
                self.metrics.timed_scrape(
                    functools.partial(self.scrapes.scrape, p.pod_id, p.proxy_url, timeout=self.scrape_timeout)
                )
                for p in volume.pods
            )
        )
        if _lookup(volume.lookup_result) is not Lookup.UNREADABLE:
            await self.scrapes.retain({p.pod_id for p in volume.pods})
        readings = tuple(
            PodReading(
                pod_id=p.pod_id,
                observation=_observation(p),
                scrape=None if text is None else _answered(parse_vllm_metrics(text)),
                incarnation=p.incarnation if p.HasField("incarnation") else None,
            )
            for p, text in zip(volume.pods, scrapes, strict=True)
        )
        lookup = VolumeLookup(lookup=_lookup(volume.lookup_result), pod_ids=tuple(p.pod_id for p in volume.pods))
        return TickObservation(volume=lookup, pods=readings), True

    async def tick_once(self, now: datetime, may_act: Callable[[], bool] = lambda: True) -> TickDecision | None:
        """One tick; None when the pod is unconfigured (nothing decided, nothing saved). Traced as a root span,
        `monitor.tick`: the controller calls, scrapes and any stop it orders are one trace."""
        with tracing.span("monitor.tick", {"thermostat.pod": self.pod_name}):
            return await self._tick(now, may_act)

    async def _tick(self, now: datetime, may_act: Callable[[], bool]) -> TickDecision | None:
        observation, configured = await self.observe()
        if not configured:
            return None
        saved = await self.states.load(self.pod_name)
        observation = replace(observation, requests=await self._requests())
        if not self._started:
            # a restarted process may have died with a readiness report the controller never took
            self._started = True
            self.republish(saved.state)
        decision = tick(saved.state, observation, now, self.options, warm_hours=self.warm_hours)
        state = decision.state
        if not may_act():
            # the lease moved on mid-tick: the new holder owns the state; writing ours could roll its streak back
            log.warning("pod %s: lease no longer trusted; this tick is dropped", self.pod_name)
            return decision
        await self._save(state, decision, now)
        await self._report(decision.readiness)
        self._log_events(decision.events)
        order = decision.stop
        if order is None and self.budget is not None:
            order = await self._budget_order(observation)
        if order is not None:
            if not may_act():
                log.warning("pod %s: lease no longer trusted; not stopping (another replica takes over)", self.pod_name)
                return decision
            log.warning("pod %s: %s", self.pod_name, order.message)
            outcomes = await self._stop(order.pod_ids, order.trigger)
            aftermath = after_stop(state, StopResult(trigger=order.trigger, outcomes=outcomes), now)
            if not may_act():
                # The lease lapsed while the stop was at RunPod (it may take two controller timeouts, longer than
                # a lease): the new holder owns the state and sees the stop on its own tick; writing this
                # aftermath over its state could roll it back. The controller clears a stopped pod's readiness.
                log.warning(
                    "pod %s: lease no longer trusted after the %s stop of %s (%s); its aftermath is the new holder's",
                    self.pod_name,
                    order.trigger,
                    ", ".join(order.pod_ids),
                    "accepted" if aftermath.accepted else "refused",
                )
                return decision
            await self._save(aftermath.state, decision, now)
            await self._report(aftermath.readiness)
            self._log_events(aftermath.events)
            log.log(
                logging.INFO if aftermath.accepted else logging.WARNING,
                "pod %s: %s stop of %s %s",
                self.pod_name,
                order.trigger,
                ", ".join(order.pod_ids),
                "accepted" if aftermath.accepted else "refused; phase kept, a full window before the next",
            )
        return decision

    async def _requests(self) -> RequestCounts | None:
        """The inference gateway's counts for the pod; None when the store cannot say (no evidence either way)."""
        try:
            return await self.states.load_requests(self.pod_name)
        except STORE_ERRORS as error:
            log.warning("pod %s: gateway request counts unreadable (%s)", self.pod_name, type(error).__name__)
            return None

    async def _budget_order(self, observation: TickObservation) -> StopOrder | None:
        """A budget stop of every billing pod when metering says the pod's budget is exhausted."""
        observed = [reading.observation for reading in observation.pods if reading.observation is not None]
        if not billing_pods(observed) or self.budget is None:
            return None
        targets = budget_stop_targets(observed, await self.budget(self.pod_name))
        if not targets:
            return None
        # the counters play no part in a budget stop; the evidence says so
        return StopOrder(
            trigger=StopTrigger.BUDGET,
            pod_ids=targets,
            evidence=StopEvidence(
                idle_streak=0,
                idle_threshold=0,
                booting_ticks=0,
                boot_grace_threshold=0,
                up_since=None,
                max_runtime=None,
            ),
        )

    async def _save(self, state: MonitorState, decision: TickDecision, now: datetime) -> None:
        self.metrics.ticked(self.pod_name, state, now, self.options.max_runtime)
        await self.states.save(
            self.pod_name,
            SavedState(
                state=state,
                last_signal=str(decision.signal.signal),
                last_signal_pod_id=decision.signal.pod_id or "",
                last_tick_at=now,
                ticked_by=self.replica,
            ),
        )

    async def _stop(self, pod_ids: tuple[str, ...], trigger: StopTrigger) -> tuple[PodStopOutcome, ...]:
        try:
            reply = await self.controller.StopPods(
                pods_pb2.StopPodsRequest(name=self.pod_name, pod_ids=pod_ids, trigger=_TRIGGERS[trigger]),
                # the controller lists the volume, then stops each pod: two RunPod calls in a row
                timeout=2 * self.controller_timeout,
                metadata=outgoing_metadata(),
            )
        except grpc.aio.AioRpcError as error:
            log.warning("pod %s: stop through the controller failed (%s)", self.pod_name, error.code().name)
            return tuple(PodStopOutcome(pod_id=i, ok=False) for i in pod_ids)
        answered = {r.pod_id: r.ok for r in reply.pods}
        return tuple(PodStopOutcome(pod_id=i, ok=answered.get(i, False)) for i in pod_ids)

    async def _report(self, changes: tuple[ReadinessChange, ...]) -> None:
        pending = {**self._unpublished, **{change.pod_id: change for change in changes}}
        self._unpublished = {}
        for change in pending.values():
            request = pods_pb2.ReportReadinessRequest(name=self.pod_name, pod_id=change.pod_id)
            if change.ready_since is not None:
                stamp(request.ready_since, change.ready_since)
                if change.incarnation is not None:
                    request.incarnation = change.incarnation
            try:
                await self.controller.ReportReadiness(
                    request, timeout=self.controller_timeout, metadata=outgoing_metadata()
                )
            except grpc.aio.AioRpcError as error:
                self._unpublished[change.pod_id] = change
                log.warning(
                    "pod %s: readiness report for %s failed (%s); retrying next tick",
                    self.pod_name,
                    change.pod_id,
                    error.code().name,
                )

    def _log_events(self, events: tuple[MonitorEvent, ...]) -> None:
        for event in events:
            log.log(_LEVELS.get(event.level, logging.INFO), "[RunPodIdleMonitor] %s", event.message)


def _answered(activity: PodActivity) -> PodActivity | None:
    # a 200 page with no vLLM family (a proxy's error page) is not an answer from vLLM
    return activity if activity.is_vllm else None
