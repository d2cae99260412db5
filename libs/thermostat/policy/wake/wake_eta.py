"""How long until a woken pod is ready, estimated from the boots actually measured for it.

The chat promised "about 9 minutes" unconditionally (READY_BY_MIN, from one 2026-09-09 wake); the next
measured wake, on an A100, was ready in 2 min 52 s, and a failed wake was still announced as "~9 minutes"
fifteen minutes later (#2093). Wake → ready time is a property of the GPU that happened to be allocated, so
the estimate is the median of the recent recorded wake → ready durations for that pod and GPU type, minus
the time already waited, floored at 0 — and None when there is no history, rather than a made-up number.

Before a GPU is placed the pod's whole history is used; once the GPU type is known only its own boots
count, and a type never measured has no estimate. The median (not the mean) keeps one slow outlier boot
from moving the promise. Records are oldest first; only the last RECENT_BOOTS count.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

RECENT_BOOTS = 5


@dataclass(frozen=True, slots=True, kw_only=True)
class BootRecord:
    """BootRecord is one measured wake → ready duration of the pod, on the GPU type it ran on."""

    gpu_id: str | None
    wake_to_ready_seconds: float


def select_boot_durations(records: Sequence[BootRecord], gpu_id: str | None) -> tuple[float, ...]:
    """The durations that predict this wake: the GPU type's own boots, or every boot while it is unknown."""
    return tuple(r.wake_to_ready_seconds for r in records if gpu_id is None or r.gpu_id == gpu_id)


def estimate_eta(
    boot_durations: Sequence[float], elapsed_since_wake: float, *, recent: int = RECENT_BOOTS
) -> float | None:
    """Seconds until ready: median of the last `recent` usable durations minus elapsed, ≥ 0; None without any."""
    usable = [d for d in boot_durations if math.isfinite(d) and d >= 0]
    if not usable:
        return None
    median = statistics.median(usable[-recent:])
    return max(0.0, float(median) - max(0.0, elapsed_since_wake))
