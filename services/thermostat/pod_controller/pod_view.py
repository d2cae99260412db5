"""The GetPod view: the volume's pods ranked (policy), plus readiness, the last wake and the wake ETA; the history's
entries as messages, and which of their fields REST prints null when empty."""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime

from thermostat.chassis.timestamps import stamp
from thermostat.pods.v1 import pods_pb2
from thermostat.policy.common.pod_model import PodObservation, PodStatus, VolumeLookup
from thermostat.policy.common.pod_options import PodOptions
from thermostat.policy.wake.volume_pods import view_volume_pods
from thermostat.policy.wake.wake_eta import estimate_eta, select_boot_durations
from thermostat.providers.runpod.client import RunPodV2Client

from .gone_pods import billing_pods, close_gone
from .repository import ActionRow, PodRepository, WakeRow

log = logging.getLogger("thermostat.pod_controller.view")

_BOOTING = frozenset({PodStatus.PROVISIONING, PodStatus.STARTING, PodStatus.RUNNING})


# An empty string or a zero here is a value not there (docs/api.md, "Absent values"): REST prints it null.
HISTORY_ABSENT = {
    "thermostat.pods.v1.GetPodHistoryResponse": ("next_page_token",),
    "thermostat.pods.v1.PodAction": ("pod_id", "gpu_id", "price_per_hour", "http_status", "detail"),
    "thermostat.pods.v1.WakeRecord": (
        "outcome",
        "wake_outcome",
        "reason",
        "pod_id",
        "gpu_id",
        "price_per_hour",
        "last_provider_status",
    ),
}


def pod_action(row: ActionRow) -> pods_pb2.PodAction:
    action = pods_pb2.PodAction(
        id=row.id,
        pod_name=row.pod_name,
        action=row.action,
        pod_id=row.pod_id,
        gpu_id=row.gpu_id or "",
        price_per_hour=row.price_per_hour or 0.0,
        http_status=row.http_status or 0,
        ok=row.ok,
        trigger=row.trigger,
        detail=row.detail or "",
    )
    stamp(action.at, row.at)
    return action


def wake_record(row: WakeRow) -> pods_pb2.WakeRecord:
    record = pods_pb2.WakeRecord(
        attempt_id=row.attempt_id,
        pod_name=row.pod_name,
        outcome=row.outcome or "",
        wake_outcome=row.wake_outcome or "",
        reason=row.reason or "",
        pod_id=row.pod_id or "",
        gpu_id=row.gpu_id or "",
        price_per_hour=row.price_per_hour or 0.0,
        candidates_considered=row.candidates_considered or 0,
        last_provider_status=row.last_provider_status or 0,
        trigger=row.trigger,
    )
    stamp(record.requested_at, row.requested_at)
    if row.completed_at is not None:
        stamp(record.completed_at, row.completed_at)
    return record


async def observe_volume(
    client: RunPodV2Client, pod: PodOptions, records: PodRepository
) -> tuple[VolumeLookup, list[PodObservation]]:
    """The volume's pods; a pod the record bills that a readable lookup no longer lists is checked for gone (the
    record read beside RunPod's list, so the check adds no wait while every pod is listed)."""
    (volume, observations), billing = await asyncio.gather(
        client.observe_volume(pod.volume_id), billing_pods(records, pod.name)
    )
    await close_gone(client, records, pod.name, volume, billing)
    return volume, list(observations)


async def build_view(
    client: RunPodV2Client, records: PodRepository, pod: PodOptions, now: datetime
) -> pods_pb2.GetPodResponse:
    configured = client.is_configured and pod.configured
    observations: list[PodObservation] = []
    volume: VolumeLookup | None = None
    if configured:
        volume, observations = await observe_volume(client, pod, records)
    view = view_volume_pods(volume, observations)
    response = pods_pb2.GetPodResponse(
        name=pod.name,
        configured=view.configured,
        status=str(view.status),
        is_running=view.is_running,
        pod_id=view.pod_id or "",
        proxy_url=pod.proxy_url(view.pod_id) if view.pod_id else "",
        pods_on_volume=view.pods_on_volume,
        datacenter=pod.datacenter_id,
        lookup=str(view.lookup),
    )

    async def ready_since() -> datetime | None:
        # null while booting or down (pod-control seed: Surface): a down pod's old report says nothing about now
        return await records.readiness(pod.name, view.pod_id) if view.pod_id and view.is_running else None

    readable = True
    try:
        # each read is bounded by the repository's read timeout (STORE_READ_TIMEOUT_SECONDS), side by side
        readiness, newest = await asyncio.gather(ready_since(), records.newest_wake(pod.name))
    except Exception as error:
        # GET answers 200 whatever is down (pod-control seed: Surface); without the store it reports RunPod's view alone
        log.warning("pod %s: records unreadable (%s); readySince and lastWake left out", pod.name, type(error).__name__)
        readiness, newest, readable = None, None, False
    ready = readiness is not None
    if readiness is not None:
        stamp(response.ready_since, readiness)
    if newest is not None:
        response.last_wake.CopyFrom(wake_record(newest))
    if view.pod_id is not None and not ready and view.status in _BOOTING:
        chosen = next((o for o in observations if o.pod_id == view.pod_id), None)
        gpu_id = (chosen.gpu_id if chosen else None) or (newest.gpu_id if newest else None) or ""
        since = newest.requested_at if newest is not None else now
        boots: tuple[float, ...] = ()
        if readable:  # a store that just failed to answer is not waited on twice in one GET
            try:
                boots = select_boot_durations(await records.recent_boots(pod.name), gpu_id or None)
            except Exception as error:
                log.warning("pod %s: boot history unreadable (%s); no ETA", pod.name, type(error).__name__)
        eta = estimate_eta(boots, (now - since).total_seconds())
        if eta is not None:
            response.eta_seconds = round(eta, 1)
    return response
