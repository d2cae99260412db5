"""The inference gateway's metric families (docs/operations.md): requests by pod and how each ended, requests held
now, and how long a held request waited for its pod to wake."""

from __future__ import annotations

from thermostat.chassis.metrics import WAIT_BUCKETS, Metrics


class GatewayMetrics:
    def __init__(self, metrics: Metrics | None = None) -> None:
        self.metrics = metrics if metrics is not None else Metrics()
        self.requests = self.metrics.counter(
            "thermostat_gateway_requests_total",
            "Inference requests by pod and how each was answered: forwarded (the pod was ready), woken (held while "
            "the pod woke, then forwarded), or the refusal's OpenAI error code.",
            ["pod", "outcome"],
        )
        self.held = self.metrics.gauge(
            "thermostat_gateway_held_requests", "Requests held now while their pod wakes, by pod.", ["pod"]
        )
        self.hold_seconds = self.metrics.histogram(
            "thermostat_gateway_hold_seconds",
            "Seconds a held request waited for its pod, by pod and whether it was then forwarded.",
            ["pod", "forwarded"],
            buckets=WAIT_BUCKETS,
        )

    def answered(self, pod: str, outcome: str) -> None:
        self.requests.labels(pod=pod, outcome=outcome).inc()
