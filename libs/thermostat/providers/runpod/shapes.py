"""RunPod REST v2 JSON shapes, read into the policy package's value types.

Pure functions over already-decoded bodies: no I/O, so every rule below is testable without a socket. Each
reader is fail-closed — a shape it cannot read becomes UNKNOWN / UNREADABLE / empty, never an affirmative
"absent" (rig-conductor#1998: a failed read that collapsed to "no pod" billed a second pod).
"""

from __future__ import annotations

import json
import math

from thermostat.policy.common.pod_model import (
    Availability,
    DatacenterAvailability,
    GpuCatalogEntry,
    ListedPod,
    Lookup,
    PodObservation,
    PodStatus,
)

PROBLEM_JSON = "application/problem+json"

_STATUSES = {status.value: status for status in PodStatus if status is not PodStatus.UNKNOWN}
_AVAILABILITIES = {level.value: level for level in Availability}


def _number(value: object) -> float | None:
    # bool is an int subclass; a `true` where a number belongs is a malformed body, not 1.
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def _availability(value: object) -> Availability:
    return _AVAILABILITIES.get(value, Availability.NONE) if isinstance(value, str) else Availability.NONE


def _datacenters(value: object) -> tuple[DatacenterAvailability, ...]:
    if not isinstance(value, list):
        return ()
    return tuple(
        DatacenterAvailability(id=item["id"], availability=_availability(item.get("availability")))
        for item in value
        if isinstance(item, dict) and isinstance(item.get("id"), str)
    )


def _vram_gb(value: object) -> int | None:
    number = _number(value)
    return int(number) if number is not None and number >= 0 else None


def read_catalog(body: object) -> tuple[GpuCatalogEntry, ...]:
    """read_catalog reads `gpus[]` of GET /catalog/gpus; a body without that list is an empty catalogue."""
    gpus = body.get("gpus") if isinstance(body, dict) else None
    if not isinstance(gpus, list):
        return ()
    entries: list[GpuCatalogEntry] = []
    for gpu in gpus:
        if not isinstance(gpu, dict) or not isinstance(gpu.get("id"), str):
            continue
        price = gpu.get("price")
        # the spec's prices are numbers, never null: a GPU secure cloud does not offer is `secure: false`, and
        # the figure beside it (0) is no price to rank or cap
        offered = gpu.get("secure") is not False
        entries.append(
            GpuCatalogEntry(
                id=gpu["id"],
                secure_price=_number(price.get("secure")) if isinstance(price, dict) and offered else None,
                availability=_availability(gpu.get("availability")),
                datacenters=_datacenters(gpu.get("dataCenters")),
                vram_gb=_vram_gb(gpu.get("memory")),
            )
        )
    return tuple(entries)


def _volume_ids(pod: dict[str, object]) -> tuple[str, ...]:
    mounts = pod.get("mounts")
    network = mounts.get("network") if isinstance(mounts, dict) else None
    if not isinstance(network, list):
        return ()
    ids: list[str] = []
    for mount in network:
        volume_id = mount.get("volumeId") if isinstance(mount, dict) else None
        if isinstance(volume_id, str) and volume_id not in ids:
            ids.append(volume_id)
    return tuple(ids)


def _observed_status(raw: object, runtime: object) -> PodStatus:
    status = _STATUSES.get(raw, PodStatus.UNKNOWN) if isinstance(raw, str) else PodStatus.UNKNOWN
    if status is not PodStatus.RUNNING:
        return status
    # The pod-control seed's "Hard requirement for PR 2": RUNNING flips before the GPU is attached; reading that as
    # Running with 0 GPUs makes the wake create a replacement — two pods billed. Only a live uptime is Running.
    uptime = _number(runtime.get("uptime")) if isinstance(runtime, dict) else None
    return PodStatus.RUNNING if uptime is not None and uptime > 0 else PodStatus.STARTING


def _gpu_count(runtime: object, gpu: object) -> int:
    attached = runtime.get("gpus") if isinstance(runtime, dict) else None
    if isinstance(attached, list):
        return len(attached)
    count = _number(gpu.get("count")) if isinstance(gpu, dict) else None
    return int(count) if count is not None and count >= 0 else 0


def read_pod(pod_id: str, body: object) -> PodObservation:
    """read_pod reads a 2xx GET /pods/{id}; the pod answered, so even an unreadable body is FOUND+UNKNOWN."""
    if not isinstance(body, dict):
        return PodObservation(lookup=Lookup.FOUND, pod_id=pod_id, status=PodStatus.UNKNOWN)
    runtime = body.get("runtime")
    gpu = body.get("gpu")
    datacenter = body.get("dataCenterId")
    gpu_id = gpu.get("id") if isinstance(gpu, dict) else None
    return PodObservation(
        lookup=Lookup.FOUND,
        pod_id=pod_id,
        status=_observed_status(body.get("status"), runtime),
        gpu_count=_gpu_count(runtime, gpu),
        datacenter_id=datacenter if isinstance(datacenter, str) else None,
        gpu_id=gpu_id if isinstance(gpu_id, str) else None,
        cost_per_hour=_number(body.get("cost")),
        volume_ids=_volume_ids(body),
    )


