"""Prometheus metrics: each service's families on a registry of its own, served at `GET /metrics` on the
service's metrics port (the registry's `metrics_port_env`, default `default_metrics_port`).

A registry per service, not the library's global one: the tests run several services in one process, and two
services declaring `thermostat_lease_takeovers_total` on the global registry would collide (and read each
other's counts). Each `ServiceSpec` carries its own `Metrics`; a service declares its families on it (a small
`metrics.py` per service) and the chassis serves it, so a new service gets `/metrics` with no code of its own.

Counters and histograms are updated where the events happen. A gauge whose value needs a store read is
refreshed on scrape (`on_scrape`): the refreshers run before the exposition is rendered, together bounded by
`refresh_timeout` (a slow store answers the scrape with the last values and counts the failure in
`thermostat_metrics_refresh_failures_total`), so no hot path ever pays for a gauge.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence

from aiohttp import web
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
)
from prometheus_client.exposition import choose_encoder

log = logging.getLogger("thermostat.chassis.metrics")

# No `_created` sample beside each counter and histogram: Prometheus's text format has no use for it, and it
# doubles the series a scrape reads.
disable_created_metrics()  # type: ignore[no-untyped-call]  # the library leaves it unannotated

Refresh = Callable[[], Awaitable[None]]

METRICS_PATH = "/metrics"
DEFAULT_REFRESH_TIMEOUT = 2.0

# Latency buckets in seconds: a loopback call (sub-millisecond) to a slow provider or scrape (tens of seconds).
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
# Waits in seconds: a job queued behind a machine's boot waits minutes.
WAIT_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0)


class Metrics:
    """One service's metric families, on a registry of its own, and what refreshes its gauges on scrape."""

    def __init__(self, *, refresh_timeout: float = DEFAULT_REFRESH_TIMEOUT) -> None:
        self.registry = CollectorRegistry()
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        self.refresh_timeout = refresh_timeout
        self._refreshers: list[tuple[str, Refresh]] = []
        self.refresh_failures = self.counter(
            "thermostat_metrics_refresh_failures_total",
            "Scrapes on which a gauge's refresh failed or ran out of time (its last values were served).",
            ["refresh"],
        )

    def counter(self, name: str, documentation: str, labels: Sequence[str] = ()) -> Counter:
        return Counter(name, documentation, list(labels), registry=self.registry)

    def gauge(self, name: str, documentation: str, labels: Sequence[str] = ()) -> Gauge:
        return Gauge(name, documentation, list(labels), registry=self.registry)

    def histogram(
        self, name: str, documentation: str, labels: Sequence[str] = (), *, buckets: Sequence[float] = LATENCY_BUCKETS
    ) -> Histogram:
        return Histogram(name, documentation, list(labels), registry=self.registry, buckets=tuple(buckets))

    def on_scrape(self, name: str, refresh: Refresh) -> None:
        """Run `refresh` before each exposition (it sets gauges from a bounded read); `name` labels its failures."""
        self._refreshers.append((name, refresh))

    async def refresh(self) -> None:
        """Run every refresher at once, each bounded by the refresh timeout; a failure keeps its last values."""

        async def one(name: str, refresh: Refresh) -> None:
            try:
                async with asyncio.timeout(self.refresh_timeout):  # not wait_for: 3.11's can drop a cancellation
                    await refresh()
            except Exception as error:  # the scrape still answers: counters matter more than one gauge
                log.warning("metrics refresh %s failed: %s", name, type(error).__name__)
                self.refresh_failures.labels(refresh=name).inc()

        await asyncio.gather(*(one(name, refresh) for name, refresh in self._refreshers))

    async def exposition(self, accept: str | None = None) -> tuple[bytes, str]:
        """The text a scrape reads (the format `accept` asks for: Prometheus text or OpenMetrics) and its type."""
        await self.refresh()
        encoder, content_type = choose_encoder(accept or "")
        return encoder(self.registry), content_type


class MetricsServer:
    """`GET /metrics` over HTTP for one service's `Metrics`, in the service's event loop."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics
        self.port = 0
        self._runner: web.AppRunner | None = None

    async def _serve(self, request: web.Request) -> web.Response:
        body, content_type = await self.metrics.exposition(request.headers.get("Accept"))
        response = web.Response(body=body)
        response.headers["Content-Type"] = content_type
        return response

    async def start(self, host: str, port: int) -> int:
        app = web.Application()
        app.router.add_get(METRICS_PATH, self._serve)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port)
        await site.start()
        server = site._server  # aiohttp keeps the bound socket here; port 0 asks the OS for one
        sockets = getattr(server, "sockets", None) or ()
        self.port = int(sockets[0].getsockname()[1]) if sockets else port
        return self.port

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None


def takeover_counter(metrics: Metrics) -> Callable[[str], None]:
    """`thermostat_lease_takeovers_total{lease}` on `metrics`, and what counts one lease taken over: give it to
    `LeaseStore.observed`. The label is the lease's kind (`wake`, `monitor`, `metering`, `pool-instance`), not
    its name, so a pod per series never grows the family."""
    counter = metrics.counter(
        "thermostat_lease_takeovers_total",
        "Leases this replica took from another holder whose lease expired unreleased (it died or stalled).",
        ["lease"],
    )

    def count(name: str) -> None:
        counter.labels(lease=name.partition(":")[0]).inc()

    return count
