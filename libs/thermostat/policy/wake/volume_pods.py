"""Which pod on our volume GET reports, and the fields it derives (pod-control seed: Surface, RunPodVolumePods.Rank).

GET /v2/pods order is unspecified, so a stale Exited pod may be listed before its replacement. The reported
pod is the serving one (RUNNING with a GPU), else the in-flight one (PROVISIONING / STARTING), else the
first listed. Rig-E reads its inference endpoint from this answer, so ranking the stale pod first would
point it at a dead proxy.

    lookup        configured  status                                  isRunning
    UNCONFIGURED  false       UNKNOWN (no RunPod call made)           false
    UNREADABLE    true        UNKNOWN — a control-plane blip, not a verdict    false
    NOT_FOUND     true        UNKNOWN (no pod on the volume)          false
    FOUND         true        the ranked pod's status, UNKNOWN when its observe could not be read
                                                                      RUNNING with >= 1 GPU
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from thermostat.policy.common.pod_model import Lookup, PodObservation, PodStatus, VolumeLookup

_IN_FLIGHT = frozenset({PodStatus.PROVISIONING, PodStatus.STARTING})


class LookupView(StrEnum):
    FOUND = "FOUND"
    NOT_FOUND = "NOT_FOUND"
    UNREADABLE = "UNREADABLE"
    UNCONFIGURED = "UNCONFIGURED"


@dataclass(frozen=True, slots=True, kw_only=True)
class VolumePodsView:
    """VolumePodsView is the policy part of GET /api/pods/{name}; proxyUrl and readySince are the caller's."""

    configured: bool
    lookup: LookupView
    status: PodStatus
    is_running: bool
    pod_id: str | None
    pods_on_volume: int


def rank(observations: Sequence[PodObservation]) -> PodObservation | None:
    """The serving pod, else the in-flight one, else the first; None when there is no pod."""
    for observation in observations:
        if observation.is_serving:
            return observation
    for observation in observations:
        if observation.lookup is Lookup.FOUND and observation.status in _IN_FLIGHT:
            return observation
    return observations[0] if observations else None


def view_volume_pods(volume: VolumeLookup | None, observations: Sequence[PodObservation]) -> VolumePodsView:
    """Derive GET's fields; `volume` None means unconfigured. `observations` are the volume's pods, in order."""
    if volume is None:
        return _empty(configured=False, lookup=LookupView.UNCONFIGURED)
    if volume.lookup is Lookup.UNREADABLE:
        return _empty(configured=True, lookup=LookupView.UNREADABLE)
    if volume.lookup is Lookup.NOT_FOUND or not volume.pod_ids:
        return _empty(configured=True, lookup=LookupView.NOT_FOUND)
    chosen = rank(observations)
    if chosen is None:
        return VolumePodsView(
            configured=True,
            lookup=LookupView.FOUND,
            status=PodStatus.UNKNOWN,
            is_running=False,
            pod_id=volume.pod_ids[0],
            pods_on_volume=len(volume.pod_ids),
        )
    return VolumePodsView(
        configured=True,
        lookup=LookupView.FOUND,
        status=chosen.status if chosen.lookup is Lookup.FOUND else PodStatus.UNKNOWN,
        is_running=chosen.is_serving,
        pod_id=chosen.pod_id,
        pods_on_volume=len(volume.pod_ids),
    )


def _empty(*, configured: bool, lookup: LookupView) -> VolumePodsView:
    return VolumePodsView(
        configured=configured,
        lookup=lookup,
        status=PodStatus.UNKNOWN,
        is_running=False,
        pod_id=None,
        pods_on_volume=0,
    )