def read_volume_pods(body: object, volume_id: str) -> tuple[tuple[str, dict[str, object]], ...] | None:
    """read_volume_pods lists (id, pod object) for every pod mounting `volume_id`, in list order, each id once;
    None when the list is unreadable.

    A listed pod we cannot read (not an object, or ours without a string id) makes the whole list unreadable:
    skipping it could turn "our pod is there" into the affirmative NOT_FOUND that gates a create.
    """
    pods = body.get("pods") if isinstance(body, dict) else None
    if not isinstance(pods, list):
        return None
    found: dict[str, dict[str, object]] = {}
    for pod in pods:
        if not isinstance(pod, dict):
            return None
        if volume_id not in _volume_ids(pod):
            continue
        pod_id = pod.get("id")
        if not isinstance(pod_id, str) or not pod_id:
            return None
        found.setdefault(pod_id, pod)
    return tuple(found.items())


def needs_observing_by_id(pod: dict[str, object]) -> bool:
    """A RUNNING list entry with no `runtime` key at all (absent, not null) says nothing about its uptime or
    GPUs: read from the list it would be STARTING, so the pod is observed by id as the pod-control seed does. A null
    runtime is an answer (not up yet) and is read as it stands."""
    return pod.get("status") == "RUNNING" and "runtime" not in pod


def read_pods_on_volume(body: object, volume_id: str) -> tuple[str, ...] | None:
    """read_pods_on_volume lists the ids mounting `volume_id`, in list order; None when the list is unreadable."""
    pods = read_volume_pods(body, volume_id)
    return None if pods is None else tuple(pod_id for pod_id, _ in pods)


def media_type(content_type: str | None) -> str:
    return (content_type or "").split(";", 1)[0].strip().lower()


def decode_json(content: bytes) -> object | None:
    """decode_json returns the decoded body, or None for anything that is not JSON."""
    try:
        decoded: object = json.loads(content)
    except (ValueError, UnicodeDecodeError):
        return None
    return decoded


def is_problem_not_found(content_type: str | None, content: bytes) -> bool:
    """RunPod's NotFoundError is problem+json with status 404; a bare 404 (a proxy page, a base URL missing
    /v2) says nothing about the pod and must stay UNREADABLE."""
    if media_type(content_type) != PROBLEM_JSON:
        return False
    body = decode_json(content)
    status = body.get("status") if isinstance(body, dict) else None
    return isinstance(status, int) and not isinstance(status, bool) and status == 404


def problem_detail(content: bytes, *, limit: int = 500) -> str | None:
    """The problem's `detail` (else its `title`), followed by its `errors` when it lists them: a 422's detail is
    the generic "Request validation failed." and the violations are in `errors` (spec v2.9.0, ErrorResponse)."""
    body = decode_json(content)
    detail = body.get("detail") if isinstance(body, dict) else None
    if not isinstance(detail, str) or not detail:
        title = body.get("title") if isinstance(body, dict) else None
        detail = title if isinstance(title, str) and title else None
    errors = body.get("errors") if isinstance(body, dict) else None
    listed = [error for error in errors if isinstance(error, str) and error] if isinstance(errors, list) else []
    if listed:
        detail = f"{detail or 'invalid request'} ({'; '.join(listed)})"
    return detail[:limit] if detail is not None else None


def created_pod_id(content: bytes) -> str | None:
    body = decode_json(content)
    pod_id = body.get("id") if isinstance(body, dict) else None
    return pod_id if isinstance(pod_id, str) and pod_id else None


def read_pods_listed(body: object) -> tuple[ListedPod, ...] | None:
    """Every listed pod not TERMINATED, with its name, status and volumes; None when the list is unreadable."""
    pods = body.get("pods") if isinstance(body, dict) else None
    if not isinstance(pods, list):
        return None
    return tuple(
        ListedPod(
            id=pod["id"],
            name=pod["name"],
            status=status if isinstance(status := pod.get("status"), str) else "",
            volume_ids=_volume_ids(pod),
        )
        for pod in pods
        if isinstance(pod, dict)
        and pod.get("status") != "TERMINATED"
        and isinstance(pod.get("id"), str)
        and pod["id"]
        and isinstance(pod.get("name"), str)
    )


def read_pod_ids_named(body: object, name: str) -> tuple[str, ...] | None:
    """The ids of listed pods named exactly `name` and not TERMINATED; None when the list is unreadable."""
    pods = body.get("pods") if isinstance(body, dict) else None
    if not isinstance(pods, list):
        return None
    return tuple(
        pod["id"]
        for pod in pods
        if isinstance(pod, dict)
        and pod.get("name") == name
        and pod.get("status") != "TERMINATED"
        and isinstance(pod.get("id"), str)
        and pod["id"]
    )


def created_pod_datacenter(content: bytes) -> str | None:
    """The created pod's dataCenterId; None until the scheduler has placed it (or when the answer lacks it)."""
    body = decode_json(content)
    datacenter = body.get("dataCenterId") if isinstance(body, dict) else None
    return datacenter if isinstance(datacenter, str) and datacenter else None


def read_retry_after(value: str | None) -> float | None:
    """Retry-After in delta-seconds; an HTTP-date or junk is ignored (the caller then uses its own interval)."""
    if value is None:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        return None
    return seconds if math.isfinite(seconds) and seconds >= 0 else None
