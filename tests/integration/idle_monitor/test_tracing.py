"""With OpenTelemetry's SDK recording, each monitor tick is one trace: the tick's root span, the calls to the pod
controller under it, the controller's server spans under those, and RunPod's requests under them carrying
their own span's traceparent to the (simulated) API."""

from __future__ import annotations

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind

from tests.fixtures.tracing import Spans, names, parent_of
from tests.integration.idle_monitor.conftest import POD_ID, MonitorRig

STOP = "thermostat.pods.v1.PodControllerInternal/StopPods"
OBSERVE = "thermostat.pods.v1.PodControllerInternal/ObserveVolume"


def chain(span: ReadableSpan, spans: list[ReadableSpan]) -> list[str]:
    """The span's ancestors' names, nearest first, up to its root."""
    names = []
    parent = parent_of(span, spans)
    while parent is not None:
        names.append(f"{parent.name} ({parent.kind.name})")
        parent = parent_of(parent, spans)
    return names


async def test_the_idle_stop_is_one_trace_from_the_tick_through_the_controller_to_runpod(
    rig: MonitorRig, spans: Spans
) -> None:
    rig.add_pod(POD_ID)
    await rig.tick_until_stop(limit=20)
    everything = spans.all()
    [served] = [s for s in spans.named(STOP) if s.kind is SpanKind.SERVER]
    assert chain(served, everything) == [f"{STOP} (CLIENT)", "monitor.tick (INTERNAL)"]
    tick = parent_of(parent_of(served, everything), everything)
    assert tick.parent is None and tick.attributes["thermostat.pod"] == "qwen"
    in_the_stop = [s for s in everything if s.context.trace_id == tick.context.trace_id]
    # the controller's RunPod calls for the stop: each a CLIENT span under the server span
    action = next(s for s in in_the_stop if s.name == "POST" and s.attributes["url.full"].endswith("/action"))
    assert parent_of(action, everything) is served and action.kind is SpanKind.CLIENT
    assert action.attributes["http.response.status_code"] == 200
    [sent] = [r for r in rig.sim.requests(f"/v2/pods/{POD_ID}/action") if r.method == "POST"]
    assert names(sent.headers["traceparent"]) == (tick.context.trace_id, action.context.span_id)
    # the same tick observed the volume through the controller and scraped the pod, all in the one trace
    observed = [s for s in in_the_stop if s.name == OBSERVE]
    assert {s.kind for s in observed} == {SpanKind.CLIENT, SpanKind.SERVER}
    scrape = next(s for s in in_the_stop if s.name == "GET" and s.attributes["url.full"].endswith("/metrics"))
    assert parent_of(scrape, everything) is tick


async def test_ticks_are_separate_traces(rig: MonitorRig, spans: Spans) -> None:
    rig.add_pod(POD_ID)
    await rig.ticks(2)
    first, second = spans.named("monitor.tick")
    assert first.context.trace_id != second.context.trace_id
