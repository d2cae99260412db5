"""Without OpenTelemetry (the extra not installed), or with its API but no tracer provider set up (no
OTEL_EXPORTER_OTLP_ENDPOINT), tracing costs nothing: a service process installs no tracing interceptor on its
server or its channels, hands its HTTP clients their own transports and the worker hop no span hook, and still
passes the caller's trace context on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from thermostat.chassis import tracing
from thermostat.chassis.request_context import insecure_channel
from thermostat.chassis.server import ServiceHost, ServiceSpec

ROOT = Path(__file__).resolve().parents[3]
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

# The service: the chassis' ServiceHost with one RPC that calls a second service over a chassis channel (as the
# pod controller calls metering), the second recording the metadata it received.
_PROBE = """
import asyncio, importlib, json, sys
if {blocked}:
    sys.modules["opentelemetry"] = None  # `import opentelemetry…` raises ImportError, as where it is not installed
import grpc, httpx
from thermostat.chassis import tracing
from thermostat.chassis.request_context import insecure_channel, outgoing_metadata
from thermostat.chassis.server import ServiceHost, ServiceSpec
from thermostat.providers.pool.worker_client import WorkerClient
from thermostat.providers.runpod.client import RunPodV2Client
for service in ("pod_controller", "idle_monitor", "pool_dispatcher", "metering"):
    importlib.import_module(f"thermostat.{{service}}.__main__")

def generic(name, behaviour):
    return grpc.method_handlers_generic_handler("test.Echo", {{name: grpc.unary_unary_rpc_method_handler(behaviour)}})

async def main():
    seen = []
    async def leaf(request, context):
        seen.append({{k: v for k, v in context.invocation_metadata() if k in ("traceparent", "x-request-id")}})
        return request
    leaf_host = ServiceHost(ServiceSpec(name="leaf", service_names=["test.Echo"],
                                        register=lambda s: s.add_generic_rpc_handlers((generic("Leaf", leaf),))))
    leaf_port = await leaf_host.start()
    channel = insecure_channel(f"127.0.0.1:{{leaf_port}}")
    async def edge(request, context):
        return await channel.unary_unary("/test.Echo/Leaf")(request, metadata=outgoing_metadata())
    host = ServiceHost(ServiceSpec(name="edge", service_names=["test.Echo"],
                                   register=lambda s: s.add_generic_rpc_handlers((generic("Edge", edge),))))
    port = await host.start()
    async with grpc.aio.insecure_channel(f"127.0.0.1:{{port}}") as caller:
        answer = await caller.unary_unary("/test.Echo/Edge")(b"ping", metadata=(("traceparent", {traceparent!r}),))
    runpod = RunPodV2Client("key")
    workers = WorkerClient()
    print(json.dumps({{
        "answer": answer.decode(),
        "leaf_saw": seen,
        "server_interceptors": [type(i).__name__ for i in host.interceptors],
        "channel_interceptors": [type(i).__name__ for i in channel._unary_unary_interceptors],
        "stream_interceptors": [type(i).__name__ for i in channel._unary_stream_interceptors],
        "runpod_transport": type(runpod._http._transport).__name__,
        "worker_hop_spans": (await workers.health("http://127.0.0.1:1"), workers._spans is not None),
        "enabled": tracing.enabled(),
        "opentelemetry_loaded": sorted(m for m, v in sys.modules.items() if m.startswith("opentelemetry") and v),
    }}))
    await workers.aclose(); await runpod.aclose(); await channel.close()
    await host.stop(0.1); await leaf_host.stop(0.1)

asyncio.run(main())
"""


@pytest.mark.parametrize("blocked", [True, False], ids=["opentelemetry-not-installed", "api-without-a-provider"])
def test_a_service_without_a_tracer_installs_no_tracing_hook_and_still_passes_the_trace_on(blocked: bool) -> None:
    probe = _PROBE.format(traceparent=TRACEPARENT, blocked=blocked)
    environ = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, cwd=ROOT, env=environ
    )
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen["enabled"] is False
    assert (seen["opentelemetry_loaded"] == []) is blocked
    assert seen["server_interceptors"] == ["RequestContextInterceptor", "AuthInterceptor", "TextFieldInterceptor"]
    assert seen["channel_interceptors"] == ["_Propagate"]
    assert seen["stream_interceptors"] == ["_StreamSide"]  # _Propagate's streaming side
    assert seen["runpod_transport"] == "AsyncHTTPTransport"  # httpx's own, unwrapped
    assert seen["worker_hop_spans"] == [False, False]  # a probe made, nobody there, and no span hook for it
    # no tracing, yet the caller's context crossed both hops unchanged (the chassis' passthrough)
    assert seen["answer"] == "ping"
    [leaf] = seen["leaf_saw"]
    assert leaf["traceparent"] == TRACEPARENT


async def test_with_a_tracer_the_tracing_hooks_come_first_on_servers_and_channels() -> None:
    """The same chassis with a tracer provider (this test process has one, tests/fixtures/tracing.py): tracing
    is the outermost hook, so a call refused by auth is still a span, and the callee receives the call's own
    context."""
    assert tracing.enabled()
    host = ServiceHost(ServiceSpec(name="t", service_names=["test.Echo"], register=lambda s: None))
    await host.start()
    try:
        assert [type(i).__name__ for i in host.interceptors] == [
            "_ServerSpans",
            "RequestContextInterceptor",
            "AuthInterceptor",
            "TextFieldInterceptor",
        ]
    finally:
        await host.stop(0.1)
    async with insecure_channel("127.0.0.1:1", internal_token="t") as channel:
        hooks = [type(i).__name__ for i in channel._unary_unary_interceptors]
        streaming = [type(i.hook).__name__ for i in channel._unary_stream_interceptors]
    assert hooks == streaming == ["_ClientSpans", "_Propagate", "InternalTokenInterceptor"]
