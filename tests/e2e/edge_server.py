"""A real grpc.aio server implementing the test-only EdgeTestService, plus gRPC health and reflection.

Shared by tests/e2e/test_edge.py and bench/edge_latency.py. Each RPC sets statuses and titles the way the
real services must: `x-http-code` / `x-problem-title` in initial metadata, then return or abort.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field

import grpc
from google.api import httpbody_pb2
from google.protobuf import json_format, timestamp_pb2
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from thermostat.edgetest.v1 import edgetest_pb2, edgetest_pb2_grpc

SERVICE = edgetest_pb2.DESCRIPTOR.services_by_name["EdgeTestService"].full_name
READY_SINCE_JSON = "2026-09-11T08:55:22Z"
READY_SINCE = timestamp_pb2.Timestamp()
READY_SINCE.FromJsonString(READY_SINCE_JSON)


@dataclass
class Received:
    """What the service saw, so tests can assert on the request the edge produced."""

    payloads: dict[str, httpbody_pb2.HttpBody] = field(default_factory=dict)
    metadata: list[dict[str, str]] = field(default_factory=list)


class EdgeTestService(edgetest_pb2_grpc.EdgeTestServiceServicer):
    def __init__(self, received: Received) -> None:
        self._received = received

    async def GetPod(self, request, context):
        if request.name == "podless":
            # what the pod controller does when no pod is named: podId is "" (absent on the wire), the message
            # and the optional field unset, and every one of them named for the edge to print as null
            await context.send_initial_metadata((("x-json-nulls", "podId,readySince,gpuId"),))
            return edgetest_pb2.GetPodResponse(name=request.name)
        return edgetest_pb2.GetPodResponse(name=request.name, pod_id="pod-123", ready_since=READY_SINCE)

    async def StartPod(self, request, context):
        if request.name == "waiting":
            await context.send_initial_metadata((("x-http-code", "202"),))
            return edgetest_pb2.StartPodResponse(name=request.name, outcome="Waiting")
        if request.name == "failed":
            await context.send_initial_metadata((("x-http-code", "409"), ("x-problem-title", "Wake failed")))
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, 'no GPU under 2.00 USD/h: A100 "80GB" 2.49')
        if request.name != "qwen":
            await context.abort(grpc.StatusCode.NOT_FOUND, f"pod {request.name!r} is not known")
        return edgetest_pb2.StartPodResponse(name=request.name, outcome="Started")

    async def GetJob(self, request, context):
        return edgetest_pb2.GetJobResponse(job_id=request.job_id, machine_type="cpu")

    async def SubmitJob(self, request, context):
        self._received.metadata.append({k: v for k, v in context.invocation_metadata() if isinstance(v, str)})
        job_id = hashlib.sha256(request.payload.data).hexdigest()[:16]
        self._received.payloads[job_id] = request.payload
        await context.send_initial_metadata((("x-http-code", "202"),))
        return edgetest_pb2.SubmitJobResponse(
            job_id=job_id,
            payload_size=len(request.payload.data),
            payload_content_type=request.payload.content_type,
            machine_type=request.machine_type,
        )

    async def GetJobResult(self, request, context):
        if request.job_id == "crashed":
            await context.send_initial_metadata((("x-http-code", "502"),))
            await context.abort(grpc.StatusCode.UNKNOWN, "worker exited with status 1")
        payload = self._received.payloads.get(request.job_id)
        if payload is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"job {request.job_id} not found")
        return payload

    async def PutMachineTypes(self, request, context):
        # The transcoder only maps response_body onto an HttpBody field, so the service prints the array.
        items = [
            json_format.MessageToDict(item, preserving_proto_field_name=True, always_print_fields_with_no_presence=True)
            for item in request.items
        ]
        body = httpbody_pb2.HttpBody(content_type="application/json", data=json.dumps(items).encode())
        return edgetest_pb2.PutMachineTypesResponse(items=request.items, json=body)


@dataclass
class RunningServer:
    server: grpc.aio.Server
    port: int
    health: health.aio.HealthServicer
    received: Received

    async def set_serving(self, serving: bool) -> None:
        status = health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
        await self.health.set(SERVICE, status)

    async def stop(self) -> None:
        await self.server.stop(grace=None)


async def start_edge_test_server(host: str = "127.0.0.1") -> RunningServer:
    """Start the service on a free loopback port, SERVING."""
    server = grpc.aio.server()
    received = Received()
    edgetest_pb2_grpc.add_EdgeTestServiceServicer_to_server(EdgeTestService(received), server)
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection((SERVICE, health.SERVICE_NAME, reflection.SERVICE_NAME), server)
    port = server.add_insecure_port(f"{host}:0")
    await server.start()
    running = RunningServer(server=server, port=port, health=health_servicer, received=received)
    await running.set_serving(True)
    return running
