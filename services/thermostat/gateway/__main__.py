"""`python -m thermostat.gateway` — run the inference gateway: the OpenAI HTTP API on GATEWAY_HTTP_PORT (the edge
routes /openai/v1 there) and its gRPC surface, health and reflection on GATEWAY_PORT."""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping

import grpc
from aiohttp import web
from grpc import aio
from grpc_health.v1 import health_pb2, health_pb2_grpc

from thermostat.chassis.auth import TokenRule
from thermostat.chassis.registry import GATEWAY, POD_CONTROLLER
from thermostat.chassis.request_context import insecure_channel
from thermostat.chassis.runner import service_main
from thermostat.chassis.server import ServiceHost, ServiceSpec
from thermostat.gateway.v1 import gateway_pb2_grpc
from thermostat.monitor.v1 import monitor_pb2_grpc
from thermostat.pods.v1 import pods_pb2_grpc
from thermostat.policy.common.pod_options import parse_pod_options
from thermostat.policy.gateway.hold import wait_bound_seconds
from thermostat.policy.idle.monitor_options import parse_monitor_options
from thermostat.store.db import Store

from .activity import ActivityReporter
from .app import Gateway, HoldLimits
from .engine import Engines
from .metrics import GatewayMetrics
from .servicer import InferenceGatewayServicer
from .settings import GatewaySettings
from .views import PodViews

log = logging.getLogger("thermostat.gateway")


async def build(settings: GatewaySettings, env: Mapping[str, str], store: Store) -> ServiceHost:
    """Wire the gateway; the HTTP server starts with the gRPC host and stops before it."""
    pods = parse_pod_options(env).pods
    monitor_options, _ = parse_monitor_options(env)  # the monitor logs its own warnings
    token = settings.internal_token()
    if token is None:
        log.warning(
            "THERMOSTAT_INTERNAL_TOKEN is unset: the pod controller refuses this gateway's wakes and the idle monitor "
            "its activity reports; requests for a pod that is not ready are refused"
        )
    tokens = settings.inference_tokens()
    if not any(tokens):
        log.warning("THERMOSTAT_INFERENCE_TOKEN and RIG_OPERATOR_TOKEN are unset: every request is refused (401)")
    controller = insecure_channel(settings.pod_controller_addr, max_reconnect_seconds=5, internal_token=token)
    monitor = insecure_channel(settings.idle_monitor_addr, max_reconnect_seconds=5, internal_token=token)
    health = health_pb2_grpc.HealthStub(controller)
    views = PodViews(
        pods,
        pods_pb2_grpc.PodControllerStub(controller),
        pods_pb2_grpc.PodControllerInternalStub(controller),
        timeout=settings.controller_timeout_seconds,
    )
    reporter = ActivityReporter(
        monitor_pb2_grpc.IdleMonitorInternalStub(monitor),
        live_seconds=settings.gateway_report_live_seconds,
        timeout=settings.gateway_report_timeout_seconds,
    )
    engines = Engines(user_agent=settings.gateway_user_agent, connect_timeout=settings.gateway_connect_timeout_seconds)
    limits = HoldLimits(
        max_held=settings.gateway_max_held_per_pod,
        wait_bound_seconds=wait_bound_seconds(settings.gateway_wake_wait_seconds, monitor_options.boot_grace_minutes),
        comment_seconds=settings.gateway_hold_comment_seconds,
    )
    metrics = GatewayMetrics()
    gateway = Gateway(pods, views, engines, reporter, tokens=TokenRule(tokens=tokens), limits=limits, metrics=metrics)
    runner = web.AppRunner(gateway.app(), handler_cancellation=True, access_log=None)

    async def start() -> None:
        await engines.start()
        await views.start()
        await reporter.start()
        await runner.setup()
        site = web.TCPSite(runner, settings.gateway_http_host, settings.gateway_http_port)
        await site.start()
        log.info(
            "OpenAI API on http://%s:%d/openai/v1 for %s (held per pod at most %d, for at most %g s)",
            settings.gateway_http_host,
            bound_port(runner),
            ", ".join(p.name for p in pods),
            limits.max_held,
            limits.wait_bound_seconds,
        )

    async def stop() -> None:
        await runner.cleanup()
        await reporter.stop()
        await views.stop()
        await engines.stop()
        await controller.close()
        await monitor.close()

    async def controller_serving() -> bool:
        """The gateway serves while the pod controller does: without it no pod wakes and no view is current."""
        try:
            reply = await health.Check(
                health_pb2.HealthCheckRequest(service=POD_CONTROLLER.health_service),
                timeout=settings.gateway_connect_timeout_seconds,
            )
        except grpc.aio.AioRpcError:
            return False
        return bool(reply.status == health_pb2.HealthCheckResponse.SERVING)

    def register(server: aio.Server) -> None:
        gateway_pb2_grpc.add_InferenceGatewayServicer_to_server(InferenceGatewayServicer(pods, views), server)

    return ServiceHost(
        ServiceSpec(
            name=GATEWAY.name,
            service_names=GATEWAY.served,
            register=register,
            dependency_check=controller_serving,
            on_start=[start],
            on_stop=[stop],
            internal_token=token,
            metrics=metrics.metrics,
        ),
        probe_seconds=settings.health_probe_seconds,
    )


def bound_port(runner: web.AppRunner) -> int:
    """The HTTP port the server listens on (GATEWAY_HTTP_PORT=0 picks one)."""
    for address in runner.addresses:
        return int(address[1])
    return 0


if __name__ == "__main__":
    sys.exit(service_main(GatewaySettings, GATEWAY, build=build))
