"""One call runs a service: a grpc.aio server with health, reflection, auth, request context, Prometheus
`/metrics` (chassis/metrics.py) and a graceful stop.

Health follows the dependencies: every `probe_seconds` the service's dependency check runs (for the
services, a store ping), and the overall status and each service's status are SERVING only while it passes.
The health name `liveness` is SERVING from start to stop whatever the dependencies say: a liveness probe asks
for it, so a store outage takes replicas out of rotation (readiness) without restarting them all, while a
process whose event loop no longer answers still fails it. On SIGTERM/SIGINT the service turns NOT_SERVING
first (load balancers stop sending), stops accepting new RPCs, and gives in-flight ones `grace` seconds to finish.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
import pkgutil
import signal
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from google.protobuf import descriptor_pool
from grpc import aio
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from thermostat.chassis.auth import TOKEN_HINT_ENV, AuthInterceptor, AuthRules, TenantRules
from thermostat.chassis.internal_auth import INTERNAL_TOKEN_ENV, internal_rule, internal_service_names
from thermostat.chassis.metrics import Metrics, MetricsServer
from thermostat.chassis.reflection import enable_described_reflection
from thermostat.chassis.request_context import RequestContextInterceptor
from thermostat.chassis.text_fields import TextFieldInterceptor
from thermostat.chassis.tracing import server_interceptors
from thermostat.chassis.unknown_methods import UnknownMethods

log = logging.getLogger("thermostat.chassis.server")

STOP_MARGIN_SECONDS = 5.0
"""How long past its grace a server's stop may take before the host stops waiting for it."""

LIVENESS = "liveness"
"""The health name a liveness probe asks for: SERVING while the process answers, independent of its store."""

DependencyCheck = Callable[[], Awaitable[bool]]
Hook = Callable[[], Awaitable[None]]


@dataclass(kw_only=True)
class ServiceSpec:
    """ServiceSpec is what a service hands the chassis."""

    name: str
    service_names: Sequence[str]
    register: Callable[[aio.Server], None]
    auth_rules: AuthRules = field(default_factory=dict)
    # per method, the tenant rule checked once its token passed (chassis/tenancy.py)
    tenant_rules: TenantRules = field(default_factory=dict)
    dependency_check: DependencyCheck | None = None
    on_start: Sequence[Hook] = ()
    on_stop: Sequence[Hook] = ()
    # run as the stop begins, beside the gRPC drain and within its grace: a service finishing its own in-flight
    # work (the pool dispatcher's jobs) before the stop hooks run
    on_drain: Sequence[Hook] = ()
    # the service's own termination grace, over the runner's SHUTDOWN_GRACE_SECONDS (the pool's covers its jobs)
    stop_grace_seconds: float | None = None
    # the other services reflection describes when the edge asks (every public service of the house, for grpcurl
    # through the edge); this port's own callers are described only what it serves
    reflection_names: Sequence[str] = ()
    # The deployment's internal token (THERMOSTAT_INTERNAL_TOKEN); None refuses every internal call. Every
    # internal service of the registry, plus any named here, requires it (chassis/internal_auth.py).
    internal_token: str | None = None
    internal_services: Sequence[str] = ()

    @property
    def internal(self) -> frozenset[str]:
        return internal_service_names() | frozenset(self.internal_services)

    # grpc server options (e.g. the pool's raised message sizes for payloads over grpcio's 4 MiB default)
    grpc_options: Sequence[tuple[str, Any]] = ()
    # the service's metric families (its own registry); served at /metrics when the host is given a metrics port
    metrics: Metrics = field(default_factory=Metrics)


