"""One trace per request through the real Envoy edge: a wake asked over REST (transcoded) or native gRPC, with
the caller's W3C traceparent, is one trace from the pod controller's StartPod through metering's budget check
to the RunPod (simulator) requests, each span under the one that caused it, read back from the SDK's
in-memory exporter (the services run in this process, so their spans land there). With EDGE_OTLP_ENDPOINT's
tracer configured, Envoy's own span sits between the caller and the controller, exported over OTLP/gRPC to a
receiver this test runs."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind

from tests.fixtures.edge import house_edge, port_of
from tests.fixtures.polling import eventually
from tests.fixtures.services import (
    OPERATOR,
    OPERATOR_TOKEN,
    RunningService,
    metering_env,
    pod_controller_env,
    start_metering,
    start_pod_controller,
)
from tests.fixtures.tracing import Spans, hex_id, names, parent_of
from thermostat.chassis.ports import free_port
from thermostat.chassis.registry import METERING, POD_CONTROLLER
from thermostat.dev.envoy import EnvoyProcess
from thermostat.dev.simulators.runpod.server import RunPodSimulator
from thermostat.pods.v1 import pods_pb2, pods_pb2_grpc
from thermostat.store.db import Store
from tools.envoy_config import EdgeTracing

pytestmark = pytest.mark.e2e

TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
CALLER_SPAN = "b7ad6b7169203331"
TRACEPARENT = f"00-{TRACE_ID}-{CALLER_SPAN}-01"
START = "thermostat.pods.v1.PodController/StartPod"
BUDGET = "thermostat.metering.v1.MeteringInternal/CheckPodBudget"


@pytest.fixture
async def services(runpod_sim: RunPodSimulator, db_store: Store) -> AsyncIterator[dict[str, RunningService]]:
    """The pod controller checking wakes against metering, and metering reading the controller's feed."""
    metering_port = free_port()
    env = pod_controller_env(runpod_sim, METERING_ADDR=f"127.0.0.1:{metering_port}")
    async with (
        start_pod_controller(env, db_store) as controller,
        start_metering(metering_env(controller.address), db_store, metering_port) as metering,
    ):
        yield {POD_CONTROLLER.name: controller, METERING.name: metering}


@contextlib.asynccontextmanager
async def _envoy(
    services: dict[str, RunningService], path: Path, tracing: EdgeTracing | None = None
) -> AsyncIterator[EnvoyProcess]:
    ports = {name: port_of(s.address) for name, s in services.items()}
    async with house_edge(ports, path, tracing=tracing) as running:
        yield running


@pytest.fixture
async def envoy(services: dict[str, RunningService], tmp_path: Path) -> AsyncIterator[EnvoyProcess]:
    async with _envoy(services, tmp_path / "envoy.yaml") as running:
        yield running


