"""`python -m thermostat.pod_controller` — run the pod controller."""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping

from grpc import aio

from thermostat.chassis.auth import TokenRule, method_name
from thermostat.chassis.clock import SYSTEM_CLOCK, Clock
from thermostat.chassis.metrics import Metrics
from thermostat.chassis.registry import POD_CONTROLLER, public_services
from thermostat.chassis.replica import replica_id
from thermostat.chassis.request_context import insecure_channel
from thermostat.chassis.runner import service_main
from thermostat.chassis.server import ServiceHost, ServiceSpec
from thermostat.metering.v1 import metering_pb2_grpc
from thermostat.pods.v1 import pods_pb2, pods_pb2_grpc
from thermostat.policy.common.pod_options import parse_pod_options
from thermostat.policy.common.warm_hours import WarmHoursError, warm_hours_of
from thermostat.policy.idle.monitor_options import parse_monitor_options
from thermostat.providers.runpod.client import RunPodV2Client
from thermostat.store.db import Store

from .budget_guard import BudgetGuard
from .metrics import PodMetrics
from .orphan_sweep import PodOrphanSweeper
from .repository import PodRepository
from .servicer import PodControl, PodControllerInternalServicer, PodControllerServicer
from .settings import PodControllerSettings
from .wake_gate import WakeGate
from .wake_service import WakeService
from .warm_schedule import WarmSchedule

log = logging.getLogger("thermostat.pod_controller")

PUBLIC = pods_pb2.DESCRIPTOR.services_by_name["PodController"].full_name

OPERATOR_HEADER = "x-rig-operator-token"


def auth_rules(settings: PodControllerSettings) -> dict[str, TokenRule]:
    """Start and stop cost money: operator token for both; the wake-only token for start as well."""
    operator = settings.rig_operator_token.get_secret_value() if settings.rig_operator_token else None
    wake = settings.rig_wake_token.get_secret_value() if settings.rig_wake_token else None
    return {
        method_name(PUBLIC, "StartPod"): TokenRule(tokens=(operator, wake), headers=(OPERATOR_HEADER,)),
        method_name(PUBLIC, "StopPod"): TokenRule(tokens=(operator,), headers=(OPERATOR_HEADER,)),
        method_name(PUBLIC, "ListPodOrphans"): TokenRule(tokens=(operator,), headers=(OPERATOR_HEADER,)),
    }


async def build(
    settings: PodControllerSettings, env: Mapping[str, str], store: Store, *, clock: Clock = SYSTEM_CLOCK
) -> ServiceHost:
    """Wire the pod controller over an open store; the host's stop hooks close what this opened."""
    options = parse_pod_options(env)
    for warning in options.warnings:
        log.warning("[RunPodWake] options: %s", warning)
    try:
        warm = {pod.name: warm_hours_of(env, pod.name) for pod in options.pods}
    except WarmHoursError as error:
        print(f"invalid configuration:\n  {error}", file=sys.stderr)
        raise SystemExit(2) from None
    if settings.runpod_api_key is None:
        # read once: a key provisioned later takes effect when this process restarts (deploy/README.md)
        log.warning(
            "RUNPOD_API_KEY is unset: every pod is unconfigured (start/stop 503, GET configured:false) "
            "until the controller restarts with it"
        )
    for pod in options.pods:
        if not pod.configured:
            log.warning("pod %s: volume id blank: unconfigured (start/stop 503, GET configured:false)", pod.name)
        log.info(
            "pod %s: volume=%s datacenter=%s max_price=%.2f template=%s",
            pod.name,
            pod.volume_id or "-",
            pod.datacenter_id,
            pod.max_price_per_hour,
            "set" if pod.template_id else "unset",
        )
    client = RunPodV2Client(
        settings.runpod_api_key.get_secret_value() if settings.runpod_api_key else None,
        base_url=settings.runpod_v2_base_url,
        timeout_seconds=settings.runpod_timeout_seconds,
    )
    records = PodRepository(
        store.pool, timeout=settings.record_timeout_seconds, read_timeout=settings.store_read_timeout_seconds
    )
    metrics = PodMetrics(Metrics())
    gate = WakeGate(
        records,
        store.leases.observed(metrics.takeover),
        replica=replica_id(),
        lease_seconds=settings.wake_lease_seconds,
        call_budget=settings.runpod_timeout_seconds,
        clock=clock,
    )
    monitor_options, _ = parse_monitor_options(env)  # the monitor logs their warnings; here they size projections
    metering = (
        insecure_channel(settings.metering_addr, max_reconnect_seconds=5, internal_token=settings.internal_token())
        if settings.metering_addr
        else None
    )
    if metering is None:
        log.info("METERING_ADDR is unset: wakes are not checked against budgets")
    budget = BudgetGuard(
        metering_pb2_grpc.MeteringInternalStub(metering) if metering is not None else None,
        monitor_options,
        timeout=settings.metering_timeout_seconds,
    )
    control = PodControl(
        options.pods,
        client,
        records,
        gate,
        # the real clock: a wake's polls pace RunPod's own boot, which no test clock steps
        WakeService(client, records, budget=budget, metrics=metrics),
        watch_poll_seconds=settings.watch_poll_seconds,
        clock=clock,
        metrics=metrics,
    )

    orphans = PodOrphanSweeper(
        client,
        records,
        store.leases.observed(metrics.takeover).using(clock),
        options.pods,
        mode=settings.orphan_sweep,
        every_seconds=settings.orphan_sweep_seconds,
        replica=replica_id(),
        metrics=metrics,
    )

    schedule = WarmSchedule(
        options.pods,
        warm,
        records,
        store.leases.observed(metrics.takeover).using(clock),
        lambda pod: control.run_wake(pod, trigger="schedule"),
        replica=replica_id(),
        every_seconds=settings.warm_schedule_seconds,
        clock=clock,
    )
    for name, hours in warm.items():
        if hours is not None:
            log.info("pod %s: warm hours %s: woken before each window opens (trigger schedule)", name, hours.text)

    def register(server: aio.Server) -> None:
        pods_pb2_grpc.add_PodControllerServicer_to_server(PodControllerServicer(control, orphans), server)
        pods_pb2_grpc.add_PodControllerInternalServicer_to_server(PodControllerInternalServicer(control), server)

    async def shutdown() -> None:
        await orphans.stop()
        await schedule.stop()
        await gate.drain(settings.shutdown_grace_seconds)
        await client.aclose()
        if metering is not None:
            await metering.close()

    return ServiceHost(
        # reflection lists every public service of the house (never an internal one): the edge sends grpcurl's
        # reflection calls here
        ServiceSpec(
            name=POD_CONTROLLER.name,
            service_names=POD_CONTROLLER.served,
            register=register,
            auth_rules=auth_rules(settings),
            dependency_check=store.ping,
            on_start=[orphans.start, schedule.start],
            on_stop=[shutdown],
            reflection_names=public_services(),
            internal_token=settings.internal_token(),
            metrics=metrics.metrics,
        ),
        probe_seconds=settings.health_probe_seconds,
    )


if __name__ == "__main__":
    sys.exit(service_main(PodControllerSettings, POD_CONTROLLER, build=build))
