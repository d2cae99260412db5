"""The services of the stack, as the dev runner and the edge see them. Services are started by module
name, so nothing here imports a service (libs never import services)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True, kw_only=True)
class ServiceDef:
    name: str
    module: str
    port_env: str
    default_port: int
    grpc_services: tuple[str, ...]  # routed by the edge
    health_service: str
    reflection: bool = False  # the edge sends grpcurl's reflection calls here


POD_CONTROLLER = ServiceDef(
    name="pod-controller", module="thermostat.pod_controller", port_env="POD_CONTROLLER_PORT",
    default_port=50061, grpc_services=("thermostat.pods.v1.PodController",),
    health_service="thermostat.pods.v1.PodController", reflection=True,
)
IDLE_MONITOR = ServiceDef(
    name="idle-monitor", module="thermostat.idle_monitor", port_env="IDLE_MONITOR_PORT",
    default_port=50062, grpc_services=("thermostat.monitor.v1.IdleMonitor",),
    health_service="thermostat.monitor.v1.IdleMonitor",
)
SERVICES = (POD_CONTROLLER, IDLE_MONITOR)
