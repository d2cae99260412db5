"""The simulator's GPU catalogue and network volumes, defaulting to the 2026-09-11 incident (rig-conductor#2093).

The weight-cache volume sits in EU-RO-1. There the catalogue lists an RTX PRO 4500 cheaply but a create on it
answers 400 (listed, no real capacity), so under the 1.00 USD/h code-default cap the wake has one candidate
and fails Exhausted; at the deployed 2.00 cap the walk falls through to the A100 80GB PCIe at 1.59 and
succeeds, exactly as the second wake did. MI300X and RTX PRO 6000 are capable but above 2.00 only at the old
cap ("PriceAboveMaximum"); the L40S (1.09) has no capacity in EU-RO-1, and the 24 GB cards sit below the
32 GB VRAM floor.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

AVAILABILITY_LEVELS = ("NONE", "LOW", "MEDIUM", "HIGH")
GPU_MANUFACTURERS = ("NVIDIA", "AMD", "UNKNOWN")  # the spec's GpuManufacturer enum
_COUNTRIES = {"RO": "Romania", "SE": "Sweden", "TX": "Texas", "KS": "Kansas", "MTL": "Montreal", "CA": "California"}


def datacenter_name(datacenter_id: str) -> str:
    """A data center's human-readable name as RunPod writes them ("US-TX-3" → "US Texas 3")."""
    parts = datacenter_id.split("-")
    return " ".join(_COUNTRIES.get(part, part) for part in parts)


DEFAULT_VOLUME_ID = "bjn7d94ej9"
DEFAULT_DATACENTER_ID = "EU-RO-1"
DEFAULT_TEMPLATE_ID = "cnz5fxyadi"


@dataclass(frozen=True, slots=True, kw_only=True)
class SimDatacenterStock:
    """SimDatacenterStock is what the catalogue shows for one GPU in one datacenter, and what a create gets.

    `has_capacity` False with a non-NONE availability is the incident's "listed, but 400 on create".
    """

    id: str
    availability: str
    has_capacity: bool = True

    @property
    def can_place(self) -> bool:
        return self.has_capacity and self.availability != "NONE"


@dataclass(frozen=True, slots=True, kw_only=True)
class SimGpu:
    id: str
    name: str
    manufacturer: str
    memory_gb: int | None
    secure_price: float | None
    community_price: float | None = None
    max_count: int = 8
    datacenters: tuple[SimDatacenterStock, ...] = field(default_factory=tuple)
    pool: str | None = None  # its serverless GPU pool: "Null if GPU is not in a serverless pool"

    @property
    def availability(self) -> str:
        levels = [AVAILABILITY_LEVELS.index(dc.availability) for dc in self.datacenters]
        return AVAILABILITY_LEVELS[max(levels, default=0)]

    def stock_in(self, datacenter_id: str) -> SimDatacenterStock | None:
        return next((dc for dc in self.datacenters if dc.id == datacenter_id), None)

    def to_v2(self, *, with_availability: bool) -> dict[str, object]:
        """to_v2 is the GET /v2/catalog/gpus row, the spec's `GpuType` (v2.9.0) with every field it requires;
        `has_capacity` stays private to the simulator. A cloud that does not offer the GPU says so in its flag
        (`secure`, `community`), never by a null price: the spec's prices are numbers."""
        manufacturer = self.manufacturer.upper()
        row: dict[str, object] = {
            "id": self.id,
            "name": self.name,
            "pool": self.pool,
            "manufacturer": manufacturer if manufacturer in GPU_MANUFACTURERS else "UNKNOWN",
            "memory": self.memory_gb,
            "secure": self.secure_price is not None,
            "community": self.community_price is not None,
            "price": {"secure": self.secure_price or 0.0, "community": self.community_price or 0.0},
            "maxCount": {"secure": self.max_count, "community": self.max_count},
        }
        if with_availability:
            row["availability"] = self.availability
            row["dataCenters"] = [
                {"id": dc.id, "name": datacenter_name(dc.id), "availability": dc.availability}
                for dc in self.datacenters
            ]
        return row

    def to_control(self) -> dict[str, object]:
        row = self.to_v2(with_availability=True)
        row["dataCenters"] = [
            {"id": dc.id, "name": datacenter_name(dc.id), "availability": dc.availability,
             "hasCapacity": dc.has_capacity}
            for dc in self.datacenters
        ]  # fmt: skip
        return row


