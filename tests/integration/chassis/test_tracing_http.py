"""A provider's httpx client through `http_transport`: OpenTelemetry's httpx instrumentation as the chassis sets it
up — a CLIENT span per request inside a recorded trace with the stable HTTP attributes, none outside one, and
never a credential header in a span."""

from __future__ import annotations

import httpx
import pytest
from opentelemetry.trace import SpanKind, StatusCode

from tests.fixtures.tracing import Spans, names
from thermostat.chassis import tracing

SECRET = "Bearer rp_not-for-traces"


def _recording(seen: list[httpx.Request], status: int = 200) -> httpx.AsyncClient:
    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(status, text="ok")

    return httpx.AsyncClient(transport=tracing.http_transport(httpx.MockTransport(answer)))


async def test_a_request_inside_a_trace_is_a_client_span_named_by_its_method_without_the_query(spans: Spans) -> None:
    """The span carries the stable attributes, its URL without query or credentials, and the request its context."""
    seen: list[httpx.Request] = []
    async with _recording(seen, status=503) as client:
        with tracing.span("caller"):
            await client.get("https://user:pw@rest.example:8443/v2/pods?name=qwen", headers={"Authorization": SECRET})
    [request] = spans.named("GET")
    assert request.kind is SpanKind.CLIENT and request.parent.span_id == spans.one("caller").context.span_id
    assert request.attributes["url.full"] == "https://rest.example:8443/v2/pods"
    assert request.attributes["http.request.method"] == "GET"
    assert request.attributes["http.response.status_code"] == 503
    assert request.status.status_code is StatusCode.ERROR
    [sent] = seen
    assert names(sent.headers["traceparent"]) == (request.context.trace_id, request.context.span_id)


async def test_a_request_outside_a_recorded_trace_opens_no_span_and_sends_no_context(spans: Spans) -> None:
    """Background requests (a poll, a probe) start no trace of their own."""
    seen: list[httpx.Request] = []
    async with _recording(seen) as client:
        await client.get("https://rest.example/v2/pods")
    assert spans.all() == []
    assert "traceparent" not in seen[0].headers


async def test_no_request_header_is_captured_so_no_credential_reaches_a_span(
    spans: Spans, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The instrumentation's header capture, even asked for every header, leaves a provider's key out."""
    monkeypatch.setenv("OTEL_INSTRUMENTATION_HTTP_CAPTURE_HEADERS_CLIENT_REQUEST", ".*")
    async with _recording([]) as client:
        with tracing.span("caller"):
            await client.post("https://rest.example/v2/pods", headers={"Authorization": SECRET}, content=b"{}")
    [request] = spans.named("POST")
    assert not [k for k, v in request.attributes.items() if "authorization" in k or SECRET in str(v)]
