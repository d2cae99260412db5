"""Whether one successful scrape is evidence of work (busy) or of none (idle), against the previous scrape.

The gauges alone sampled once per CHECK_SECONDS miss a chat turn that lasts a few seconds ~87% of the time,
so an agent in active use read idle on nearly every tick and was stopped a fixed IDLE_MINUTES after ready,
mid-conversation (#2075, measured 2026-09-11). The monotonic work counter closes that hole:

- a request in flight now ⇒ busy (a long generation must never read idle);
- the counter advanced since the previous scrape ⇒ busy — a turn that began and ended between two ticks;
- the counter went backwards ⇒ busy: the process restarted, the baseline is meaningless, so this tick
  carries no idle evidence;
- a counter but no baseline ⇒ busy: work done before this first scrape is already inside the counter with
  nothing to measure it against; this tick seeds the baseline and must not also bank idle evidence (which
  is what makes Booting → Ready enter with IdleStreak 0, not 1);
- no counter in the exposition ⇒ the gauge alone, exactly the pre-#2075 behaviour, so an older vLLM that
  exposes none of the families can still be stopped.

Only the direction of the counter is used, never its magnitude.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from thermostat.policy.idle.vllm_metrics import PodActivity


class ActivityReason(StrEnum):
    """ActivityReason names the rule that classified a scrape."""

    IN_FLIGHT = "IN_FLIGHT"
    COUNTER_ADVANCED = "COUNTER_ADVANCED"
    COUNTER_WENT_BACKWARDS = "COUNTER_WENT_BACKWARDS"
    NO_BASELINE = "NO_BASELINE"
    COUNTER_UNCHANGED = "COUNTER_UNCHANGED"
    GAUGE_ONLY = "GAUGE_ONLY"


@dataclass(frozen=True, slots=True, kw_only=True)
class ActivityVerdict:
    """ActivityVerdict is a scrape classified: busy or idle, why, and the baseline the next scrape compares to."""

    busy: bool
    reason: ActivityReason
    baseline: float | None


def classify_activity(activity: PodActivity, baseline: float | None) -> ActivityVerdict:
    """Classify one scrape against the previous scrape's counter (`baseline`, None when there was none)."""
    completed = activity.completed
    if activity.active:
        return ActivityVerdict(busy=True, reason=ActivityReason.IN_FLIGHT, baseline=completed)
    if completed is None:
        return ActivityVerdict(busy=False, reason=ActivityReason.GAUGE_ONLY, baseline=None)
    if baseline is None:
        return ActivityVerdict(busy=True, reason=ActivityReason.NO_BASELINE, baseline=completed)
    if completed > baseline:
        return ActivityVerdict(busy=True, reason=ActivityReason.COUNTER_ADVANCED, baseline=completed)
    if completed < baseline:
        return ActivityVerdict(busy=True, reason=ActivityReason.COUNTER_WENT_BACKWARDS, baseline=completed)
    return ActivityVerdict(busy=False, reason=ActivityReason.COUNTER_UNCHANGED, baseline=completed)
