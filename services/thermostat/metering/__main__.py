"""`python -m thermostat.metering` — run metering."""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Mapping

from grpc import aio

from thermostat.chassis.auth import TokenRule, method_name
from thermostat.chassis.clock import SYSTEM_CLOCK, Clock
from thermostat.chassis.metrics import Metrics
from thermostat.chassis.registry import METERING
from thermostat.chassis.replica import replica_id
from thermostat.chassis.request_context import insecure_channel
from thermostat.chassis.runner import service_main
from thermostat.chassis.server import ServiceHost, ServiceSpec
from thermostat.metering.v1 import metering_pb2, metering_pb2_grpc
from thermostat.pods.v1 import pods_pb2_grpc
from thermostat.policy.common.pod_options import parse_pod_options
from thermostat.pool.v1 import pool_pb2_grpc
from thermostat.store.db import Store

from .ledger import AfterRead, Feed, Ledger, LedgerLeader, PodActionFeed, PoolMachineFeed, PoolUsageFeed, _nothing
from .metrics import MAX_TENANTS, MeteringMetrics
from .pool_access import PoolTokens, pool_auth_rules, pool_tenant_rules
from .repository import MeteringRepository
from .servicer import MeteringCore, MeteringInternalServicer, MeteringServicer
from .settings import MeteringSettings

log = logging.getLogger("thermostat.metering")

LOOP_STOP_SECONDS = 10.0
"""How long a stop waits for its cancelled ledger loops to end."""

PUBLIC = metering_pb2.DESCRIPTOR.services_by_name["Metering"].full_name
OPERATOR_HEADER = "x-rig-operator-token"


def auth_rules(settings: MeteringSettings) -> dict[str, TokenRule]:
    """A budget is a cost guard: setting one takes the operator token (reads follow the pod GET: open)."""
    operator = settings.rig_operator_token.get_secret_value() if settings.rig_operator_token else None
    rule = TokenRule(tokens=(operator,), headers=(OPERATOR_HEADER,))
    return {method_name(PUBLIC, "SetPodBudget"): rule, method_name(PUBLIC, "SetPodBudgetJson"): rule}


async def build(
    settings: MeteringSettings,
    env: Mapping[str, str],
    store: Store,
    *,
    clock: Clock = SYSTEM_CLOCK,
    after_read: AfterRead = _nothing,
) -> ServiceHost:
    """Wire metering over an open store: its servicers and the ledger's ingest (one replica, by lease)."""
    pods = parse_pod_options(env).pods
    repository = MeteringRepository(store.pool)
    channel = insecure_channel(
        settings.pod_controller_addr, max_reconnect_seconds=5, internal_token=settings.internal_token()
    )
    channels = [channel]
    feeds: list[Feed] = [
        PodActionFeed(pods_pb2_grpc.PodControllerInternalStub(channel), timeout=settings.feed_timeout_seconds)
    ]
    if settings.pool_dispatcher_addr:
        pool_channel = insecure_channel(
            settings.pool_dispatcher_addr, max_reconnect_seconds=5, internal_token=settings.internal_token()
        )
        channels.append(pool_channel)
        pool_stub = pool_pb2_grpc.PoolDispatcherInternalStub(pool_channel)
        feeds.append(PoolUsageFeed(pool_stub, timeout=settings.feed_timeout_seconds))
        feeds.append(PoolMachineFeed(pool_stub, timeout=settings.feed_timeout_seconds))
    metrics = MeteringMetrics(Metrics())
    ledger = Ledger(
        repository, feeds, page_size=settings.ledger_page_size, clock=clock, after_read=after_read, metrics=metrics
    )
    leader = LedgerLeader(
        ledger,
        store.leases.observed(metrics.takeover),
        replica=replica_id(),
        lease_seconds=settings.ledger_lease_seconds,
        poll_seconds=settings.ledger_poll_seconds,
        clock=clock,
    )
    pool_tokens = PoolTokens(
        api=settings.strata_pool_token.get_secret_value() if settings.strata_pool_token else None,
        admin=settings.strata_pool_admin_token.get_secret_value() if settings.strata_pool_admin_token else None,
    )
    core = MeteringCore(pods, repository, clock=clock)

    async def lag() -> None:
        metrics.feeds(await repository.feeds())

    async def spend() -> None:
        now = clock.now()
        pod_spend = [(pod.name, *await core.budget_and_spend(pod, now)) for pod in pods]
        tenants = await core.tenants_spend(now, limit=MAX_TENANTS)
        metrics.clear_spend()  # a budget cleared since the last scrape leaves no stale series
        for name, budget, today, month in pod_spend:
            metrics.spent("pod", name, budget, today, month)
        for tenant, (budget, today, month) in tenants.items():
            metrics.spent("tenant", tenant, budget, today, month)

    metrics.metrics.on_scrape("ledger-lag", lag)
    metrics.metrics.on_scrape("spend", spend)
    tasks: list[asyncio.Task[None]] = []

    def register(server: aio.Server) -> None:
        metering_pb2_grpc.add_MeteringServicer_to_server(MeteringServicer(core), server)
        metering_pb2_grpc.add_MeteringInternalServicer_to_server(MeteringInternalServicer(core), server)

    async def start() -> None:
        tasks.append(asyncio.create_task(leader.run(), name="metering-ledger"))

    async def shutdown() -> None:
        for task in tasks:
            task.cancel()
        if tasks:  # waited for, not awaited: a CancelledError here would be this stop's own, never to be suppressed
            # bounded: a loop that swallowed its cancellation must not hold the stop (a SIGTERM) for ever
            _, running = await asyncio.wait(tasks, timeout=LOOP_STOP_SECONDS)
            for task in running:
                log.error(
                    "%s did not end within %.0f s of its cancel; stopping anyway", task.get_name(), LOOP_STOP_SECONDS
                )
            for task in tasks:  # a loop that had ended on an error before the stop: said once, here
                if task.done() and not task.cancelled() and task.exception() is not None:
                    log.error("%s had ended on an error: %r", task.get_name(), task.exception())
        for open_channel in channels:
            await open_channel.close()

    return ServiceHost(
        ServiceSpec(
            name=METERING.name,
            service_names=METERING.served,
            register=register,
            auth_rules={**auth_rules(settings), **pool_auth_rules(pool_tokens)},
            tenant_rules=pool_tenant_rules(),
            dependency_check=store.ping,
            on_start=[start],
            on_stop=[shutdown],
            internal_token=settings.internal_token(),
            metrics=metrics.metrics,
        ),
        probe_seconds=settings.health_probe_seconds,
    )


if __name__ == "__main__":
    sys.exit(service_main(MeteringSettings, METERING, build=build))
