"""The pod controller's gRPC servicers: proto → options/policy/wake → records → proto, nothing more.

Status codes follow the pod-control seed's REST surface: the edge maps gRPC codes to HTTP (NOT_FOUND 404,
UNAVAILABLE 503, ABORTED 409) and applies `x-http-code` for what gRPC lacks (202 Waiting); `x-problem-title` names the
problem (a Failed wake is the 409 problem "Failed" whose detail says why).
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import uuid
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime

import grpc
from google.api import httpbody_pb2

from thermostat.chassis.clock import SYSTEM_CLOCK, Clock
from thermostat.chassis.lookup import found_or_abort
from thermostat.chassis.registry import POD_CONTROLLER
from thermostat.chassis.rest_json import rest_json
from thermostat.chassis.timestamps import from_timestamp, to_timestamp
from thermostat.chassis.unexpected_errors import internal_error
from thermostat.pods.v1 import pods_pb2, pods_pb2_grpc
from thermostat.policy.common.echo import quoted
from thermostat.policy.common.pod_model import Lookup
from thermostat.policy.common.pod_options import PodOptions, find_pod
from thermostat.policy.wake.last_wake import last_wake_of, last_wake_of_exception
from thermostat.policy.wake.wake_result import WakeFailureKind, WakeOutcome, WakeResult
from thermostat.providers.runpod.client import RunPodV2Client
from thermostat.store.connections import STORE_ERRORS

from .metrics import PodMetrics
from .orphan_sweep import ListingUnreadable, PodOrphanSweeper
from .pod_view import HISTORY_ABSENT, build_view, observe_volume, pod_action, wake_record
from .replies import NO_POD, WAKE_TRIGGERS, absent, answer_wake, set_status
from .repository import ActionEntry, ActionRow, PodRepository, ReadinessOutcome, WakeCompletion
from .wake_fence import Fence
from .wake_gate import WakeGate
from .wake_service import WakeService, unconfigured
from .watch_hub import WatchHub

log = logging.getLogger("thermostat.pod_controller")

_TRIGGERS = {
    pods_pb2.STOP_TRIGGER_IDLE: "idle",
    pods_pb2.STOP_TRIGGER_BOOT_GRACE: "boot-grace",
    pods_pb2.STOP_TRIGGER_RUNTIME_CAP: "runtime-cap",
    pods_pb2.STOP_TRIGGER_MANUAL: "manual",
    pods_pb2.STOP_TRIGGER_BUDGET: "budget",
    pods_pb2.STOP_TRIGGER_STALL: "stall",
}
MAX_PAGE_SIZE = 500
DEFAULT_PAGE_SIZE = 50
MAX_FEED_PAGE = 5000
DEFAULT_FEED_PAGE = 500


class PodControl:
    """What both servicers share: the configured pods, the RunPod client, the records, the wake."""

    def __init__(
        self,
        pods: Sequence[PodOptions],
        client: RunPodV2Client,
        records: PodRepository,
        gate: WakeGate,
        wake: WakeService,
        *,
        watch_poll_seconds: float = 2.0,
        clock: Clock = SYSTEM_CLOCK,
        metrics: PodMetrics | None = None,
    ) -> None:
        self.metrics = metrics or PodMetrics()
        self.pods = tuple(pods)
        self.client = client
        self.records = records
        self.gate = gate
        self.wake_service = wake
        self.clock = clock
        self.watches = WatchHub(watch_poll_seconds, clock=clock)

    async def pod(self, name: str, context: grpc.aio.ServicerContext) -> PodOptions:
        """The named pod, or NOT_FOUND — always before any RunPod call."""
        return await found_or_abort(find_pod(self.pods, name), context, f"unknown pod name {quoted(name)}")

    def configured(self, pod: PodOptions) -> bool:
        return self.client.is_configured and pod.configured

    async def stop(self, pod: PodOptions, pod_ids: Sequence[str], trigger: str) -> list[pods_pb2.PodResult]:
        """Stop `pod_ids`: issued (ordered against the pod's wakes) before RunPod is asked, settled after."""

        async def one(pod_id: str, stop_id: uuid.UUID | None) -> pods_pb2.PodResult:
            result = await self.client.stop(pod_id)
            entry = ActionEntry(
                pod_name=pod.name,
                action="Stop",
                pod_id=pod_id,
                ok=result.ok,
                http_status=result.http_status,
                trigger=trigger,
                stop_id=stop_id,
            )
            self.metrics.action(entry)
            await self.records.record_action(entry)
            if result.ok:
                # a stop RunPod accepted ends the boot: readiness of that pod is stale from now on
                try:
                    await self.records.clear_readiness(pod.name, pod_id)
                except Exception as error:
                    # the pod is stopped either way; a store blip must not turn the stop into an error
                    log.error(
                        "pod %s: readiness of stopped pod %s NOT cleared (%s)", pod.name, pod_id, type(error).__name__
                    )
            return pods_pb2.PodResult(pod_id=pod_id, ok=result.ok)

        async def all_of_them() -> list[pods_pb2.PodResult]:
            stop_id = await self.records.begin_stop(pod.name, trigger)
            # a stop cut off here stays unsettled: a wake it overlaps then waits out the settle bound
            results = list(await asyncio.gather(*(one(i, stop_id) for i in pod_ids)))
            if stop_id is not None:
                await self.records.settle_stop(stop_id, [r.pod_id for r in results if r.ok])
            return results

        # shielded: a caller that gives up (a deadline) must not cut a stop off between RunPod accepting it and
        # its audit row (#2050), nor leave it unsettled for a wake waiting on it
        return await asyncio.shield(all_of_them())

    async def run_wake(self, pod: PodOptions, *, trigger: str = "wake") -> WakeResult:
        """Run or join the pod's wake; a wake this call runs records its billable calls with `trigger` (a joined
        one keeps its own)."""

        async def attempt(
            _attempt_id: object, fence: Fence, after_abandoned: bool
        ) -> tuple[WakeResult, WakeCompletion]:
            started = self.clock.monotonic()
            try:
                result = await self.wake_service.wake(pod, fence, adopt=after_abandoned, trigger=trigger)
            except Exception:
                log.exception("pod %s: wake raised", pod.name)
                # the reason is public (the open GET, the 409): an exception's text is the log's alone
                last = last_wake_of_exception(internal_error(POD_CONTROLLER.name))
                result = WakeResult(
                    outcome=WakeOutcome.FAILED, failure_kind=WakeFailureKind.EXCEPTION, message=last.reason
                )
            else:
                last = last_wake_of(result)
            log.info("pod %s: wake %s (%s) %s", pod.name, result.outcome, last.outcome, result.message)
            self.metrics.wake(str(last.outcome), last.wake_outcome, self.clock.monotonic() - started)
            completion = WakeCompletion(
                outcome=str(last.outcome),
                wake_outcome=last.wake_outcome,
                reason=last.reason,
                pod_id=result.pod_id,
                gpu_id=result.gpu_id,
                price_per_hour=result.price_per_hour,
                candidates_considered=result.candidates_considered,
                last_provider_status=result.last_provider_status,
            )
            return result, completion

        return await self.gate.run(pod.name, attempt, trigger=trigger)


class PodControllerServicer(pods_pb2_grpc.PodControllerServicer):  # type: ignore[misc]
    def __init__(self, control: PodControl, orphans: PodOrphanSweeper) -> None:
        self.control = control
        self.orphans = orphans

    async def ListPodOrphans(
        self, request: pods_pb2.ListPodOrphansRequest, context: grpc.aio.ServicerContext
    ) -> pods_pb2.ListPodOrphansResponse:
        try:
            orphans = await self.orphans.scan()
        except ListingUnreadable as error:
            await context.abort(grpc.StatusCode.UNAVAILABLE, str(error))
        except STORE_ERRORS:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "the store could not be read; no pod was judged")
        return pods_pb2.ListPodOrphansResponse(
            orphans=[
                pods_pb2.PodOrphan(
                    pod_id=o.pod_id,
                    pod_name=o.name,
                    owner=o.owner,
                    status=o.status,
                    volume_ids=o.volume_ids,
                    reason=o.reason,
                )
                for o in orphans
            ],
            sweep=str(self.orphans.mode),
            sweep_every_seconds=self.orphans.every_seconds,
        )

    async def StartPod(
        self, request: pods_pb2.StartPodRequest, context: grpc.aio.ServicerContext
    ) -> pods_pb2.StartPodResponse:
        return await answer_wake(self.control, await self.control.pod(request.name, context), context, "wake")

    async def StopPod(
        self, request: pods_pb2.StopPodRequest, context: grpc.aio.ServicerContext
    ) -> pods_pb2.StopPodResponse:
        pod = await self.control.pod(request.name, context)
        if not self.control.configured(pod):
            await context.abort(grpc.StatusCode.UNAVAILABLE, unconfigured(pod))
        volume = await self.control.client.lookup_pods_by_volume(pod.volume_id)
        if volume.lookup is Lookup.UNREADABLE:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "volume lookup unreadable; nothing was stopped")
        if volume.lookup is Lookup.NOT_FOUND or not volume.pod_ids:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"no pod on volume {pod.volume_id}")
        results = await self.control.stop(pod, volume.pod_ids, "manual")
        return pods_pb2.StopPodResponse(name=pod.name, ok=all(r.ok for r in results), pods=results)

    async def GetPod(
        self, request: pods_pb2.GetPodRequest, context: grpc.aio.ServicerContext
    ) -> pods_pb2.GetPodResponse:
        pod = await self.control.pod(request.name, context)
        view = await build_view(self.control.client, self.control.records, pod, self.control.clock.now())
        await set_status(
            context,
            nulls=absent(
                view,
                (*NO_POD, ("ready_since", "readySince"), ("last_wake", "lastWake"), ("eta_seconds", "etaSeconds")),
            ),
        )
        return view

    async def GetPodHistory(
        self, request: pods_pb2.GetPodHistoryRequest, context: grpc.aio.ServicerContext
    ) -> pods_pb2.GetPodHistoryResponse:
        pod = await self.control.pod(request.name, context)
        if not 0 <= request.page_size <= MAX_PAGE_SIZE:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"page_size must be between 1 and {MAX_PAGE_SIZE} (0 means {DEFAULT_PAGE_SIZE})",
            )
        size = request.page_size or DEFAULT_PAGE_SIZE
        before = None
        if request.page_token:
            before = _decode_token(request.page_token)
            if before is None:
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "page_token is not a token this route issued")
        try:
            rows = await self.control.records.history_page(pod.name, before=before, limit=size + 1)
        except STORE_ERRORS as error:
            # the history is the store's alone: without it, say so at once rather than after a pool timeout
            await context.abort(
                grpc.StatusCode.UNAVAILABLE, f"history unreadable: store unreachable ({type(error).__name__})"
            )
        response = pods_pb2.GetPodHistoryResponse(name=pod.name)
        for row in rows[:size]:
            entry = pods_pb2.HistoryEntry(at=to_timestamp(row.at))
            if isinstance(row.entry, ActionRow):
                entry.action.CopyFrom(pod_action(row.entry))
            else:
                entry.wake.CopyFrom(wake_record(row.entry))
            response.entries.append(entry)
        if len(rows) > size:
            last = rows[size - 1]
            response.next_page_token = _encode_token(last.at, last.id)
        return response

    async def GetPodHistoryJson(
        self, request: pods_pb2.GetPodHistoryJsonRequest, context: grpc.aio.ServicerContext
    ) -> httpbody_pb2.HttpBody:
        typed = pods_pb2.GetPodHistoryRequest(
            name=request.name, page_size=request.page_size, page_token=request.page_token
        )
        return rest_json(await self.GetPodHistory(typed, context), absent=HISTORY_ABSENT)

    async def WatchPod(
        self, request: pods_pb2.WatchPodRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pods_pb2.WatchPodResponse]:
        pod = await self.control.pod(request.name, context)

        async def view() -> pods_pb2.GetPodResponse:
            return await build_view(self.control.client, self.control.records, pod, self.control.clock.now())

        async for current in self.control.watches.watch(pod.name.casefold(), view):
            yield pods_pb2.WatchPodResponse(pod=current)