class ServiceHost:
    """A running service: its server, its health servicer and its probe loop."""

    def __init__(self, spec: ServiceSpec, *, probe_seconds: float = 2.0) -> None:
        self.spec = spec
        self.probe_seconds = probe_seconds
        self.health = health.aio.HealthServicer()
        self.server: aio.Server | None = None
        self.interceptors: list[aio.ServerInterceptor] = []
        self.port = 0
        self._probe: asyncio.Task[None] | None = None
        self._draining = False
        self.serving = False
        self.metrics_server: MetricsServer | None = None
        self.metrics_port: int | None = None
        self.stopped_by: str | None = None  # the signal's name that stopped it (serve_until_signalled), else None

    async def start(self, host: str = "127.0.0.1", port: int = 0, *, metrics_port: int | None = None) -> int:
        """Serve gRPC on `port` (0: a free one) and, unless `metrics_port` is None, `GET /metrics` on it."""
        spec = self.spec
        # built at start, not in __init__: the runner fills in the internal token after a service's build()
        internal = spec.internal
        # Tracing first (none without OpenTelemetry): a refused call still shows as a span with its status.
        self.interceptors = [
            *server_interceptors(),
            RequestContextInterceptor(spec.name),
            AuthInterceptor(
                spec.auth_rules,
                {name: internal_rule(spec.internal_token) for name in internal},
                spec.tenant_rules,
                token_hint=os.environ.get(TOKEN_HINT_ENV) or None,
            ),
            TextFieldInterceptor(),
        ]
        self.server = aio.server(interceptors=self.interceptors, options=list(spec.grpc_options))
        served_internal = sorted(internal & set(spec.service_names))
        if served_internal and not spec.internal_token:
            log.warning(
                "%s: %s is unset: every call to %s is refused (fail closed) until the service restarts with it",
                spec.name,
                INTERNAL_TOKEN_ENV,
                ", ".join(served_internal),
            )
        spec.register(self.server)
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        # Reflection describes what is there (chassis/reflection.py): on this port the public services it serves; to
        # the edge, which sends reflection to one service, what the edge routes; never an internal service.
        _load_descriptors(spec.reflection_names)
        enable_described_reflection(
            self.server,
            own=[*(set(spec.service_names) - internal), health.SERVICE_NAME],
            edge=[*({*spec.service_names, *spec.reflection_names} - internal), health.SERVICE_NAME],
        )
        self.server.add_generic_rpc_handlers(
            (UnknownMethods([*spec.service_names, health.SERVICE_NAME, "grpc.reflection.v1alpha.ServerReflection"]),)
        )
        self.port = self.server.add_insecure_port(f"{host}:{port}")
        if self.port == 0:
            raise RuntimeError(f"{spec.name}: could not bind {host}:{port}")
        for hook in spec.on_start:
            await hook()
        await self.health.set(LIVENESS, health_pb2.HealthCheckResponse.SERVING)
        await self._set_all(await self._dependencies_ok())
        await self.server.start()
        self._probe = asyncio.create_task(self._probe_loop(), name=f"{spec.name}-health-probe")
        log.info("%s listening on %s:%d", spec.name, host, self.port)
        if metrics_port is not None:
            self.metrics_server = MetricsServer(spec.metrics)
            self.metrics_port = await self.metrics_server.start(host, metrics_port)
            log.info("%s metrics on http://%s:%d/metrics", spec.name, host, self.metrics_port)
        return self.port

    async def _dependencies_ok(self) -> bool:
        check = self.spec.dependency_check
        if check is None:
            return True
        try:
            # asyncio.timeout, not wait_for: Python 3.11's wait_for, cancelled once the check had answered but
            # before it resumed, returns the answer and drops the cancellation (the probe then outlived the stop)
            async with asyncio.timeout(self._check_seconds):
                return await check()
        except Exception as error:  # any failure to answer is "not reachable"
            log.warning("%s dependency check failed: %s", self.spec.name, error)
            return False

    async def _set_all(self, ok: bool) -> None:
        if self._draining:
            return
        status = health_pb2.HealthCheckResponse.SERVING if ok else health_pb2.HealthCheckResponse.NOT_SERVING
        for name in ("", *self.spec.service_names):
            await self.health.set(name, status)
        if ok != self.serving:
            log.log(
                logging.INFO if ok else logging.WARNING,
                "%s health: %s",
                self.spec.name,
                "SERVING" if ok else "NOT_SERVING",
            )
        self.serving = ok

    @property
    def _check_seconds(self) -> float:
        return max(self.probe_seconds, 1.0)

    async def _probe_loop(self) -> None:
        # Ends at the drain as well as by cancellation: a dependency check that swallows its cancellation (and
        # answers) must not keep probing, and the stop waiting for it, for ever.
        while not self._draining:
            await asyncio.sleep(self.probe_seconds)
            await self._set_all(await self._dependencies_ok())

    async def stop(self, grace: float) -> None:
        """Turn NOT_SERVING, refuse new RPCs, let in-flight ones (and the drain hooks) finish within `grace`, run
        stop hooks."""
        self._draining = True
        await self.health.enter_graceful_shutdown()
        if self._probe:
            self._probe.cancel()
            # Waited for, not awaited: a CancelledError here would be this stop's own, never to be suppressed.
            # Bounded by one check: one that ignores its cancellation still ends its pass within its timeout.
            _, probing = await asyncio.wait({self._probe}, timeout=self._check_seconds + STOP_MARGIN_SECONDS)
            if probing:
                log.error("%s: the health probe did not end; stopping anyway", self.spec.name)
        log.info("%s draining (grace %.1fs)", self.spec.name, grace)
        drains = {asyncio.ensure_future(hook()) for hook in self.spec.on_drain}
        if self.server is not None:
            # Bounded: grpc's stop waits for its core to report the shutdown complete, and a completion that never
            # comes would hold the stop hooks (which record what was interrupted) forever.
            stopping = asyncio.ensure_future(self.server.stop(grace))
            done, _ = await asyncio.wait({stopping}, timeout=grace + STOP_MARGIN_SECONDS)
            if not done:
                log.error(
                    "%s: the gRPC server did not stop within %.1fs; running the stop hooks anyway",
                    self.spec.name,
                    grace + STOP_MARGIN_SECONDS,
                )
        if drains:
            done, pending = await asyncio.wait(drains, timeout=grace + STOP_MARGIN_SECONDS)
            for task in pending:
                task.cancel()
            for task in done:
                if not task.cancelled() and task.exception() is not None:
                    log.error("%s drain hook failed", self.spec.name, exc_info=task.exception())
        for hook in self.spec.on_stop:
            try:
                await hook()
            except Exception:
                log.exception("%s stop hook failed", self.spec.name)
        if self.metrics_server is not None:
            await self.metrics_server.stop()
        log.info("%s stopped", self.spec.name)


def _load_descriptors(names: Sequence[str]) -> None:
    """Reflection answers from the default descriptor pool, which holds only the generated modules imported so
    far: import the generated package (thermostat.<svc>.v1) of every reflected service this process lacks."""
    pool = descriptor_pool.Default()
    for name in names:
        try:
            pool.FindServiceByName(name)
            continue
        except KeyError:
            pass
        package = importlib.import_module(name.rpartition(".")[0])
        for module in pkgutil.iter_modules(package.__path__):
            if module.name.endswith("_pb2"):
                importlib.import_module(f"{package.__name__}.{module.name}")


async def serve_until_signalled(
    host_: ServiceHost, *, host: str, port: int, grace: float, metrics_port: int | None = None
) -> None:
    """Start the service and run it until SIGTERM or SIGINT, then stop it gracefully."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()

    def stopped_by(sig: signal.Signals) -> None:
        if host_.stopped_by is None:  # the first signal says how the service leaves (the pool: policy/departure)
            host_.stopped_by = sig.name
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stopped_by, sig)
    await host_.start(host, port, metrics_port=metrics_port)
    await stop.wait()
    await host_.stop(host_.spec.stop_grace_seconds if host_.spec.stop_grace_seconds is not None else grace)
