"""`python -m thermostat.pool_dispatcher` — run the pool dispatcher."""

from __future__ import annotations

import logging
import sys
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from grpc import aio

from thermostat.chassis.clock import SYSTEM_CLOCK, Clock
from thermostat.chassis.metrics import Metrics
from thermostat.chassis.registry import POOL_DISPATCHER
from thermostat.chassis.request_context import insecure_channel
from thermostat.chassis.runner import service_main
from thermostat.chassis.server import ServiceHost, ServiceSpec
from thermostat.metering.v1 import metering_pb2_grpc
from thermostat.policy.pool.backends import BackendChoice, check_enabled
from thermostat.policy.pool.departure import Departure, departure_for
from thermostat.policy.pool.machine_type import BackendKind, Catalogue, parse_catalogue_json
from thermostat.policy.pool.retention import BatchSize
from thermostat.pool.v1 import pool_pb2_grpc
from thermostat.providers.pool.backend import Backend
from thermostat.providers.pool.docker import DockerBackend
from thermostat.providers.pool.local import LocalBackend
from thermostat.providers.pool.settings import ProviderBackend, build_backends, missing_settings
from thermostat.providers.pool.worker_client import WorkerClient
from thermostat.store.db import Store

from .access import Tokens, auth_rules, tenant_rules
from .budget_gate import BudgetGate
from .budget_reaper import BudgetReaper
from .dispatcher import Dispatcher
from .internal import PoolInternalServicer
from .metering_repository import PoolMeteringRepository
from .metrics import PoolMetrics
from .orphan_sweep import OrphanSweeper
from .repository import PoolRepository
from .repository.retention import RetentionRepository
from .retention import RetentionPruner
from .servicer import PoolDispatcherServicer
from .settings import GRPC_MESSAGE_BYTES, PoolDispatcherSettings

log = logging.getLogger("thermostat.pool_dispatcher")


def configured_catalogue(value: str | None, choice: BackendChoice | None = None) -> Catalogue:
    """POOL_MACHINE_TYPES: a JSON list in the PUT shape, or a path to a file holding one; unset: empty. An entry
    without `backend` runs on POOL_DEFAULT_BACKEND; one naming a backend not in POOL_ENABLED_BACKENDS stops the
    start (the deployment's own file asks for what the deployment refuses; a stored catalogue is only logged)."""
    choice = choice or BackendChoice()
    if not value or not value.strip():
        return Catalogue()
    text = value
    if not value.lstrip().startswith("["):
        try:
            text = Path(value).read_text(encoding="utf-8")
        except OSError as error:
            raise SystemExit(f"POOL_MACHINE_TYPES: neither a JSON list nor a readable file: {error.strerror}") from None
    parsed = parse_catalogue_json(text, default_backend=choice.default)
    if not isinstance(parsed, Catalogue):
        raise SystemExit(f"POOL_MACHINE_TYPES: {parsed.detail}")
    enabled = check_enabled(parsed, enabled=choice.enabled)
    if not isinstance(enabled, Catalogue):
        raise SystemExit(f"POOL_MACHINE_TYPES: {enabled.detail}")
    return parsed


def grpc_options() -> list[tuple[str, int]]:
    """Messages up to the payload limit plus headroom, so an oversized payload is a 413 of ours."""
    return [
        ("grpc.max_receive_message_length", GRPC_MESSAGE_BYTES),
        ("grpc.max_send_message_length", GRPC_MESSAGE_BYTES),
    ]


@dataclass(frozen=True, slots=True)
class PoolService:
    """The wired service: its host, the dispatcher, the local backend and every backend by kind (tests reach them)."""

    host: ServiceHost
    dispatcher: Dispatcher
    backend: LocalBackend
    backends: Mapping[BackendKind, Backend]
    orphans: OrphanSweeper
    retention: RetentionPruner


async def build(settings: PoolDispatcherSettings, env: Mapping[str, str], store: Store) -> ServiceHost:
    """Wire the pool dispatcher over an open store; the host's start and stop hooks run the dispatcher."""
    return assemble(settings, store).host


