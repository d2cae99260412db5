"""Which GPUs may carry a replacement pod, cheapest first (pod-control seed: Wake part 1a, GpuSelectionPolicy.Select).

The catalogue (GET /v2/catalog/gpus?include=AVAILABILITY&product=POD) is filtered client-side. A GPU is a
candidate only when every check passes, in this order — the first failing check is its exclusion reason:

    in our datacenter          dataCenters[].id == the volume's datacenter     else NotInDataCenter
    capacity there             that datacenter's availability != NONE          else NoCapacity
    capable                    allowlist set:   id in it (case-insensitive)    else NotAllowlisted
                               allowlist unset: VRAM unknown or >= floor       else BelowMinVram
    priced within the cap      price.secure known, finite, >= 0 and <= cap     else PriceUnknown /
                                                                                    PriceAboveMaximum

The allowlist is authoritative for capability and replaces the VRAM floor (an allowlisted 24 GB card is
eligible); it never replaces the price cap. Unknown VRAM passes because the catalogue may carry none, so the
default deployment ranks on price alone. Candidates are ordered cheapest first, then higher availability in
our datacenter, then id.

The price cap is the wake's single point of failure (2026-09-11, rig-conductor#2093): the datacenter pin
and the VRAM floor left two capable cards and the unset 1.00 default rejected both, so the wake failed in
12 s while the cockpit said "waking". Every exclusion is therefore kept and named in `summary()`, which
becomes the 409 detail.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from thermostat.policy.common.pod_model import Availability, GpuCatalogEntry
from thermostat.policy.common.pod_options import GpuCriteria


class GpuExclusionReason(StrEnum):
    """GpuExclusionReason is the first guard a catalogue row failed."""

    NOT_IN_DATACENTER = "NotInDataCenter"
    NO_CAPACITY = "NoCapacity"
    NOT_ALLOWLISTED = "NotAllowlisted"
    BELOW_MIN_VRAM = "BelowMinVram"
    PRICE_UNKNOWN = "PriceUnknown"
    PRICE_ABOVE_MAXIMUM = "PriceAboveMaximum"


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuCandidate:
    """GpuCandidate is one GPU the create walk may post, with what the wake result reports about it."""

    gpu_id: str
    price_per_hour: float
    availability: Availability
    vram_gb: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuExclusion:
    gpu_id: str
    reason: GpuExclusionReason


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuSelection:
    """GpuSelection is the ranked candidates plus every excluded GPU, in catalogue order."""

    candidates: tuple[GpuCandidate, ...]
    excluded: tuple[GpuExclusion, ...]

    def summary(self) -> str:
        """One "<gpu id>: <reason>" line per excluded GPU, every one named (the 409 detail, #2093)."""
        if not self.candidates and not self.excluded:
            return "the GPU catalogue listed no GPUs"
        return "\n".join(f"{e.gpu_id}: {e.reason}" for e in self.excluded)


def select_gpus(catalog: Iterable[GpuCatalogEntry], criteria: GpuCriteria) -> GpuSelection:
    """Rank the catalogue's eligible GPUs cheapest first and name why each other GPU was left out."""
    allowlist = frozenset(_fold(name) for name in criteria.gpu_allowlist if name.strip())
    candidates: list[GpuCandidate] = []
    excluded: list[GpuExclusion] = []
    for entry in catalog:
        judged = _judge(entry, criteria, allowlist)
        if isinstance(judged, GpuCandidate):
            candidates.append(judged)
        else:
            excluded.append(GpuExclusion(gpu_id=entry.id, reason=judged))
    candidates.sort(key=lambda c: (c.price_per_hour, -c.availability.rank, c.gpu_id))
    return GpuSelection(candidates=tuple(candidates), excluded=tuple(excluded))


def _judge(
    entry: GpuCatalogEntry, criteria: GpuCriteria, allowlist: frozenset[str]
) -> GpuCandidate | GpuExclusionReason:
    availability = _availability_in(entry, criteria.datacenter_id)
    if availability is None:
        return GpuExclusionReason.NOT_IN_DATACENTER
    if availability is Availability.NONE:
        return GpuExclusionReason.NO_CAPACITY
    if allowlist:
        if _fold(entry.id) not in allowlist:
            return GpuExclusionReason.NOT_ALLOWLISTED
    elif entry.vram_gb is not None and entry.vram_gb < criteria.min_vram_gb:
        return GpuExclusionReason.BELOW_MIN_VRAM
    price = entry.secure_price
    # A price that can't be compared can't be bounded, so it never passes the cap.
    if price is None or not math.isfinite(price) or price < 0:
        return GpuExclusionReason.PRICE_UNKNOWN
    if price > criteria.max_price_per_hour:
        return GpuExclusionReason.PRICE_ABOVE_MAXIMUM
    return GpuCandidate(gpu_id=entry.id, price_per_hour=price, availability=availability, vram_gb=entry.vram_gb)


def _availability_in(entry: GpuCatalogEntry, datacenter_id: str) -> Availability | None:
    for datacenter in entry.datacenters:
        if datacenter.id == datacenter_id:
            return datacenter.availability
    return None


def _fold(name: str) -> str:
    return name.strip().casefold()
