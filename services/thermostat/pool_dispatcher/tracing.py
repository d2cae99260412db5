"""Optional OpenTelemetry spans for the pool: `pool.queue`, `pool.boot` and `pool.execute`, under the caller's
span as its W3C `traceparent` / `tracestate` (kept with the job) name it.

OpenTelemetry is not a dependency (worker-pool seed: "With OpenTelemetry installed (it is not a dependency)"):
without it every method here returns at its first line, so the runtime pays nothing. With it, spans go to
the tracer provider given (tests pass one with an in-memory exporter) or the process's global one, which is
the API's no-op provider unless the deployment configured an SDK.

- `pool.queue` covers submit → dispatch. It is recorded by whichever process dispatched the job, after the
  fact: it starts at the job's `submitted_at` (the database's clock) and ends when the payload is sent.
- `pool.boot` covers a machine's start, from the request to the provider until it answers its health
  check, under the job first in line for it; a start or boot that fails marks it as an error.
- `pool.execute` covers the job's time on the machine. The trace context forwarded to the machine is this
  span's, so the machine's work sits under it, and it under the caller's.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

try:
    from opentelemetry import trace as otel
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
except ImportError:  # pragma: no cover - exercised where OpenTelemetry is absent
    otel = None  # type: ignore[assignment]

TRACER_NAME = "thermostat.pool_dispatcher"

Span = Any
"""An OpenTelemetry span, or None when tracing is off."""


class PoolTracing:
    """The pool's spans; every method is a no-op without OpenTelemetry."""

    def __init__(self, provider: Any = None) -> None:
        self._tracer: Any = None
        self._propagator: Any = None
        if otel is not None:
            self._tracer = otel.get_tracer(TRACER_NAME, tracer_provider=provider)
            self._propagator = TraceContextTextMapPropagator()

    def start(
        self,
        name: str,
        trace: Mapping[str, str],
        attributes: Mapping[str, str],
        *,
        start_time: datetime | None = None,
    ) -> Span:
        """A span named `name` under the caller's context in `trace` (a root span when it names none)."""
        if self._tracer is None:
            return None
        parent = self._propagator.extract(dict(trace))
        started = None if start_time is None else int(start_time.timestamp() * 1_000_000_000)
        return self._tracer.start_span(name, context=parent, start_time=started, attributes=dict(attributes))

    def end(self, span: Span, error: str | None = None) -> None:
        if span is None:
            return
        if error is not None:
            span.set_status(otel.Status(otel.StatusCode.ERROR, error))
        span.end()

    def forwarded(self, span: Span, trace: Mapping[str, str]) -> Mapping[str, str]:
        """The trace headers to send to the machine: `span`'s context when it is a recording one, else the
        caller's as kept with the job."""
        if span is None or not span.get_span_context().is_valid:
            return trace
        carrier: dict[str, str] = {}
        self._propagator.inject(carrier, context=otel.set_span_in_context(span))
        return carrier or trace

    def queued(self, trace: Mapping[str, str], submitted_at: datetime, attributes: Mapping[str, str]) -> None:
        """Record `pool.queue` for a job dispatched now: from its submit to this moment."""
        if self._tracer is None:
            return
        self.end(self.start("pool.queue", trace, attributes, start_time=submitted_at))