def _lookup_result(lookup: Lookup) -> pods_pb2.LookupResult:
    return getattr(pods_pb2, f"LOOKUP_RESULT_{lookup}")  # type: ignore[no-any-return]  # every Lookup has one


class PodControllerInternalServicer(pods_pb2_grpc.PodControllerInternalServicer):  # type: ignore[misc]
    def __init__(self, control: PodControl) -> None:
        self.control = control

    async def ObserveVolume(
        self, request: pods_pb2.ObserveVolumeRequest, context: grpc.aio.ServicerContext
    ) -> pods_pb2.ObserveVolumeResponse:
        pod = await self.control.pod(request.name, context)
        response = pods_pb2.ObserveVolumeResponse(name=pod.name, configured=self.control.configured(pod))
        if not response.configured:
            response.lookup, response.lookup_result = "UNCONFIGURED", pods_pb2.LOOKUP_RESULT_UNCONFIGURED
            return response
        volume, observations = await observe_volume(self.control.client, pod, self.control.records)
        incarnations = await self._incarnations(pod, [o.pod_id for o in observations])
        # each enum beside its string, which stays filled for readers that predate the enum fields
        response.lookup, response.lookup_result = str(volume.lookup), _lookup_result(volume.lookup)
        for o in observations:
            response.pods.append(
                pods_pb2.ObservedPod(
                    pod_id=o.pod_id,
                    lookup=str(o.lookup),
                    status=str(o.status),
                    gpu_count=o.gpu_count,
                    proxy_url=pod.proxy_url(o.pod_id),
                    gpu_id=o.gpu_id or "",
                    lookup_result=_lookup_result(o.lookup),
                    pod_status=getattr(pods_pb2, f"POD_STATUS_{o.status}"),
                    incarnation=incarnations.get(o.pod_id),
                )
            )
        return response

    async def _incarnations(self, pod: PodOptions, pod_ids: list[str]) -> dict[str, int]:
        """Each pod's incarnation, or none at all when the store cannot say (the monitor then compares nothing)."""
        if not pod_ids:
            return {}
        try:
            return await self.control.records.incarnations(pod.name, pod_ids)
        except STORE_ERRORS as error:
            log.warning("pod %s: incarnations unreadable (%s); observing without them", pod.name, type(error).__name__)
            return {}

    async def StopPods(
        self, request: pods_pb2.StopPodsRequest, context: grpc.aio.ServicerContext
    ) -> pods_pb2.StopPodsResponse:
        pod = await self.control.pod(request.name, context)
        trigger = _TRIGGERS.get(request.trigger)
        if trigger is None:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, "trigger must be idle, boot-grace, runtime-cap, manual or budget"
            )
        ids = [i for i in dict.fromkeys(request.pod_ids) if i.strip()]
        if not ids:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "pod_ids must name at least one pod")
        if not self.control.configured(pod):
            await context.abort(grpc.StatusCode.UNAVAILABLE, unconfigured(pod))
        assert trigger is not None
        volume = await self.control.client.lookup_pods_by_volume(pod.volume_id)
        foreign: list[str] = []
        if volume.lookup is not Lookup.UNREADABLE:
            # only pods on this name's volume are stopped; an unreadable list does not block a cost-saving
            # stop of ids the monitor resolved through the volume a moment ago
            foreign = [i for i in ids if i not in volume.pod_ids]
            for pod_id in foreign:
                log.warning("pod %s: not stopping %s: it is not on volume %s", pod.name, pod_id, pod.volume_id)
        results = await self.control.stop(pod, [i for i in ids if i not in foreign], trigger)
        results += [pods_pb2.PodResult(pod_id=i, ok=False) for i in foreign]
        return pods_pb2.StopPodsResponse(name=pod.name, ok=all(r.ok for r in results), pods=results)

    async def WakePod(
        self, request: pods_pb2.WakePodRequest, context: grpc.aio.ServicerContext
    ) -> pods_pb2.StartPodResponse:
        trigger = WAKE_TRIGGERS.get(request.trigger)
        if trigger is None:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "trigger must be WAKE_TRIGGER_REQUEST")
        assert trigger is not None
        return await answer_wake(self.control, await self.control.pod(request.name, context), context, trigger)

    async def ReportReadiness(
        self, request: pods_pb2.ReportReadinessRequest, context: grpc.aio.ServicerContext
    ) -> pods_pb2.ReportReadinessResponse:
        pod = await self.control.pod(request.name, context)
        if request.HasField("ready_since"):
            if not request.pod_id:
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "pod_id is required to publish readiness")
            reported = request.incarnation if request.HasField("incarnation") else None
            written = await self.control.records.set_readiness(
                pod.name, request.pod_id, from_timestamp(request.ready_since), reported
            )
            if written.outcome is ReadinessOutcome.REFUSED:
                log.info(
                    "pod %s: stale readiness report for %s refused: observed at incarnation %s, the record is at %s "
                    "(stopped or restarted since)",
                    pod.name,
                    request.pod_id,
                    reported,
                    written.on_record,
                )
        else:
            await self.control.records.clear_readiness(pod.name, request.pod_id or None)
        return pods_pb2.ReportReadinessResponse()

    async def ListBillableActions(
        self, request: pods_pb2.ListBillableActionsRequest, context: grpc.aio.ServicerContext
    ) -> pods_pb2.ListBillableActionsResponse:
        if request.after_position < 0:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "after_position must not be negative")
        if not 0 <= request.page_size <= MAX_FEED_PAGE:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"page_size must be between 1 and {MAX_FEED_PAGE} (0 means {DEFAULT_FEED_PAGE})",
            )
        try:
            rows, head = await self.control.records.billable_actions(
                request.after_position, request.page_size or DEFAULT_FEED_PAGE
            )
        except STORE_ERRORS as error:
            await context.abort(
                grpc.StatusCode.UNAVAILABLE, f"feed unreadable: store unreachable ({type(error).__name__})"
            )
        return pods_pb2.ListBillableActionsResponse(
            actions=[pods_pb2.BillableAction(position=p, action=pod_action(row)) for p, row in rows], head_position=head
        )


def _encode_token(at: datetime, id_: str) -> str:
    return base64.urlsafe_b64encode(json.dumps([at.isoformat(), id_]).encode()).decode()


def _decode_token(token: str) -> tuple[datetime, str] | None:
    try:
        at, id_ = json.loads(base64.urlsafe_b64decode(token.encode()))
        moment = datetime.fromisoformat(at)
        # a hand-made token with no zone or a date outside the database's range is not one we issued
        if moment.tzinfo is None:
            return None
        return moment.astimezone(UTC), str(id_)
    except (ValueError, TypeError, OverflowError):
        return None
