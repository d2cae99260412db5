"""The OTLP exporter configured by the standard environment variables: `python -m thermostat.pod_controller`
with OTEL_EXPORTER_OTLP_ENDPOINT set sends its spans over OTLP/HTTP (to a receiver this test runs), named
for the service, under the caller's context; the batch still queued at SIGTERM leaves before it exits."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from tests.fixtures.polling import eventually
from tests.fixtures.services import OPERATOR, pod_controller_env
from thermostat.chassis.ports import free_port
from thermostat.dev.simulators.runpod.server import RunPodSimulator
from thermostat.pods.v1 import pods_pb2, pods_pb2_grpc

ROOT = Path(__file__).resolve().parents[3]
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"
GET_POD = "thermostat.pods.v1.PodController/GetPod"


class Receiver(ThreadingHTTPServer):
    """An OTLP/HTTP trace receiver: the export requests POSTed to /v1/traces, decoded."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.exports: list[ExportTraceServiceRequest] = []
        self.paths: list[str] = []

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def spans(self) -> list[tuple[str, str, str, str]]:
        """(service.name, span name, trace id, parent span id) of every span received."""
        found = []
        for export in self.exports:
            for resource_spans in export.resource_spans:
                names = [a.value.string_value for a in resource_spans.resource.attributes if a.key == "service.name"]
                for scope in resource_spans.scope_spans:
                    for span in scope.spans:
                        found.append((names[0], span.name, span.trace_id.hex(), span.parent_span_id.hex()))
        return found


class _Handler(BaseHTTPRequestHandler):
    server: Receiver

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.server.paths.append(self.path)
        self.server.exports.append(ExportTraceServiceRequest.FromString(body))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


async def _serving(address: str) -> bool | None:
    try:
        async with grpc.aio.insecure_channel(address) as channel:
            reply = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=1)
    except grpc.aio.AioRpcError:
        return None
    return True if reply.status == health_pb2.HealthCheckResponse.SERVING else None


async def test_a_service_exports_its_spans_over_otlp_to_the_endpoint_the_environment_names(
    runpod_sim: RunPodSimulator, database_url: str, receiver: Receiver, tmp_path: Path
) -> None:
    port = free_port()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("OTEL_")},
        **pod_controller_env(runpod_sim),
        "DATABASE_URL": database_url,
        "POD_CONTROLLER_PORT": str(port),
        "LOG_LEVEL": "WARNING",
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
        # a long batch delay: what reaches the receiver was flushed by the stop, not a timer
        "OTEL_BSP_SCHEDULE_DELAY": "600000",
    }
    with (tmp_path / "pod-controller.log").open("wb") as log:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "thermostat.pod_controller", cwd=ROOT, env=env, stdout=log, stderr=log
        )
        try:
            await eventually(lambda: _serving(f"127.0.0.1:{port}"), timeout=30, every=0.1)
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                await pods_pb2_grpc.PodControllerStub(channel).GetPod(
                    pods_pb2.GetPodRequest(name="qwen"),
                    metadata=(*OPERATOR, ("traceparent", f"00-{TRACE_ID}-{CALLER_SPAN}-01")),
                    timeout=10,
                )
            assert receiver.exports == []  # batched, not sent per span
            process.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(process.wait(), timeout=30) == 0
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
    assert set(receiver.paths) == {"/v1/traces"}
    assert ("pod-controller", GET_POD, TRACE_ID, CALLER_SPAN) in receiver.spans(), (
        tmp_path / "pod-controller.log"
    ).read_text()