def gpu_from_control(row: Mapping[str, object]) -> SimGpu:
    """gpu_from_control reads a catalogue row from the /_sim control API (the v2 row plus `hasCapacity`)."""
    gpu_id = row.get("id")
    if not isinstance(gpu_id, str) or not gpu_id:
        raise ValueError("a catalogue row needs a string id")
    price = row.get("price")
    prices = price if isinstance(price, Mapping) else {}
    stocks: list[SimDatacenterStock] = []
    datacenters = row.get("dataCenters", [])
    if not isinstance(datacenters, list):
        raise ValueError(f"{gpu_id}: dataCenters must be a list")
    for dc in datacenters:
        if not isinstance(dc, Mapping) or not isinstance(dc.get("id"), str):
            raise ValueError(f"{gpu_id}: each datacenter needs a string id")
        availability = dc.get("availability", "NONE")
        if availability not in AVAILABILITY_LEVELS:
            raise ValueError(f"{gpu_id}: availability must be one of {AVAILABILITY_LEVELS}")
        stocks.append(
            SimDatacenterStock(
                id=str(dc["id"]), availability=str(availability), has_capacity=bool(dc.get("hasCapacity", True))
            )
        )
    memory = row.get("memory")
    name = row.get("name")
    manufacturer = row.get("manufacturer")
    max_count = row.get("maxCount")
    pool = row.get("pool")
    return SimGpu(
        id=gpu_id,
        name=name if isinstance(name, str) else gpu_id,
        manufacturer=manufacturer if isinstance(manufacturer, str) else gpu_id.split(" ", 1)[0],
        memory_gb=int(memory) if isinstance(memory, int | float) and not isinstance(memory, bool) else None,
        # a cloud flagged false does not offer the GPU, whatever number its price carries
        secure_price=_price(prices.get("secure")) if row.get("secure") is not False else None,
        community_price=_price(prices.get("community")) if row.get("community") is not False else None,
        max_count=int(max_count) if isinstance(max_count, int) and not isinstance(max_count, bool) else 8,
        datacenters=tuple(stocks),
        pool=pool if isinstance(pool, str) and pool else None,
    )


def _price(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _stock(*pairs: tuple[str, str], no_capacity_in: tuple[str, ...] = ()) -> tuple[SimDatacenterStock, ...]:
    return tuple(
        SimDatacenterStock(id=dc, availability=level, has_capacity=dc not in no_capacity_in) for dc, level in pairs
    )


def default_catalogue() -> tuple[SimGpu, ...]:
    return (
        SimGpu(
            id="NVIDIA RTX PRO 4500 Blackwell",
            name="RTX PRO 4500",
            manufacturer="NVIDIA",
            memory_gb=32,
            secure_price=0.64,
            datacenters=_stock(("EU-RO-1", "LOW"), ("US-KS-2", "MEDIUM"), no_capacity_in=("EU-RO-1",)),
        ),
        SimGpu(
            id="NVIDIA A100 80GB PCIe",
            pool="AMPERE_80",
            name="A100 PCIe",
            manufacturer="NVIDIA",
            memory_gb=80,
            secure_price=1.59,
            community_price=1.19,
            datacenters=_stock(("EU-RO-1", "MEDIUM"), ("US-TX-3", "HIGH")),
        ),
        SimGpu(
            id="AMD Instinct MI300X OAM",
            name="MI300X",
            manufacturer="AMD",
            memory_gb=192,
            secure_price=2.49,
            datacenters=_stock(("EU-RO-1", "LOW")),
        ),
        SimGpu(
            id="NVIDIA RTX PRO 6000 Blackwell Server Edition",
            name="RTX PRO 6000",
            manufacturer="NVIDIA",
            memory_gb=96,
            secure_price=1.84,
            datacenters=_stock(("EU-RO-1", "LOW"), ("CA-MTL-1", "MEDIUM")),
        ),
        SimGpu(
            id="NVIDIA L40S",
            pool="ADA_48_PRO",
            name="L40S",
            manufacturer="NVIDIA",
            memory_gb=48,
            secure_price=1.09,
            community_price=0.79,
            datacenters=_stock(("EU-RO-1", "NONE"), ("US-TX-3", "HIGH"), ("CA-MTL-1", "LOW")),
        ),
        SimGpu(
            id="NVIDIA GeForce RTX 4090",
            pool="ADA_24",
            name="RTX 4090",
            manufacturer="NVIDIA",
            memory_gb=24,
            secure_price=0.69,
            community_price=0.34,
            datacenters=_stock(("EU-RO-1", "HIGH"), ("US-KS-2", "HIGH")),
        ),
        SimGpu(
            id="NVIDIA RTX A5000",
            pool="AMPERE_24",
            name="RTX A5000",
            manufacturer="NVIDIA",
            memory_gb=24,
            secure_price=0.27,
            community_price=0.16,
            datacenters=_stock(("EU-RO-1", "MEDIUM"), ("EU-SE-1", "HIGH")),
        ),
        SimGpu(
            id="NVIDIA H100 80GB HBM3",
            name="H100 SXM",
            manufacturer="NVIDIA",
            memory_gb=80,
            secure_price=2.99,
            datacenters=_stock(("US-TX-3", "MEDIUM"), ("US-KS-2", "LOW")),
        ),
        SimGpu(
            id="NVIDIA RTX A6000",
            pool="AMPERE_48",
            name="RTX A6000",
            manufacturer="NVIDIA",
            memory_gb=48,
            secure_price=0.49,
            community_price=0.33,
            datacenters=_stock(("US-KS-2", "HIGH"), ("CA-MTL-1", "MEDIUM")),
        ),
    )


def default_volumes() -> dict[str, str]:
    """default_volumes maps network volume id → datacenter: the qwen weight cache, and one elsewhere."""
    return {DEFAULT_VOLUME_ID: DEFAULT_DATACENTER_ID, "agv6w2qcg7": "US-TX-3"}
