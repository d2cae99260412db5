"""GPU selection: which catalogue rows may carry a replacement pod, cheapest first (pod-control seed: Wake part 1a)."""

from __future__ import annotations

import pytest

from thermostat.policy.common.pod_model import Availability, DatacenterAvailability, GpuCatalogEntry
from thermostat.policy.common.pod_options import GpuCriteria
from thermostat.policy.wake.gpu_selection import (
    GpuExclusion,
    GpuExclusionReason,
    select_gpus,
)

OUR_DC = "EU-RO-1"


def gpu(
    gpu_id: str,
    price: float | None,
    *,
    vram: int | None = 48,
    dc: str = OUR_DC,
    dc_availability: Availability = Availability.HIGH,
    more_dcs: tuple[DatacenterAvailability, ...] = (),
) -> GpuCatalogEntry:
    return GpuCatalogEntry(
        id=gpu_id,
        secure_price=price,
        availability=dc_availability,
        datacenters=(DatacenterAvailability(id=dc, availability=dc_availability), *more_dcs),
        vram_gb=vram,
    )


def criteria(*, max_price: float = 1.00, min_vram: int = 32, allowlist: tuple[str, ...] = ()) -> GpuCriteria:
    return GpuCriteria(
        datacenter_id=OUR_DC, min_vram_gb=min_vram, max_price_per_hour=max_price, gpu_allowlist=allowlist
    )


def reasons(catalog: list[GpuCatalogEntry], crit: GpuCriteria) -> dict[str, GpuExclusionReason]:
    return {e.gpu_id: e.reason for e in select_gpus(catalog, crit).excluded}


def test_a_gpu_not_offered_in_our_datacenter_is_excluded_as_not_in_datacenter() -> None:
    """The volume pins the datacenter, so a GPU listed only elsewhere can never carry our pod."""
    catalog = [gpu("NVIDIA L40S", 0.86, dc="US-KS-2")]
    selection = select_gpus(catalog, criteria())
    assert selection.candidates == ()
    assert selection.excluded == (GpuExclusion(gpu_id="NVIDIA L40S", reason=GpuExclusionReason.NOT_IN_DATACENTER),)


def test_capacity_is_read_from_our_datacenter_not_the_global_availability() -> None:
    """A card HIGH elsewhere but NONE in EU-RO-1 has no capacity for us; the global flag is ignored."""
    entry = GpuCatalogEntry(
        id="NVIDIA L40S",
        secure_price=0.86,
        availability=Availability.HIGH,
        datacenters=(
            DatacenterAvailability(id="US-KS-2", availability=Availability.HIGH),
            DatacenterAvailability(id=OUR_DC, availability=Availability.NONE),
        ),
        vram_gb=48,
    )
    assert reasons([entry], criteria()) == {"NVIDIA L40S": GpuExclusionReason.NO_CAPACITY}


@pytest.mark.parametrize(
    ("availability", "eligible"),
    [
        pytest.param(Availability.NONE, False, id="none"),
        pytest.param(Availability.LOW, True, id="low"),
        pytest.param(Availability.MEDIUM, True, id="medium"),
        pytest.param(Availability.HIGH, True, id="high"),
    ],
)
def test_eligible_means_capacity_other_than_none_in_our_datacenter(availability: Availability, eligible: bool) -> None:
    """Any capacity level but NONE admits the card."""
    selection = select_gpus([gpu("NVIDIA L40S", 0.86, dc_availability=availability)], criteria())
    assert bool(selection.candidates) is eligible


@pytest.mark.parametrize(
    ("vram", "eligible"),
    [
        pytest.param(24, False, id="below-floor"),
        pytest.param(31, False, id="one-below-floor"),
        pytest.param(32, True, id="at-floor"),
        pytest.param(80, True, id="above-floor"),
        pytest.param(None, True, id="unknown-vram-passes"),
    ],
)
def test_vram_floor_applies_only_when_vram_is_known(vram: int | None, eligible: bool) -> None:
    """The catalogue may carry no VRAM, so unknown VRAM passes and the default ranks on price alone."""
    selection = select_gpus([gpu("card", 0.50, vram=vram)], criteria())
    assert bool(selection.candidates) is eligible
    if not eligible:
        assert reasons([gpu("card", 0.50, vram=vram)], criteria()) == {"card": GpuExclusionReason.BELOW_MIN_VRAM}


