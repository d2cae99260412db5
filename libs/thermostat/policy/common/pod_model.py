"""Value types that the pod policies decide over, in RunPod REST v2 terms.

The provider client builds them from HTTP answers and the policies read them; neither side sees the other's
representation. Every lookup is tri-state because "the list failed" must never read as "nothing there"
(rig-conductor#1998: an unreadable answer that collapsed to None billed a second pod next to a live one).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class PodStatus(StrEnum):
    """PodStatus is the v2 `status` enum, plus UNKNOWN for a value we cannot read."""

    PROVISIONING = "PROVISIONING"
    STARTING = "STARTING"
    RUNNING = "RUNNING"
    EXITED = "EXITED"
    ERROR = "ERROR"
    TERMINATED = "TERMINATED"
    UNKNOWN = "UNKNOWN"


class Lookup(StrEnum):
    """Lookup says whether an answer about a pod (or a volume's pods) could be read at all."""

    FOUND = "FOUND"
    NOT_FOUND = "NOT_FOUND"
    UNREADABLE = "UNREADABLE"


class Availability(StrEnum):
    """Availability is the catalogue's capacity level; absent reads as NONE."""

    NONE = "NONE"
    LOW = "LOW"
    MEDIUM = "MEDIUM"
    HIGH = "HIGH"

    @property
    def rank(self) -> int:
        return _AVAILABILITY_RANK[self]


_AVAILABILITY_RANK = {Availability.NONE: 0, Availability.LOW: 1, Availability.MEDIUM: 2, Availability.HIGH: 3}


@dataclass(frozen=True, slots=True, kw_only=True)
class PodObservation:
    """PodObservation is one GET /v2/pods/{id}, read.

    `status` is RUNNING only when the runtime block reports uptime > 0; a RUNNING pod whose runtime is
    null, {} or uptime 0 is observed as STARTING (the GPU may still be attaching). `gpu_count` is the
    number of GPUs actually attached (runtime.gpus[]), falling back to gpu.count when that array is absent.
    `start_attempted` is the caller's memory (the wake service sets it after it POSTed a start).
    """

    lookup: Lookup
    pod_id: str
    status: PodStatus = PodStatus.UNKNOWN
    gpu_count: int = 0
    start_attempted: bool = False
    datacenter_id: str | None = None
    gpu_id: str | None = None
    cost_per_hour: float | None = None
    volume_ids: tuple[str, ...] = ()

    @property
    def is_serving(self) -> bool:
        """A pod serves only when RUNNING with at least one GPU attached."""
        return self.lookup is Lookup.FOUND and self.status is PodStatus.RUNNING and self.gpu_count >= 1


@dataclass(frozen=True, slots=True, kw_only=True)
class VolumeLookup:
    """VolumeLookup is every pod whose mounts.network[].volumeId is ours, in list order, each id once.

    NOT_FOUND (an empty, readable list) is the only affirmative "no pod is attached to our volume".
    """

    lookup: Lookup
    pod_ids: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class DatacenterAvailability:
    id: str
    availability: Availability


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuCatalogEntry:
    """GpuCatalogEntry is one row of GET /v2/catalog/gpus?include=AVAILABILITY&product=POD."""

    id: str
    secure_price: float | None
    availability: Availability
    datacenters: tuple[DatacenterAvailability, ...] = ()
    vram_gb: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class CreateResult:
    """CreateResult is one POST /v2/pods attempt as the create-outcome walk consumes it.

    `http_status` passes through untouched (0 for a transport failure: a create that timed out may have
    placed a pod, so it is never retried blind). `retry_after_seconds` comes from a 429's Retry-After.
    """

    http_status: int
    pod_id: str | None = None
    retry_after_seconds: float | None = None
    detail: str | None = None
    datacenter_id: str | None = None  # the answer's dataCenterId: None until the scheduler places the pod


@dataclass(frozen=True, slots=True, kw_only=True)
class ListedPod:
    """ListedPod is one live (not TERMINATED) pod of the account as GET /pods lists it."""

    id: str
    name: str
    status: str
    volume_ids: tuple[str, ...] = ()
