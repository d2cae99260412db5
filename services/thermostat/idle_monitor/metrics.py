"""The idle monitor's metric families (docs/operations.md): each ticked pod's phase and counters, set by the tick
that decided them (no read of their own), its runtime against the runtime cap, the vLLM scrape latency, and the
per-pod leases it took over."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta

from prometheus_client import Gauge

from thermostat.chassis.metrics import Metrics, takeover_counter
from thermostat.policy.idle.idle_phase import Phase
from thermostat.policy.idle.monitor_state import MonitorState


class MonitorMetrics:
    def __init__(self, metrics: Metrics | None = None) -> None:
        self.metrics = metrics if metrics is not None else Metrics()
        self.phase = self.metrics.gauge(
            "thermostat_monitor_phase",
            "1 for the phase (DOWN, BOOTING, READY) of each pod this replica ticks, 0 for the others.",
            ["pod", "phase"],
        )
        self.idle_streak = self.metrics.gauge(
            "thermostat_monitor_idle_streak_ticks",
            "Consecutive idle ticks of each pod this replica ticks (stopped at the idle threshold).",
            ["pod"],
        )
        self.booting_ticks = self.metrics.gauge(
            "thermostat_monitor_booting_ticks",
            "Ticks each pod this replica ticks has spent booting (stopped at the boot-grace threshold).",
            ["pod"],
        )
        self.runtime = self.metrics.gauge(
            "thermostat_monitor_runtime_seconds",
            "Seconds since each pod this replica ticks armed its runtime-cap clock, as of its last tick; no series "
            "while the pod is down.",
            ["pod"],
        )
        self.runtime_cap = self.metrics.gauge(
            "thermostat_monitor_runtime_cap_seconds",
            "The runtime cap (MAX_RUNTIME_MINUTES) of each pod this replica ticks; no series while the cap is off.",
            ["pod"],
        )
        self.scrape_seconds = self.metrics.histogram(
            "thermostat_monitor_scrape_seconds",
            "vLLM /metrics scrapes through the pod proxy, by result (answered: a page came back; unreadable).",
            ["result"],
        )
        self.takeover = takeover_counter(self.metrics)
        # the two children every scrape observes into, looked up once (a labels() call per pod per tick adds up)
        self._scraped = {True: self.scrape_seconds.labels(result="answered")}
        self._scraped[False] = self.scrape_seconds.labels(result="unreadable")

    def ticked(self, pod: str, state: MonitorState, now: datetime, max_runtime: timedelta | None) -> None:
        for phase in Phase:
            self.phase.labels(pod=pod, phase=phase.value).set(1 if state.phase is phase else 0)
        self.idle_streak.labels(pod=pod).set(state.counters.idle_streak)
        self.booting_ticks.labels(pod=pod).set(state.counters.booting_ticks)
        # a down pod's runtime is absent, not 0: "near the cap" compares it with the cap, and 0 would say "fine"
        # about a pod that is not there, where no series says nothing
        if state.cap_started_at is None:
            self._remove(self.runtime, pod)
        else:
            self.runtime.labels(pod=pod).set((now - state.cap_started_at).total_seconds())
        if max_runtime is None:
            self._remove(self.runtime_cap, pod)
        else:
            self.runtime_cap.labels(pod=pod).set(max_runtime.total_seconds())

    def forget(self, pod: str) -> None:
        """This replica no longer ticks `pod` (its lease moved on): its series go, the new holder's stay."""
        for phase in Phase:
            self._remove(self.phase, pod, phase.value)
        self._remove(self.idle_streak, pod)
        self._remove(self.booting_ticks, pod)
        self._remove(self.runtime, pod)
        self._remove(self.runtime_cap, pod)

    @staticmethod
    def _remove(gauge: Gauge, *labels: str) -> None:
        with contextlib.suppress(KeyError):  # never set on this replica
            gauge.remove(*labels)

    async def timed_scrape(self, scrape: Callable[[], Awaitable[str | None]]) -> str | None:
        # `scrape` makes the coroutine here, once this one runs: a coroutine made by the caller would be dropped
        # unawaited when a cancelled tick ends this one before its first step (gather at shutdown)
        started = time.perf_counter()
        text = await scrape()
        self._scraped[text is not None].observe(time.perf_counter() - started)
        return text