def test_an_allowlisted_24gb_card_is_eligible_because_the_allowlist_replaces_the_vram_floor() -> None:
    """The allowlist is authoritative for capability: it replaces the VRAM guard."""
    selection = select_gpus(
        [gpu("NVIDIA GeForce RTX 4090", 0.44, vram=24)], criteria(allowlist=("NVIDIA GeForce RTX 4090",))
    )
    assert [c.gpu_id for c in selection.candidates] == ["NVIDIA GeForce RTX 4090"]


def test_a_card_missing_from_a_set_allowlist_is_excluded_as_not_allowlisted() -> None:
    """With an allowlist set, a capable card outside it is kept out."""
    catalog = [gpu("NVIDIA L40S", 0.86, vram=48), gpu("NVIDIA A40", 0.40, vram=48)]
    assert reasons(catalog, criteria(allowlist=("nvidia l40s",))) == {"NVIDIA A40": GpuExclusionReason.NOT_ALLOWLISTED}


def test_allowlist_matching_ignores_case_and_surrounding_space() -> None:
    """Allowlist ids are compared case-insensitively, trimmed."""
    selection = select_gpus([gpu("NVIDIA L40S", 0.86)], criteria(allowlist=("  nvidia L40s ",)))
    assert [c.gpu_id for c in selection.candidates] == ["NVIDIA L40S"]


@pytest.mark.parametrize(
    ("price", "reason"),
    [
        pytest.param(None, GpuExclusionReason.PRICE_UNKNOWN, id="absent"),
        pytest.param(float("nan"), GpuExclusionReason.PRICE_UNKNOWN, id="nan"),
        pytest.param(float("inf"), GpuExclusionReason.PRICE_UNKNOWN, id="infinite"),
        pytest.param(-0.10, GpuExclusionReason.PRICE_UNKNOWN, id="negative"),
        pytest.param(1.01, GpuExclusionReason.PRICE_ABOVE_MAXIMUM, id="above-cap"),
    ],
)
def test_a_price_must_be_known_and_within_the_cap(price: float | None, reason: GpuExclusionReason) -> None:
    """Always a known secure price: an unreadable price can't be bounded, so it never passes."""
    assert reasons([gpu("card", price)], criteria(max_price=1.00)) == {"card": reason}


def test_the_price_cap_is_inclusive() -> None:
    """A card priced exactly at the cap is eligible."""
    assert [c.gpu_id for c in select_gpus([gpu("card", 1.00)], criteria(max_price=1.00)).candidates] == ["card"]


def test_the_price_cap_applies_to_allowlisted_cards_too() -> None:
    """The allowlist replaces only the VRAM floor, never the price cap."""
    assert reasons([gpu("card", 2.50)], criteria(max_price=2.00, allowlist=("card",))) == {
        "card": GpuExclusionReason.PRICE_ABOVE_MAXIMUM
    }


def test_candidates_rank_cheapest_first_then_higher_availability_then_id() -> None:
    """Order: price ascending, then datacenter availability descending, then id."""
    catalog = [
        gpu("b-high", 0.80, dc_availability=Availability.HIGH),
        gpu("z-cheapest", 0.40, dc_availability=Availability.LOW),
        gpu("c-low", 0.80, dc_availability=Availability.LOW),
        gpu("a-high", 0.80, dc_availability=Availability.HIGH),
        gpu("m-medium", 0.80, dc_availability=Availability.MEDIUM),
    ]
    ranked = [c.gpu_id for c in select_gpus(catalog, criteria()).candidates]
    assert ranked == ["z-cheapest", "a-high", "b-high", "m-medium", "c-low"]


def test_a_candidate_carries_its_price_vram_and_our_datacenter_availability() -> None:
    """The wake result reports the created pod's GPU and price from the chosen candidate."""
    entry = gpu(
        "NVIDIA A100 80GB PCIe",
        1.59,
        vram=80,
        dc_availability=Availability.LOW,
        more_dcs=(DatacenterAvailability(id="US-KS-2", availability=Availability.HIGH),),
    )
    (candidate,) = select_gpus([entry], criteria(max_price=2.00)).candidates
    assert (candidate.gpu_id, candidate.price_per_hour, candidate.vram_gb, candidate.availability) == (
        "NVIDIA A100 80GB PCIe",
        1.59,
        80,
        Availability.LOW,
    )