def assemble(
    settings: PoolDispatcherSettings,
    store: Store,
    *,
    clock: Clock = SYSTEM_CLOCK,
    run_scaler: bool = True,
) -> PoolService:
    """The service's parts over an open store (`build` for the runner; tests inject the clock)."""
    choice = settings.backend_choice
    catalogue = configured_catalogue(settings.pool_machine_types, choice)
    if settings.strata_pool_token is None:
        log.warning("STRATA_POOL_TOKEN is unset: every call but GetPoolHealth answers 401 until it is set")
    client = WorkerClient(max_result_bytes=settings.pool_max_payload_bytes)
    backend = LocalBackend(client, outlive_process=settings.pool_local_machines_outlive_process)
    # every backend whose settings are present serves at once; a type picks one by its `backend` field
    providers: dict[BackendKind, ProviderBackend] = build_backends(settings, client)
    # local runs `image` as a command on this host: only where the deployment enables it (POOL_ENABLED_BACKENDS)
    backends: dict[BackendKind, Backend] = {
        kind: b for kind, b in {BackendKind.LOCAL: backend, **providers}.items() if kind in choice.enabled
    }
    unconfigured = missing_settings(settings)
    # what is configured is logged beside what the catalogue uses, with each catalogue version (backend_use)
    metrics = PoolMetrics(Metrics())
    repository = PoolRepository(store.pool)
    metrics.count_on_scrape(repository, (kind.value for kind in backends))
    dispatcher = Dispatcher(
        repository=repository,
        leases=store.leases.observed(metrics.takeover),
        backends=backends,
        missing_settings=unconfigured,
        client=client,
        catalogue=catalogue,
        instance_id=settings.pool_instance_id,
        lease_seconds=settings.pool_lease_seconds,
        scaler_seconds=settings.pool_scaler_seconds,
        health_poll_seconds=settings.pool_health_poll_seconds,
        max_workers_total=settings.pool_max_workers_total,
        max_payload_bytes=settings.pool_max_payload_bytes,
        clock=clock,
        run_scaler=run_scaler,
        metrics=metrics,
        backend_choice=choice,
    )
    tokens = Tokens(
        api=settings.strata_pool_token.get_secret_value() if settings.strata_pool_token else None,
        admin=settings.strata_pool_admin_token.get_secret_value() if settings.strata_pool_admin_token else None,
    )

    metering_channel = (
        insecure_channel(settings.metering_addr, max_reconnect_seconds=5, internal_token=settings.internal_token())
        if settings.metering_addr
        else None
    )
    gate = BudgetGate(
        metering_pb2_grpc.MeteringInternalStub(metering_channel) if metering_channel is not None else None,
        timeout=settings.metering_timeout_seconds,
    )

    reaper = BudgetReaper(dispatcher, gate, every_seconds=settings.pool_budget_reap_seconds, clock=clock)
    orphans = OrphanSweeper(
        dispatcher,
        mode=settings.orphan_sweep,
        prefix=settings.pool_name,
        every_seconds=settings.orphan_sweep_seconds,
        clock=clock,
    )
    retention = timedelta(hours=settings.pool_job_retention_hours)
    pruner = RetentionPruner(
        RetentionRepository(store.pool),
        store.leases,
        # this process alone: an instance id restarted elsewhere while this one stalls must not share its term
        holder=f"{dispatcher.instance_id}/{uuid.uuid4().hex[:8]}",
        retention=retention,
        every_seconds=settings.pool_prune_seconds,
        lease_seconds=settings.pool_lease_seconds,
        batch=BatchSize.at_most(settings.pool_prune_batch_rows),
        clock=clock,
        metrics=metrics,
    )

    def register(server: aio.Server) -> None:
        pool_pb2_grpc.add_PoolDispatcherServicer_to_server(
            PoolDispatcherServicer(dispatcher, gate, orphans=orphans, retention=retention), server
        )
        internal = PoolInternalServicer(
            PoolMeteringRepository(store.pool),
            lambda: dispatcher.catalogues.catalogue,
            settle_seconds=settings.pool_usage_settle_seconds,
        )
        pool_pb2_grpc.add_PoolDispatcherInternalServicer_to_server(internal, server)

    async def drain() -> None:  # beside the gRPC drain: in-flight jobs finish, their callers get their results
        if departure_for(host.stopped_by) is Departure.RELEASE:
            await dispatcher.drain(settings.pool_shutdown_grace_seconds)

    async def shutdown() -> None:
        await pruner.stop()
        departure = departure_for(host.stopped_by)
        await reaper.stop()
        await orphans.stop()
        # a deploy drains (the drain hook began it beside the gRPC drain); the pool going away does not wait
        grace = settings.pool_shutdown_grace_seconds if departure is Departure.RELEASE else 0.0
        await dispatcher.close(departure, grace_seconds=grace)
        if departure is Departure.STOP_FLEET:
            await backend.aclose()  # no worker process of ours outlives the pool going away
        else:
            backend.release()  # the released machines run on for the next process (bound ones die with this one)
        for provider in providers.values():
            await provider.aclose()
        await client.aclose()
        if metering_channel is not None:
            await metering_channel.close()

    announce = [b.announce for b in backends.values() if isinstance(b, DockerBackend)]
    host = ServiceHost(
        ServiceSpec(
            name=POOL_DISPATCHER.name,
            service_names=POOL_DISPATCHER.served,
            register=register,
            auth_rules=auth_rules(tokens),
            tenant_rules=tenant_rules(),
            dependency_check=store.ping,
            # a Docker daemon that shares no Engine API version with the pool is said at start (issue 35)
            on_start=[*announce, dispatcher.start, reaper.start, orphans.start, pruner.start],
            on_stop=[shutdown],
            on_drain=[drain],
            # the gRPC drain lets a sync submit wait as long as the dispatcher's drain lets its job run
            stop_grace_seconds=settings.pool_shutdown_grace_seconds,
            grpc_options=grpc_options(),
            internal_token=settings.internal_token(),
            metrics=metrics.metrics,
        ),
        probe_seconds=settings.health_probe_seconds,
    )
    return PoolService(
        host=host, dispatcher=dispatcher, backend=backend, backends=backends, orphans=orphans, retention=pruner
    )


if __name__ == "__main__":
    sys.exit(service_main(PoolDispatcherSettings, POOL_DISPATCHER, build=build))
