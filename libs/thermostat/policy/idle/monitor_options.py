"""The idle monitor's timings, read once from the environment, and the tick thresholds they imply.

    IDLE_MINUTES               15   idle window, counted from model-ready            (≥ 0)
    CHECK_SECONDS              60   tick interval                                    (> 0)
    MAX_RUNTIME_MINUTES        360  wall-clock cap on continuous uptime; 0 disables  (≥ 0)
    RUNPOD_BOOT_GRACE_MINUTES  20   dead-model guard (#2041/#2052); 0 disables       (≥ 0)
    STALL_MINUTES         2×IDLE   stall guard: in flight, no work done (issue 26)   (≥ 0)
                                    0 disables, giving exactly the seed's gauge rule

Every value may be fractional so tests and the demo run on seconds. Thresholds are
ceil(window / CHECK_SECONDS) in decimal arithmetic, read from the text the operator wrote: 0.1 minute at
1 s is 6 ticks, where binary floating point (0.1 * 60 = 6.000000000000001) would say 7. The idle threshold
is at least 1, so IDLE_MINUTES=0 stops on the first idle observation rather than on a busy one.

An unparseable or out-of-range value never widens a guard: the default applies and one warning line names
the variable and the value (`IDLE_MINUTES="soon" is not a non-negative number; using 15`), for the service
to log at startup. Decimal commas are rejected rather than guessed.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal, InvalidOperation

DEFAULT_IDLE_MINUTES = 15.0
DEFAULT_CHECK_SECONDS = 60.0
DEFAULT_MAX_RUNTIME_MINUTES = 360.0
DEFAULT_BOOT_GRACE_MINUTES = 20.0


@dataclass(frozen=True, slots=True, kw_only=True)
class MonitorOptions:
    """MonitorOptions are the monitor's timings; 0 disables the cap and the boot grace."""

    idle_minutes: float = DEFAULT_IDLE_MINUTES
    check_seconds: float = DEFAULT_CHECK_SECONDS
    max_runtime_minutes: float = DEFAULT_MAX_RUNTIME_MINUTES
    boot_grace_minutes: float = DEFAULT_BOOT_GRACE_MINUTES
    stall_minutes: float | None = None  # None: twice idle_minutes (policy/idle/stall_guard.py)

    def __post_init__(self) -> None:
        if not (math.isfinite(self.check_seconds) and self.check_seconds > 0):
            raise ValueError(f"check_seconds must be positive, got {self.check_seconds!r}")
        for name in ("idle_minutes", "max_runtime_minutes", "boot_grace_minutes"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be a non-negative number, got {value!r}")
        if self.stall_minutes is not None and not (math.isfinite(self.stall_minutes) and self.stall_minutes >= 0):
            raise ValueError(f"stall_minutes must be a non-negative number, got {self.stall_minutes!r}")

    @property
    def stall_window_minutes(self) -> float:
        """The stall window in minutes: STALL_MINUTES, else twice IDLE_MINUTES; 0 = the guard is off."""
        return 2 * self.idle_minutes if self.stall_minutes is None else self.stall_minutes

    @property
    def stall_threshold(self) -> int:
        """Consecutive in-flight scrapes without work that make a pod Stalled; 0 = the guard is off.

        At least 1 while on: a tiny window (2 × IDLE_MINUTES=0) still needs one scrape without work.
        """
        minutes = self.stall_window_minutes
        return max(1, _ticks(minutes, self.check_seconds)) if minutes > 0 else 0

    @property
    def idle_threshold(self) -> int:
        """Consecutive idle observations (counting the ready tick) that stop a ready pod."""
        return max(1, _ticks(self.idle_minutes, self.check_seconds))

    @property
    def boot_grace_threshold(self) -> int:
        """Booting ticks after which an unready pod is stopped as a dead model; 0 = disabled."""
        return _ticks(self.boot_grace_minutes, self.check_seconds)

    @property
    def check_interval(self) -> timedelta:
        return timedelta(seconds=self.check_seconds)

    @property
    def idle_window(self) -> timedelta:
        return timedelta(minutes=self.idle_minutes)

    @property
    def boot_grace(self) -> timedelta | None:
        """The boot grace window, None when disabled."""
        return timedelta(minutes=self.boot_grace_minutes) if self.boot_grace_minutes > 0 else None

    @property
    def max_runtime(self) -> timedelta | None:
        """The wall-clock cap, None when disabled."""
        return timedelta(minutes=self.max_runtime_minutes) if self.max_runtime_minutes > 0 else None


def parse_monitor_options(env: Mapping[str, str]) -> tuple[MonitorOptions, tuple[str, ...]]:
    """Read the monitor timings from `env`; return the options and one warning per rejected value."""
    warnings: list[str] = []
    idle = _read(env, "IDLE_MINUTES", DEFAULT_IDLE_MINUTES, positive=False, warnings=warnings)
    check = _read(env, "CHECK_SECONDS", DEFAULT_CHECK_SECONDS, positive=True, warnings=warnings)
    runtime = _read(env, "MAX_RUNTIME_MINUTES", DEFAULT_MAX_RUNTIME_MINUTES, positive=False, warnings=warnings)
    grace = _read(env, "RUNPOD_BOOT_GRACE_MINUTES", DEFAULT_BOOT_GRACE_MINUTES, positive=False, warnings=warnings)
    # unset, blank or invalid: twice the idle window (an invalid value never turns the guard off)
    stall: float | None = _read(
        env, "STALL_MINUTES", -1.0, positive=False, warnings=warnings, shown="twice IDLE_MINUTES"
    )
    if stall is not None and stall < 0:  # the sentinel: unset, blank or invalid → None, "twice IDLE_MINUTES"
        stall = None
    options = MonitorOptions(
        idle_minutes=idle,
        check_seconds=check,
        max_runtime_minutes=runtime,
        boot_grace_minutes=grace,
        stall_minutes=stall,
    )
    return options, tuple(warnings)


def _read(
    env: Mapping[str, str], name: str, default: float, *, positive: bool, warnings: list[str], shown: str = ""
) -> float:
    raw = env.get(name)
    if raw is None or not raw.strip():
        return default
    try:
        exact = Decimal(raw.strip())
    except InvalidOperation:
        exact = Decimal("NaN")
    # float() of a signalling NaN raises; any NaN or infinity is refused below either way
    value = float(exact) if exact.is_finite() else math.nan
    # A positive value too small for a float must not read as 0, which disables the cap and the boot grace.
    underflow = math.isfinite(value) and value == 0 and exact > 0
    if not math.isfinite(value) or value < 0 or (positive and value == 0) or underflow:
        kind = "positive" if positive else "non-negative"
        warnings.append(f"{name}={json.dumps(raw)} is not a {kind} number; using {shown or f'{default:g}'}")
        return default
    return value


def _ticks(minutes: float, check_seconds: float) -> int:
    """ceil(minutes * 60 / check_seconds), exact for the decimal values an operator writes."""
    return math.ceil(Decimal(repr(minutes)) * 60 / Decimal(repr(check_seconds)))