def test_every_catalogue_row_is_either_a_candidate_or_excluded_with_a_reason() -> None:
    """Nothing vanishes silently: a rejected GPU always carries its GpuExclusionReason."""
    catalog = [
        gpu("elsewhere", 0.5, dc="US-KS-2"),
        gpu("full", 0.5, dc_availability=Availability.NONE),
        gpu("small", 0.5, vram=16),
        gpu("unpriced", None),
        gpu("pricey", 3.0),
        gpu("fine", 0.5),
    ]
    selection = select_gpus(catalog, criteria())
    assert [c.gpu_id for c in selection.candidates] == ["fine"]
    assert [(e.gpu_id, e.reason) for e in selection.excluded] == [
        ("elsewhere", GpuExclusionReason.NOT_IN_DATACENTER),
        ("full", GpuExclusionReason.NO_CAPACITY),
        ("small", GpuExclusionReason.BELOW_MIN_VRAM),
        ("unpriced", GpuExclusionReason.PRICE_UNKNOWN),
        ("pricey", GpuExclusionReason.PRICE_ABOVE_MAXIMUM),
    ]


def test_an_empty_catalogue_selects_nothing_and_says_so() -> None:
    """A failed catalogue read arrives as []: no candidates, so nothing is billed, and the summary says why."""
    selection = select_gpus([], criteria())
    assert selection.candidates == ()
    assert selection.summary() == "the GPU catalogue listed no GPUs"


# The 2026-09-11 incident (rig-conductor#2093): datacenter pinned, two cards below the VRAM floor, and the
# unset price cap (1.00 code default) rejected the two capable cards with capacity. Setting 2.00 admitted
# the A100 at 1.59, and the very next wake created on it.
INCIDENT_2093 = [
    gpu("NVIDIA RTX PRO 4500 Blackwell", 0.64, vram=32, dc_availability=Availability.NONE),
    gpu("NVIDIA RTX A5000", 0.27, vram=24),
    gpu("NVIDIA GeForce RTX 4090", 0.59, vram=24),
    gpu("AMD Instinct MI300X OAM", 2.49, vram=192),
    gpu("NVIDIA RTX PRO 6000 Blackwell Server Edition", 1.79, vram=96),
    gpu("NVIDIA A100 80GB PCIe", 1.59, vram=80, dc_availability=Availability.LOW),
    gpu("NVIDIA H100 NVL", 2.79, vram=94, dc="US-KS-2"),
]


def test_incident_2093_price_cap_excludes_every_capable_card_and_the_summary_names_each() -> None:
    """With the 1.00 cap no card qualifies, and the 409 detail names every excluded GPU with its reason."""
    selection = select_gpus(INCIDENT_2093, criteria(max_price=1.00))
    assert selection.candidates == ()
    assert selection.summary().splitlines() == [
        "NVIDIA RTX PRO 4500 Blackwell: NoCapacity",
        "NVIDIA RTX A5000: BelowMinVram",
        "NVIDIA GeForce RTX 4090: BelowMinVram",
        "AMD Instinct MI300X OAM: PriceAboveMaximum",
        "NVIDIA RTX PRO 6000 Blackwell Server Edition: PriceAboveMaximum",
        "NVIDIA A100 80GB PCIe: PriceAboveMaximum",
        "NVIDIA H100 NVL: NotInDataCenter",
    ]


def test_incident_2093_raising_the_cap_to_2_picks_the_a100_cheapest_first() -> None:
    """Raising the ceiling does not raise the bill: the walk still starts at the cheapest capable card."""
    selection = select_gpus(INCIDENT_2093, criteria(max_price=2.00))
    assert [(c.gpu_id, c.price_per_hour) for c in selection.candidates] == [
        ("NVIDIA A100 80GB PCIe", 1.59),
        ("NVIDIA RTX PRO 6000 Blackwell Server Edition", 1.79),
    ]
    assert "AMD Instinct MI300X OAM: PriceAboveMaximum" in selection.summary().splitlines()