class Collector(trace_service_pb2_grpc.TraceServiceServicer):
    """An OTLP/gRPC trace receiver: (service.name, span) for every span exported to it."""

    def __init__(self) -> None:
        self.spans: list[tuple[str, Any]] = []

    async def Export(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        for resource_spans in request.resource_spans:
            attributes = resource_spans.resource.attributes
            [name] = [a.value.string_value for a in attributes if a.key == "service.name"]
            self.spans.extend((name, span) for scope in resource_spans.scope_spans for span in scope.spans)
        return trace_service_pb2.ExportTraceServiceResponse()


@pytest.fixture
async def collector() -> AsyncIterator[tuple[Collector, int]]:
    server = grpc.aio.server()
    received = Collector()
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(received, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield received, port
    finally:
        await server.stop(None)


def _edge(envoy: EnvoyProcess) -> str:
    return f"127.0.0.1:{envoy.listeners['edge']}"


async def _assert_one_trace_from_the_caller_to_runpod(spans: Spans, sim: RunPodSimulator) -> None:
    await spans.wait_for(START, BUDGET)
    everything = spans.all()
    ours = [s for s in everything if hex_id(s.context.trace_id, 32) == TRACE_ID]
    [start] = [s for s in ours if s.name == START]
    # Envoy passed the caller's traceparent through: the controller's span is its child
    assert start.kind is SpanKind.SERVER and hex_id(start.parent.span_id) == CALLER_SPAN
    assert start.attributes["rpc.grpc.status_code"] == grpc.StatusCode.OK.value[0]
    # the budget check: the controller's CLIENT span under StartPod, metering's SERVER span under that
    [asked] = [s for s in ours if s.name == BUDGET and s.kind is SpanKind.CLIENT]
    [judged] = [s for s in ours if s.name == BUDGET and s.kind is SpanKind.SERVER]
    assert _under(asked, start, everything) and parent_of(judged, everything) is asked
    # every RunPod request of the wake is a CLIENT span in the trace, sent with its own span's context
    calls = [s for s in ours if s.kind is SpanKind.CLIENT and "url.full" in s.attributes]
    assert any(s.name == "POST" and s.attributes["url.full"].endswith("/v2/pods") for s in calls), calls
    assert all(_under(s, start, everything) for s in calls)
    received = [names(r.headers["traceparent"]) for r in sim.requests("/v2/")]
    assert received == [(s.context.trace_id, s.context.span_id) for s in sorted(calls, key=lambda s: s.start_time)]
    # the budget check came before the first RunPod write
    create = next(s for s in calls if s.name == "POST")
    assert judged.end_time <= create.start_time


def _under(span: ReadableSpan, ancestor: ReadableSpan, spans: list[ReadableSpan]) -> bool:
    parent = parent_of(span, spans)
    while parent is not None:
        if parent is ancestor:
            return True
        parent = parent_of(parent, spans)
    return False


async def test_a_rest_wake_is_one_trace_from_the_edge_through_metering_to_runpod(
    envoy: EnvoyProcess, runpod_sim: RunPodSimulator, spans: Spans
) -> None:
    async with httpx.AsyncClient(base_url=f"http://{_edge(envoy)}", timeout=30) as edge:
        woken = await edge.post(
            "/api/pods/qwen/start", headers={"X-Rig-Operator-Token": OPERATOR_TOKEN, "traceparent": TRACEPARENT}
        )
    assert woken.status_code == 200, woken.text
    assert woken.json()["outcome"] == "Created"
    await _assert_one_trace_from_the_caller_to_runpod(spans, runpod_sim)


async def test_a_native_grpc_wake_is_one_trace_from_the_edge_through_metering_to_runpod(
    envoy: EnvoyProcess, runpod_sim: RunPodSimulator, spans: Spans
) -> None:
    async with grpc.aio.insecure_channel(_edge(envoy)) as channel:
        reply = await pods_pb2_grpc.PodControllerStub(channel).StartPod(
            pods_pb2.StartPodRequest(name="qwen"), metadata=(*OPERATOR, ("traceparent", TRACEPARENT)), timeout=30
        )
    assert reply.outcome == "Created"
    await _assert_one_trace_from_the_caller_to_runpod(spans, runpod_sim)


async def test_with_its_tracer_on_the_edges_span_sits_between_the_caller_and_the_controller(
    services: dict[str, RunningService], collector: tuple[Collector, int], spans: Spans, tmp_path: Path
) -> None:
    received, port = collector
    tracing = EdgeTracing(collector_host="127.0.0.1", collector_port=port, flush_interval_ms=100)
    async with (
        _envoy(services, tmp_path / "envoy.yaml", tracing) as envoy,
        httpx.AsyncClient(base_url=f"http://{_edge(envoy)}", timeout=30) as edge,
    ):
        woken = await edge.post(
            "/api/pods/qwen/start", headers={"X-Rig-Operator-Token": OPERATOR_TOKEN, "traceparent": TRACEPARENT}
        )
        assert woken.status_code == 200, woken.text

        async def edge_span() -> Any:
            ours = [s for name, s in received.spans if name == "thermostat-edge" and s.trace_id.hex() == TRACE_ID]
            return ours[0] if ours else None

        exported = await eventually(edge_span, timeout=15)
    assert exported.parent_span_id.hex() == CALLER_SPAN
    [start] = await spans.wait_for(START)
    assert hex_id(start.context.trace_id, 32) == TRACE_ID
    assert start.parent.span_id == int.from_bytes(exported.span_id, "big")
