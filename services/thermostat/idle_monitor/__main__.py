"""`python -m thermostat.idle_monitor` — run the idle monitor."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field

import grpc
from grpc import aio

from thermostat.chassis.registry import IDLE_MONITOR
from thermostat.chassis.replica import replica_id
from thermostat.chassis.request_context import insecure_channel
from thermostat.chassis.runner import run_service
from thermostat.chassis.server import ServiceHost, ServiceSpec
from thermostat.monitor.v1 import monitor_pb2_grpc
from thermostat.pods.v1 import pods_pb2, pods_pb2_grpc
from thermostat.policy.monitor_options import parse_monitor_options
from thermostat.policy.pod_options import PodOptions, parse_pod_options
from thermostat.store.db import Store

from .leader import PodLeader
from .scrape_clients import ScrapeClients
from .servicer import IdleMonitorServicer
from .settings import IdleMonitorSettings
from .state_store import MonitorStateStore
from .ticker import PodTicker

log = logging.getLogger("thermostat.idle_monitor")

@dataclass
class Monitor:
    host: ServiceHost
    leaders: list[PodLeader] = field(default_factory=list)
    tasks: list[asyncio.Task[None]] = field(default_factory=list)


async def configured_pods(internal: pods_pb2_grpc.PodControllerInternalStub, pods: tuple[PodOptions, ...],
                          timeout: float) -> list[PodOptions]:
    """The pods the controller says are configured; waits while the controller is not reachable yet.

    A name the controller does not know (NOT_FOUND: the two services were given different pod lists) is
    not watched and says so; retrying it would loop forever behind a "not reachable" warning.
    """
    while True:
        try:
            active = []
            for pod in pods:
                try:
                    reply = await internal.ObserveVolume(pods_pb2.ObserveVolumeRequest(name=pod.name), timeout=timeout)
                except grpc.aio.AioRpcError as error:
                    if error.code() is not grpc.StatusCode.NOT_FOUND:
                        raise
                    log.error("pod %s: the pod controller does not know this name (is RUNPOD_PODS the same for "
                              "both services?); not watching it", pod.name)
                    continue
                if reply.configured:
                    active.append(pod)
            return active
        except grpc.aio.AioRpcError as error:
            log.warning("pod controller not reachable yet (%s); retrying", error.code().name)
            await asyncio.sleep(1)


async def build(settings: IdleMonitorSettings, env: Mapping[str, str], store: Store) -> Monitor | None:
    """Wire the monitor; None when no pod is configured (the caller exits)."""
    options, warnings = parse_monitor_options(env)
    for warning in warnings:
        log.warning("[RunPodIdleMonitor] options: %s", warning)
    pods = parse_pod_options(env).pods
    channel = insecure_channel(settings.pod_controller_addr)
    internal = pods_pb2_grpc.PodControllerInternalStub(channel)
    active = await configured_pods(internal, pods, settings.controller_timeout_seconds)
    if not active:
        log.error("idle monitor: no pod is configured (RUNPOD_API_KEY unset or RUNPOD_VOLUME_ID blank); "
                  "nothing to watch, exiting")
        await channel.close()
        return None
    log.info("watching %s: idle %s min (%d ticks), check %ss, boot grace %s min (%d ticks), runtime cap %s min",
             ", ".join(p.name for p in active), options.idle_minutes, options.idle_threshold, options.check_seconds,
             options.boot_grace_minutes, options.boot_grace_threshold, options.max_runtime_minutes)
    replica = replica_id()
    states = MonitorStateStore(store.pool)
    leaders = [
        PodLeader(PodTicker(pod_name=p.name, controller=internal, scrapes=ScrapeClients(), states=states,
                            options=options, replica=replica, scrape_timeout=settings.scrape_timeout_seconds,
                            controller_timeout=settings.controller_timeout_seconds),
                  store.leases, states, replica=replica, lease_seconds=settings.monitor_lease_seconds,
                  check_seconds=options.check_seconds)
        for p in active
    ]
    tasks: list[asyncio.Task[None]] = []

    async def start_leaders() -> None:
        tasks.extend(asyncio.create_task(leader.run(), name=f"monitor:{leader.ticker.pod_name}")
                     for leader in leaders)

    async def stop_leaders() -> None:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        for leader in leaders:
            await leader.ticker.scrapes.aclose()
        await channel.close()

    def register(server: aio.Server) -> None:
        monitor_pb2_grpc.add_IdleMonitorServicer_to_server(IdleMonitorServicer(
            pods, states, options, pods_pb2_grpc.PodControllerStub(channel), settings.controller_timeout_seconds),
            server)

    host = ServiceHost(
        ServiceSpec(name=IDLE_MONITOR.name, service_names=IDLE_MONITOR.served, register=register,
                    dependency_check=store.ping, on_start=[start_leaders], on_stop=[stop_leaders]),
        probe_seconds=settings.health_probe_seconds,
    )
    return Monitor(host=host, leaders=leaders, tasks=tasks)


async def build_host(settings: IdleMonitorSettings, env: Mapping[str, str], store: Store) -> ServiceHost | None:
    monitor = await build(settings, env, store)
    return None if monitor is None else monitor.host


if __name__ == "__main__":
    sys.exit(asyncio.run(run_service(IdleMonitorSettings, IDLE_MONITOR, build=build_host)))
