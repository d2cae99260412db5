"""The wall-clock cap: stop every up pod once the volume has been continuously up for MAX_RUNTIME_MINUTES.

The idle streak can only see what /metrics and the control plane report. The cap is the backstop for what
they cannot: a wedged vLLM reporting a phantom busy request forever, or a long run of Unknown ticks. It is
phase-independent and runs from the first positive running/startup observation (any pod Busy, Idle,
UnreachableButRunning or Booting). Unknown never arms or resets it — a blip is not evidence either way — and
NotRunning (or an accepted stop, the Down edge) disarms it. Default 6 h; 0 disables.

The start time lives in the persisted monitor state, so unlike the pod-control seed's in-process stopwatch a restarted
or failed-over replica does not re-arm it.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from thermostat.policy.idle.pod_signal import PodSignal


def advance_cap(started_at: datetime | None, signal: PodSignal, now: datetime) -> datetime | None:
    """Arm on the first up observation, disarm on NotRunning, hold on Unknown."""
    if signal is PodSignal.NOT_RUNNING:
        return None
    if signal.is_up and started_at is None:
        return now
    return started_at


def cap_reached(started_at: datetime | None, now: datetime, max_runtime: timedelta | None) -> bool:
    """Whether an armed, enabled cap has run out."""
    return started_at is not None and max_runtime is not None and now - started_at >= max_runtime
