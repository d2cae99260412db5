"""Everything the idle monitor remembers between two ticks of one volume, as a JSON-safe value.

The service persists it after every tick (and after every stop) so that a restarted or failed-over replica
continues exactly where the last one stopped: the phase and its two counters, the runtime-cap start, the
boot start used for "ready after …", and per pod its work-counter baseline, its published readiness and the
incarnation they belong to.
The pod-control seed kept all of this in process, so a conductor restart re-armed the cap and forgot readiness; here
nothing is lost.

`to_dict` writes ISO-8601 timestamps and plain numbers; `from_dict` reads them back, refusing anything
malformed (ValueError) rather than guessing — a silently reset state would re-bill a model load as idle
or forget a cap. Timestamps must be timezone-aware.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType
from typing import Any

from thermostat.policy.idle.idle_phase import Phase, PhaseCounters

STATE_VERSION = 1


@dataclass(frozen=True, slots=True, kw_only=True)
class PodMemory:
    """PodMemory is what the monitor knows about one pod's process.

    `baseline` is the work counter of its last successful scrape (None before the first, or when the
    exposition carried no counter). `ready_since` is its published readiness: when vLLM first answered
    since the pod came up. `incarnation` is the controller's incarnation of the pod when they were taken
    (None: not known), so a process that changed unseen between two ticks is told apart (`incarnation`).
    `stall_ticks` counts its consecutive in-flight scrapes without work (`stall_guard`).
    """

    baseline: float | None = None
    ready_since: datetime | None = None
    incarnation: int | None = None
    stall_ticks: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class MonitorState:
    """MonitorState is the idle monitor's memory for one volume; `pods` keeps volume-list order."""

    counters: PhaseCounters = field(default_factory=PhaseCounters)
    cap_started_at: datetime | None = None
    boot_started_at: datetime | None = None
    pods: Mapping[str, PodMemory] = field(default_factory=dict)
    # the gateway's request events seen at the last readable tick (policy/idle/request_activity); None: none yet
    requests_seen: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "pods", MappingProxyType(dict(self.pods)))

    @property
    def phase(self) -> Phase:
        return self.counters.phase

    @property
    def stall(self) -> tuple[str | None, int]:
        """The pod with the longest stall count (first in list order) and that count; (None, 0) when none."""
        pod_id, ticks = None, 0
        for candidate, memory in self.pods.items():
            if memory.stall_ticks > ticks:
                pod_id, ticks = candidate, memory.stall_ticks
        return pod_id, ticks

    @property
    def readiness(self) -> dict[str, datetime]:
        """Every pod with published readiness, and since when."""
        return {pod_id: memory.ready_since for pod_id, memory in self.pods.items() if memory.ready_since}

    def to_dict(self) -> dict[str, Any]:
        """A JSON-safe dict (ISO timestamps) that `from_dict` reads back to an equal state."""
        return {
            "version": STATE_VERSION,
            "phase": self.counters.phase.value,
            "idle_streak": self.counters.idle_streak,
            "booting_ticks": self.counters.booting_ticks,
            "cap_started_at": _iso(self.cap_started_at),
            "boot_started_at": _iso(self.boot_started_at),
            "pods": {
                pod_id: {
                    "baseline": memory.baseline,
                    "ready_since": _iso(memory.ready_since),
                    "incarnation": memory.incarnation,
                    "stall_ticks": memory.stall_ticks,
                }
                for pod_id, memory in self.pods.items()
            },
            "requests_seen": self.requests_seen,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> MonitorState:
        """Read a dict written by `to_dict`; ValueError on anything malformed."""
        if data.get("version") != STATE_VERSION:
            raise ValueError(f"unsupported monitor state version {data.get('version')!r}")
        try:
            phase = Phase(data["phase"])
        except (KeyError, ValueError) as error:
            raise ValueError(f"bad phase {data.get('phase')!r}") from error
        pods = data.get("pods")
        if not isinstance(pods, Mapping):
            raise ValueError("pods must be an object")
        return cls(
            counters=PhaseCounters(
                phase=phase,
                idle_streak=_count(data, "idle_streak"),
                booting_ticks=_count(data, "booting_ticks"),
            ),
            cap_started_at=_time(data.get("cap_started_at"), "cap_started_at"),
            boot_started_at=_time(data.get("boot_started_at"), "boot_started_at"),
            pods={str(pod_id): _pod(memory, str(pod_id)) for pod_id, memory in pods.items()},
            # absent in states written before the gateway: no baseline yet
            requests_seen=_count(data, "requests_seen") if data.get("requests_seen") is not None else None,
        )


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def _count(data: Mapping[str, Any], key: str) -> int:
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{key} must be a non-negative integer, got {value!r}")
    return value


def _time(value: Any, key: str) -> datetime | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValueError(f"{key} must be an ISO-8601 string, got {value!r}")
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError as error:
        raise ValueError(f"{key} is not ISO-8601: {value!r}") from error
    if parsed.tzinfo is None:
        raise ValueError(f"{key} has no timezone: {value!r}")
    return parsed


def _pod(memory: Any, pod_id: str) -> PodMemory:
    if not isinstance(memory, Mapping):
        raise ValueError(f"pod {pod_id} must be an object")
    baseline = memory.get("baseline")
    if baseline is not None and (
        isinstance(baseline, bool) or not isinstance(baseline, int | float) or not math.isfinite(baseline)
    ):
        raise ValueError(f"pod {pod_id} baseline must be a finite number, got {baseline!r}")
    # absent in states written before incarnations were remembered: unknown, never a reason to forget
    incarnation = memory.get("incarnation")
    if incarnation is not None and (isinstance(incarnation, bool) or not isinstance(incarnation, int)):
        raise ValueError(f"pod {pod_id} incarnation must be an integer, got {incarnation!r}")
    # absent in states written before the stall guard: no stall counted yet
    stall_ticks = memory.get("stall_ticks", 0)
    if isinstance(stall_ticks, bool) or not isinstance(stall_ticks, int) or stall_ticks < 0:
        raise ValueError(f"pod {pod_id} stall_ticks must be a non-negative integer, got {stall_ticks!r}")
    return PodMemory(
        baseline=float(baseline) if baseline is not None else None,
        ready_since=_time(memory.get("ready_since"), f"pods.{pod_id}.ready_since"),
        incarnation=incarnation,
        stall_ticks=stall_ticks,
    )
