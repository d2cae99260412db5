"""The wake: ensure a pod attached to our volume is RUNNING on any acceptable GPU (pod-control seed: Wake part 2b).

No decision lives here. Every branch is a policy (wake_round, create_walk, gpu_selection,
termination_guard) and every RunPod call is the v2 client; this module only sequences them, bounds every
loop (MaxPolls rounds per phase, candidates + 2 creates) and records each billable call.

    1 lookup      the volume's pods; Unreadable ⇒ Failed with zero writes; NotFound ⇒ 3
    2 rounds      observe every pod, decide_round: Done ⇒ 4 · Repoll ⇒ wait · ConfirmAbsence ⇒ re-read the
                  volume · Start ⇒ POST start, wait · CreateReplacement ⇒ 3 with every pod stale
    3 replacement catalogue → select_gpus → the create walk; after a 429/5xx wait, re-read the volume and
                  adopt a pod that appeared; then poll the new pod until it serves
    4 terminate   each stale pod the termination guard allows, only once its replacement is RUNNING
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace

from thermostat.chassis.clock import SYSTEM_CLOCK, Clock
from thermostat.policy.common.pod_model import CreateResult, PodObservation, PodStatus
from thermostat.policy.common.pod_options import PodOptions
from thermostat.policy.wake import create_walk as walk
from thermostat.policy.wake.adoption import ADOPTED_DETAIL, unrecorded_call
from thermostat.policy.wake.gpu_selection import GpuCandidate, GpuSelection, select_gpus
from thermostat.policy.wake.termination_guard import check_termination
from thermostat.policy.wake.volume_pods import rank
from thermostat.policy.wake.wake_result import WakeFailureKind, WakeOutcome, WakeResult, failure_kind_of
from thermostat.policy.wake.wake_round import (
    NewPodVerdict,
    RoundVerdict,
    VolumeVerdict,
    after_volume_lookup,
    decide_new_pod,
    decide_round,
)
from thermostat.providers.runpod.client import RunPodV2Client
from thermostat.store.connections import STORE_ERRORS

from .budget_guard import BudgetGuard, Headroom
from .metrics import PodMetrics
from .repository import ActionEntry, PodRepository
from .wake_fence import Fence, Halt, failed, known, no_fence, started_rate, with_walk

log = logging.getLogger("thermostat.pod_controller.wake")


@dataclass(slots=True)
class _Run:
    fence: Fence
    adopt: bool = False  # the wake closed an abandoned one: a pod it answers with may be billing off the record
    billed: bool = False
    headroom: Headroom | None = None  # a budget not reached: the projection is judged before the first write
    trigger: str = "wake"  # every billable call of the wake is recorded with it: wake, or schedule (warm hours)


# The running wake's fence and whether it billed. Each wake runs in its own task, so a context variable
# scopes them to the wake without threading them through every method.
_run: contextvars.ContextVar[_Run] = contextvars.ContextVar("wake_run")


def unconfigured(pod: PodOptions) -> str:
    """Why a pod cannot be acted on: the safe boot state before the key or the volume is set."""
    return f"pod {pod.name} is not configured (RUNPOD_API_KEY unset or RUNPOD_VOLUME_ID blank)"


class _Halted(Exception):
    def __init__(self, halt: Halt) -> None:
        super().__init__(halt.reason)
        self.halt = halt


class _OverBudget(Exception):
    """The wake's projected spend does not fit in its budget: refused before its first write."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class WakeService:
    def __init__(
        self,
        client: RunPodV2Client,
        records: PodRepository,
        *,
        clock: Clock = SYSTEM_CLOCK,
        budget: BudgetGuard | None = None,
        metrics: PodMetrics | None = None,
    ) -> None:
        self.client = client
        self.records = records
        self.clock = clock
        self.budget = budget
        self.metrics = metrics or PodMetrics()

    async def wake(
        self, pod: PodOptions, fence: Fence = no_fence, *, adopt: bool = False, trigger: str = "wake"
    ) -> WakeResult:
        """Run one wake; `fence` is asked before every billable call (start, create, terminate). `adopt`: the wake
        closed one a stopped replica abandoned, so the pod it answers with is put on record if nothing there says
        it bills (policy/wake/adoption.py). `trigger` is what its billable calls are recorded with."""
        run = _Run(fence=fence, adopt=adopt, trigger=trigger)
        _run.set(run)
        try:
            result = await self._wake(pod)
        except _OverBudget as over:
            log.warning("pod %s: wake refused: %s", pod.name, over.reason)
            result = failed(WakeFailureKind.OVER_BUDGET, over.reason)
        except _Halted as halted:
            log.warning("pod %s: wake halted before a billable call: %s", pod.name, halted.halt.reason)
            if halted.halt.in_flight:
                result = WakeResult(outcome=WakeOutcome.WAITING, message=f"{halted.halt.reason}; poll again")
            else:
                result = failed(WakeFailureKind.STOPPED_DURING_WAKE, halted.halt.reason)
        return replace(result, billed=run.billed)

    async def _check(self, pod: PodOptions, what: str, *, rate: Callable[[], Awaitable[float | None]]) -> None:
        """Before a start or a create: the fence, then (once per wake) the projected spend against the budget;
        `rate` is what the write bills at, asked only for the projection and only when the catalogue has none."""
        run = _run.get()
        halt = await run.fence()
        if halt is not None:
            raise _Halted(Halt(in_flight=halt.in_flight, reason=f"{halt.reason} (before {what})"))
        if run.headroom is not None and self.budget is not None:
            headroom, run.headroom = run.headroom, None
            refusal = await self.budget.fits(pod, headroom, self.client, self.records, fallback_rate=await rate())
            if refusal is not None:
                raise _OverBudget(refusal.reason)

    async def _record(self, entry: ActionEntry) -> None:
        _run.get().billed = True
        self.metrics.action(entry)
        await self.records.record_action(entry)

    async def _wake(self, pod: PodOptions) -> WakeResult:
        if not self.client.is_configured or not pod.configured:
            return failed(WakeFailureKind.UNCONFIGURED, unconfigured(pod))
        lookup = self.client.lookup_pods_by_volume(pod.volume_id)
        if self.budget is not None:
            # Metering's answer is awaited before anything acts on the lookup, so a refused wake writes nothing to
            # RunPod; the lookup (a read) runs meanwhile, so the check adds only what it takes beyond the lookup.
            answer, looked_up = await asyncio.gather(self.budget.headroom(pod), lookup)
            if isinstance(answer, Headroom):
                _run.get().headroom = answer
            elif answer is not None:
                log.warning("pod %s: wake refused: %s", pod.name, answer.reason)
                return failed(WakeFailureKind.OVER_BUDGET, answer.reason)
        else:
            looked_up = await lookup
        volume = after_volume_lookup(looked_up)
        if volume.verdict is VolumeVerdict.FAILED:
            return failed(WakeFailureKind.LOOKUP_UNREADABLE, volume.reason)
        if volume.verdict is VolumeVerdict.CREATE:
            log.info("pod %s: no pod on volume %s — creating one", pod.name, pod.volume_id)
            return await self._replace(pod, stale=())
        return await self._drive(pod, volume.pod_ids)

    async def _observe(self, pod_ids: Sequence[str], started: set[str]) -> list[PodObservation]:
        observed = await asyncio.gather(*(self.client.observe_pod(i) for i in pod_ids))
        return [replace(o, start_attempted=o.pod_id in started) for o in observed]

    async def _drive(self, pod: PodOptions, pod_ids: tuple[str, ...]) -> WakeResult:
        started: set[str] = set()
        observations: list[PodObservation] = []
        for round_ in range(pod.max_polls):
            if round_:
                await self.clock.sleep(pod.poll_interval_seconds)
            observations = await self._observe(pod_ids, started)
            decision = decide_round(observations)
            match decision.verdict:
                case RoundVerdict.DONE:
                    assert decision.pod_id is not None
                    assert decision.outcome is not None
                    if _run.get().adopt:
                        await self._adopt(pod, decision.pod_id, observations)
                    await self._terminate_stale(pod, observations, decision.stale_pod_ids, decision.pod_id)
                    return WakeResult(
                        outcome=decision.outcome,
                        pod_id=decision.pod_id,
                        proxy_url=pod.proxy_url(decision.pod_id),
                        message=decision.reason,
                    )
                case RoundVerdict.REPOLL:
                    log.info("pod %s: %s", pod.name, decision.reason)
                case RoundVerdict.CONFIRM_ABSENCE:
                    recheck = after_volume_lookup(await self.client.lookup_pods_by_volume(pod.volume_id))
                    if recheck.verdict is VolumeVerdict.FAILED:
                        return failed(WakeFailureKind.LOOKUP_UNREADABLE, recheck.reason)
                    if recheck.verdict is VolumeVerdict.CREATE:
                        return await self._replace(pod, stale=())
                    pod_ids = recheck.pod_ids
                case RoundVerdict.START:
                    assert decision.pod_id is not None
                    seen = next((o for o in observations if o.pod_id == decision.pod_id), None)
                    await self._check(
                        pod,
                        f"starting {decision.pod_id}",
                        rate=functools.partial(self._pod_rate, pod, decision.pod_id, seen),
                    )
                    result = await self.client.start(decision.pod_id)
                    started.add(decision.pod_id)
                    rate, gpu_id = started_rate(result, seen)
                    await self._record(
                        ActionEntry(
                            pod_name=pod.name,
                            action="Start",
                            pod_id=decision.pod_id,
                            ok=result.ok,
                            http_status=result.http_status,
                            trigger=_run.get().trigger,
                            price_per_hour=rate,
                            gpu_id=gpu_id,
                        )
                    )
                case RoundVerdict.CREATE_REPLACEMENT:
                    log.info("pod %s: %s — creating a replacement", pod.name, decision.reason)
                    return await self._replace(pod, stale=observations)
        # Name the pod in flight, as GET does: a stale EXITED pod may be listed before its booting replacement.
        ranked = rank(observations)
        waiting_on = ranked.pod_id if ranked is not None else (pod_ids[0] if pod_ids else None)
        return WakeResult(
            outcome=WakeOutcome.WAITING,
            pod_id=waiting_on,
            proxy_url=pod.proxy_url(waiting_on) if waiting_on else None,
            message=f"not RUNNING within {pod.max_polls} polls; poll again",
        )

    async def _pod_rate(self, pod: PodOptions, pod_id: str, seen: PodObservation | None) -> float | None:
        """What a start of `pod_id` bills at: its observed cost, else its newest recorded rate (None: unknown)."""
        if seen is not None and seen.cost_per_hour:
            return seen.cost_per_hour
        try:
            return await self.records.last_rate(pod.name, pod_id)
        except STORE_ERRORS as error:
            log.warning("pod %s: recorded rate of %s unreadable (%s)", pod.name, pod_id, type(error).__name__)
            return None

    async def _adopt(self, pod: PodOptions, pod_id: str, observations: Sequence[PodObservation]) -> None:
        """Record the call an abandoned wake issued and never recorded, when the record misses one for `pod_id`."""
        try:
            call = unrecorded_call(await self.records.last_accepted_action(pod.name, pod_id))
        except Exception as error:  # best effort: the wake answers either way
            log.error("pod %s: whether %s is on record is unknown (%s)", pod.name, pod_id, type(error).__name__)
            return
        if call is None:
            return
        seen = next((o for o in observations if o.pod_id == pod_id), None)
        log.warning(
            "pod %s: %s bills with no call on record: recording the %s an abandoned wake issued", pod.name, pod_id, call
        )
        await self._record(
            ActionEntry(
                pod_name=pod.name,
                action=str(call),
                pod_id=pod_id,
                ok=True,
                trigger=_run.get().trigger,
                price_per_hour=seen.cost_per_hour if seen and seen.cost_per_hour else None,
                gpu_id=seen.gpu_id if seen else None,
                detail=ADOPTED_DETAIL,
            )
        )

    async def _replace(self, pod: PodOptions, *, stale: Sequence[PodObservation]) -> WakeResult:
        if not pod.can_create:
            return failed(
                WakeFailureKind.TEMPLATE_UNSET,
                f"RUNPOD_TEMPLATE_ID is blank: pod {pod.name} cannot create a replacement",
            )
        selection = select_gpus(await self.client.get_catalog(), pod.gpu_criteria())
        stale_ids = tuple(o.pod_id for o in stale)
        step: walk.CreateStep = walk.start(selection.candidates)
        while True:
            match step:
                case walk.Failed():
                    return self._walk_failed(pod, step, selection)
                case walk.Post(candidate=candidate):
                    await self._check(
                        pod, f"creating on {candidate.gpu_id}", rate=functools.partial(known, candidate.price_per_hour)
                    )
                    result = await self._create(pod, candidate)
                    step = walk.advance(
                        step.walk,
                        result,
                        poll_interval_seconds=pod.poll_interval_seconds,
                        max_retry_after_seconds=pod.max_retry_after_seconds,
                    )
                case walk.Wait(candidate=candidate, seconds=seconds):
                    log.info("pod %s: create on %s to be retried in %.1fs", pod.name, candidate.gpu_id, seconds)
                    await self.clock.sleep(seconds)
                    recheck = walk.recheck_after_wait(
                        await self.client.lookup_pods_by_volume(pod.volume_id), stale_pod_ids=stale_ids
                    )
                    if recheck.verdict is walk.RecheckVerdict.FAILED:
                        return failed(WakeFailureKind.RECHECK_UNREADABLE, recheck.reason, step.walk)
                    if recheck.verdict is walk.RecheckVerdict.ADOPT:
                        assert recheck.pod_id is not None
                        await self._record_create(pod, recheck.pod_id, candidate, None, recheck.reason)
                        step = walk.Created(walk=step.walk, candidate=candidate, pod_id=recheck.pod_id)
                    else:
                        step = walk.Post(walk=step.walk, candidate=candidate)
                case walk.Created():
                    return await self._await_new_pod(pod, step, stale)

    async def _create(self, pod: PodOptions, candidate: GpuCandidate) -> CreateResult:
        """One POST /v2/pods, recorded whenever a pod may exist: a 2xx (with or without an id), no answer at
        all (a create that timed out may have placed one), or a create cut off by shutdown."""
        try:
            result = await self.client.create_pod(
                name=f"{pod.name}-{self.clock.now():%Y%m%dT%H%M%SZ}",
                template_id=pod.template_id,
                datacenter_id=pod.datacenter_id,
                gpu_id=candidate.gpu_id,
                volume_id=pod.volume_id,
            )
        except asyncio.CancelledError:
            await self._record_create(
                pod, "", candidate, None, "interrupted before RunPod answered: a pod may have been placed", ok=False
            )
            raise
        if 200 <= result.http_status < 300:
            detail = None if result.pod_id else "answered 2xx without a pod id: a pod may exist and bill"
            await self._record_create(pod, result.pod_id or "", candidate, result.http_status, detail)
        elif result.http_status == 0:
            await self._record_create(
                pod, "", candidate, 0, "no answer (transport failure): a pod may have been placed", ok=False
            )
        return result

    async def _record_create(
        self,
        pod: PodOptions,
        pod_id: str,
        candidate: GpuCandidate,
        status: int | None,
        detail: str | None,
        *,
        ok: bool = True,
    ) -> None:
        await self._record(
            ActionEntry(
                pod_name=pod.name,
                action="Create",
                pod_id=pod_id,
                ok=ok,
                http_status=status,
                gpu_id=candidate.gpu_id,
                price_per_hour=candidate.price_per_hour,
                trigger=_run.get().trigger,
                detail=detail,
            )
        )

    def _walk_failed(self, pod: PodOptions, step: walk.Failed, selection: GpuSelection) -> WakeResult:
        kind = failure_kind_of(step.phase)
        if kind is WakeFailureKind.NO_ELIGIBLE_GPU:
            cap = f"{pod.max_price_per_hour:.2f}"
            message = (
                f"no eligible GPU in {pod.datacenter_id} at or under {cap} USD/h "
                f"(RUNPOD_MAX_PRICE_PER_HOUR): {selection.summary()}"
            )
        else:
            excluded = f"; excluded: {selection.summary()}" if selection.excluded else ""
            message = f"{step.reason}{excluded}"
        log.warning("pod %s: wake failed: %s", pod.name, message)
        return failed(kind, message, step.walk)

    async def _await_new_pod(
        self, pod: PodOptions, created: walk.Created, stale: Sequence[PodObservation]
    ) -> WakeResult:
        candidate, pod_id = created.candidate, created.pod_id
        for poll in range(pod.max_polls):
            if poll:
                await self.clock.sleep(pod.poll_interval_seconds)
            observation = await self.client.observe_pod(pod_id)
            decision = decide_new_pod(observation)
            if decision.verdict is NewPodVerdict.SERVING:
                await self._terminate_stale(pod, [*stale, observation], tuple(o.pod_id for o in stale), pod_id)
                return with_walk(
                    WakeResult(
                        outcome=WakeOutcome.CREATED,
                        pod_id=pod_id,
                        gpu_id=candidate.gpu_id,
                        price_per_hour=candidate.price_per_hour,
                        proxy_url=pod.proxy_url(pod_id),
                        message=f"created {pod_id} on {candidate.gpu_id}",
                    ),
                    created.walk,
                )
            if decision.verdict is NewPodVerdict.FAILED:
                return failed(
                    WakeFailureKind.NEW_POD_FAILED,
                    decision.reason,
                    created.walk,
                    pod_id=pod_id,
                    gpu_id=candidate.gpu_id,
                    price=candidate.price_per_hour,
                )
        return with_walk(
            WakeResult(
                outcome=WakeOutcome.WAITING,
                pod_id=pod_id,
                gpu_id=candidate.gpu_id,
                price_per_hour=candidate.price_per_hour,
                proxy_url=pod.proxy_url(pod_id),
                message=f"created {pod_id} on {candidate.gpu_id}; not RUNNING within {pod.max_polls} polls; poll again",
            ),
            created.walk,
        )

    async def _terminate_stale(
        self, pod: PodOptions, observations: Sequence[PodObservation], stale_ids: Sequence[str], serving_id: str
    ) -> None:
        by_id = {o.pod_id: o for o in observations}
        serving = by_id.get(serving_id)
        serving_status = serving.status if serving else PodStatus.UNKNOWN
        for stale_id in stale_ids:
            stale = by_id.get(stale_id)
            # every pod reached us through our volume's list; an observation that names volumes decides
            stale_volume = (
                pod.volume_id
                if stale is None or not stale.volume_ids or pod.volume_id in stale.volume_ids
                else stale.volume_ids[0]
            )
            verdict = check_termination(
                stale_id=stale_id,
                replacement_id=serving_id,
                stale_volume=stale_volume,
                our_volume=pod.volume_id,
                replacement_status=serving_status,
            )
            if not verdict.allowed:
                log.warning("pod %s: not terminating %s: %s", pod.name, stale_id, verdict.refusal)
                continue
            halt = await _run.get().fence()
            if halt is not None:
                # the replacement serves already; a later wake (or the lease's new holder) terminates the rest
                log.warning("pod %s: leaving %s for the next wake: %s", pod.name, stale_id, halt.reason)
                continue
            result = await self.client.terminate(stale_id)
            await self._record(
                ActionEntry(
                    pod_name=pod.name,
                    action="Terminate",
                    pod_id=stale_id,
                    ok=result.ok,
                    http_status=result.http_status,
                    trigger=_run.get().trigger,
                    detail=f"stale; replaced by {serving_id}",
                )
            )
