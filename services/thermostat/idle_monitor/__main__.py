"""`python -m thermostat.idle_monitor` — run the idle monitor."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import grpc
from grpc import aio

from thermostat.chassis.clock import SYSTEM_CLOCK, Clock
from thermostat.chassis.metrics import Metrics
from thermostat.chassis.registry import IDLE_MONITOR
from thermostat.chassis.replica import replica_id
from thermostat.chassis.request_context import insecure_channel, outgoing_metadata
from thermostat.chassis.runner import service_main
from thermostat.chassis.server import ServiceHost, ServiceSpec
from thermostat.metering.v1 import metering_pb2, metering_pb2_grpc
from thermostat.monitor.v1 import monitor_pb2_grpc
from thermostat.pods.v1 import pods_pb2_grpc
from thermostat.policy.common.pod_options import PodOptions, parse_pod_options
from thermostat.policy.common.warm_hours import WarmHours, WarmHoursError, warm_hours_of
from thermostat.policy.idle.monitor_options import parse_monitor_options
from thermostat.policy.idle.monitor_watch import Watch
from thermostat.store.db import Store

from .leader import PodLeader
from .metrics import MonitorMetrics
from .repository import MonitorRepository
from .requests import RequestReports
from .scrape_clients import ScrapeClients
from .servicer import IdleMonitorServicer
from .settings import IdleMonitorSettings
from .ticker import BudgetCheck, PodTicker
from .watch import PodWatch

log = logging.getLogger("thermostat.idle_monitor")


@dataclass
class Monitor:
    """The wired monitor: its host, a watch per named pod, and the leaders of the pods being ticked."""

    host: ServiceHost
    watches: dict[str, PodWatch]
    leaders: list[PodLeader] = field(default_factory=list)
    tasks: list[asyncio.Task[None]] = field(default_factory=list)


async def build(
    settings: IdleMonitorSettings, env: Mapping[str, str], store: Store, *, clock: Clock = SYSTEM_CLOCK
) -> Monitor:
    """Wire the monitor. A pod is ticked once the pod controller reports it configured; until then the monitor
    stays up and SERVING and watches nothing for it (policy/monitor_watch.py) — it never exits for want of one."""
    options, warnings = parse_monitor_options(env)
    for warning in warnings:
        log.warning("[RunPodIdleMonitor] options: %s", warning)
    pods = parse_pod_options(env).pods
    warm = read_warm_hours(env, pods)
    log.info(
        "pods %s, each watched once the pod controller reports it configured (asked every %ss until then): "
        "idle %s min (%d ticks), check %ss, boot grace %s min (%d ticks), runtime cap %s min, stall guard %s",
        ", ".join(p.name for p in pods),
        settings.monitor_recheck_seconds,
        options.idle_minutes,
        options.idle_threshold,
        options.check_seconds,
        options.boot_grace_minutes,
        options.boot_grace_threshold,
        options.max_runtime_minutes,
        f"{options.stall_window_minutes:g} min ({options.stall_threshold} ticks)" if options.stall_threshold else "off",
    )
    for name, hours in warm.items():
        if hours is not None:
            log.info("pod %s: warm hours %s: no idle stop inside them", name, hours.text)
            if options.max_runtime is not None and hours.longest > options.max_runtime:
                log.warning(
                    "pod %s: a warm window of %s outlasts MAX_RUNTIME_MINUTES=%g: the runtime cap stops the pod "
                    "inside its warm hours, and nothing wakes it again until the next window (or a user)",
                    name,
                    hours.longest,
                    options.max_runtime_minutes,
                )
    # a controller that comes up (or back, with its secret) is found within one re-check, not a 2-minute backoff
    # and its internal calls (ObserveVolume, ReportReadiness, StopPods) carry the deployment's internal token
    token = settings.internal_token()
    if token is None:
        log.warning(
            "THERMOSTAT_INTERNAL_TOKEN is unset: the pod controller refuses this monitor's internal calls "
            "(readiness, stops), so no pod is watched or idle-stopped until both restart with it"
        )
    channel = insecure_channel(
        settings.pod_controller_addr, max_reconnect_seconds=settings.monitor_recheck_seconds, internal_token=token
    )
    internal = pods_pb2_grpc.PodControllerInternalStub(channel)
    metering_channel = None
    budget: BudgetCheck | None = None
    if settings.metering_addr:
        metering_channel = insecure_channel(
            settings.metering_addr, max_reconnect_seconds=settings.monitor_recheck_seconds, internal_token=token
        )
        budget = budget_check(
            metering_pb2_grpc.MeteringInternalStub(metering_channel), settings.controller_timeout_seconds
        )
    replica = replica_id()
    metrics = MonitorMetrics(Metrics())
    leases = store.leases.observed(metrics.takeover)
    states = MonitorRepository(store.pool)  # the one part of the monitor that queries the pool
    leaders: list[PodLeader] = []
    tasks: list[asyncio.Task[None]] = []
    stopping = False

    def ticking(pod: PodOptions) -> Callable[[], None]:
        def start() -> None:
            if stopping:
                return  # an answer that lands mid-shutdown starts nothing
            leader = PodLeader(
                PodTicker(
                    pod_name=pod.name,
                    controller=internal,
                    scrapes=ScrapeClients(),
                    states=states,
                    options=options,
                    replica=replica,
                    scrape_timeout=settings.scrape_timeout_seconds,
                    controller_timeout=settings.controller_timeout_seconds,
                    heard=watches[pod.name].heard,
                    budget=budget,
                    metrics=metrics,
                    warm_hours=warm[pod.name],
                ),
                leases,
                states,
                replica=replica,
                lease_seconds=settings.monitor_lease_seconds,
                check_seconds=options.check_seconds,
                clock=clock,
                metrics=metrics,
            )
            leaders.append(leader)
            tasks.append(asyncio.create_task(leader.run(), name=f"monitor:{pod.name}"))

        return start

    watches = {
        p.name: PodWatch(
            p.name,
            internal,
            recheck_seconds=settings.monitor_recheck_seconds,
            controller_timeout=settings.controller_timeout_seconds,
            start_ticking=ticking(p),
            clock=clock,
        )
        for p in pods
    }

    async def start_watching() -> None:
        tasks.extend(asyncio.create_task(watch.run(), name=f"watch:{watch.pod_name}") for watch in watches.values())

    async def stop_watching() -> None:
        nonlocal stopping
        stopping = True
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        for leader in leaders:
            await leader.ticker.scrapes.aclose()
        await channel.close()
        if metering_channel is not None:
            await metering_channel.close()

    def watch_of(name: str) -> Watch:
        return watches[name].watch

    def register(server: aio.Server) -> None:
        monitor_pb2_grpc.add_IdleMonitorServicer_to_server(
            IdleMonitorServicer(
                pods,
                states,
                options,
                pods_pb2_grpc.PodControllerStub(channel),
                settings.controller_timeout_seconds,
                watch_of=watch_of,
                store_read_timeout=settings.store_read_timeout_seconds,
                warm_hours=warm,
                clock=clock,
            ),
            server,
        )
        monitor_pb2_grpc.add_IdleMonitorInternalServicer_to_server(RequestReports(pods, states), server)

    host = ServiceHost(
        ServiceSpec(
            name=IDLE_MONITOR.name,
            service_names=IDLE_MONITOR.served,
            register=register,
            dependency_check=store.ping,
            on_start=[start_watching],
            on_stop=[stop_watching],
            internal_token=token,
            metrics=metrics.metrics,
        ),
        probe_seconds=settings.health_probe_seconds,
    )
    return Monitor(host=host, watches=watches, leaders=leaders, tasks=tasks)


def read_warm_hours(env: Mapping[str, str], pods: Sequence[PodOptions]) -> dict[str, WarmHours | None]:
    """Each pod's warm hours; a malformed value stops the start with an error naming the variable (exit 2)."""
    try:
        return {pod.name: warm_hours_of(env, pod.name) for pod in pods}
    except WarmHoursError as error:
        print(f"invalid configuration:\n  {error}", file=sys.stderr)
        raise SystemExit(2) from None


def budget_check(stub: metering_pb2_grpc.MeteringInternalStub, timeout: float) -> BudgetCheck:
    """Whether a pod's budget is exhausted, as metering judges it now; None when metering does not answer
    (logged; the pod is not stopped for a budget nobody could read — the wake path refuses instead)."""

    async def exhausted(pod_name: str) -> bool | None:
        try:
            verdict = await stub.CheckPodBudget(
                metering_pb2.CheckPodBudgetRequest(name=pod_name, projected_usd=0.0),
                timeout=timeout,
                metadata=outgoing_metadata(),
            )
        except grpc.aio.AioRpcError as error:
            log.warning("pod %s: budget unknown: metering unreachable (%s)", pod_name, error.code().name)
            return None
        if verdict.exhausted:
            log.warning("pod %s: %s", pod_name, verdict.reason)
        return bool(verdict.exhausted)

    return exhausted


async def build_host(settings: IdleMonitorSettings, env: Mapping[str, str], store: Store) -> ServiceHost:
    return (await build(settings, env, store)).host


if __name__ == "__main__":
    sys.exit(service_main(IdleMonitorSettings, IDLE_MONITOR, build=build_host))
