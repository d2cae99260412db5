"""Thermostat's services, once: the registry the rest of the house is driven from.

Each entry names a service's process, port, package and gRPC surface. From it come the dev stack's
processes and ports (thermostat.dev.stack), the edge's upstreams and routes (tools.envoy_config),
each service's default port (its settings) and the addresses services reach each other on, the
Prometheus metrics ports (`metrics_port_env`, `default_metrics_port`), the
Kubernetes manifests (`make k8s`, tools/k8s_manifests.py) and the import-linter contracts' module lists
(tests/unit/chassis/test_registry.py fails when pyproject.toml lists other packages). Adding a service is
one entry here plus its package (docs/development.md, "Adding a service").

Services are named by module and by full gRPC name, so nothing here imports a service (libs never import
services) or generated code.
"""

from __future__ import annotations

from dataclasses import dataclass

from thermostat.policy.pool.machine_type import MAX_WAIT_SECONDS

MIB = 1024 * 1024
METRICS_PORT_OFFSET = 1000
"""A service's Prometheus /metrics port is its gRPC port plus this (50061 → 51061), unless its
`<NAME>_METRICS_PORT` says otherwise: a new entry gets one with no field of its own."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ServiceDef:
    """One service: a process serving gRPC (plus health and reflection) on one port."""

    name: str  # the process, the edge's cluster, the Kubernetes Deployment and Service
    package: str  # `python -m <package>` runs it
    port_env: str  # the variable its settings read the port from (the field `<port_env lowercased>`)
    default_port: int
    public_services: tuple[str, ...]  # routed by the edge: native gRPC and REST by google.api.http annotations
    internal_services: tuple[str, ...] = ()  # served to other services only; the edge never routes them
    health_service: str  # what readiness probes and the edge's health checks ask for
    rest_prefixes: tuple[str, ...] = ()  # the REST paths its public services' annotations start with
    reflection: bool = False  # the edge sends grpcurl's reflection calls here; it lists every public service
    # The largest gRPC message it takes or sends (None: grpcio's 4 MiB); the edge's REST body limit covers it.
    max_message_bytes: int | None = None
    # Calls ("pkg.Service/Method") that may rightly last up to long_call_seconds: the edge's route for each
    # waits that long (plus its usual margin) instead of its default, so it never cuts one short.
    long_calls: tuple[str, ...] = ()
    long_call_seconds: float = 0.0
    # An unauthenticated public call ("pkg.Service/Method") answering google.api.HttpBody with a JSON object:
    # the edge's GET /health shows it under this service's entry.
    health_detail: str | None = None
    # A JSON object: set, the health detail's members are also printed at the top of GET /health (beside its status
    # and upstreams), and this object's members stand in when the detail does not answer. The pool's: the original
    # strata-pool package's /health shape, {"status": "ok", "workers": {...}, "machine_types": [...]}.
    health_top_fallback: str | None = None
    # An HTTP API of its own beside gRPC (the gateway's OpenAI API): the edge routes these path prefixes to the port
    # named by `http_port_env` (default `default_http_port`), streaming both ways, with no route timeout of its own.
    http_prefixes: tuple[str, ...] = ()
    http_port_env: str | None = None
    default_http_port: int = 0

    @property
    def served(self) -> tuple[str, ...]:
        """Every gRPC service the process registers (health is set for each)."""
        return (*self.public_services, *self.internal_services)

    @property
    def address_env(self) -> str:
        """The variable other services read this one's address from (POD_CONTROLLER_ADDR)."""
        return self.name.upper().replace("-", "_") + "_ADDR"

    @property
    def metrics_port_env(self) -> str:
        """The variable its /metrics port is read from (POD_CONTROLLER_METRICS_PORT)."""
        return self.name.upper().replace("-", "_") + "_METRICS_PORT"

    @property
    def default_metrics_port(self) -> int:
        """Where it serves Prometheus's `GET /metrics` unless `metrics_port_env` is set."""
        return self.default_port + METRICS_PORT_OFFSET

    def address(self, host: str = "127.0.0.1", port: int | None = None) -> str:
        return f"{host}:{self.default_port if port is None else port}"


POD_CONTROLLER = ServiceDef(
    name="pod-controller",
    package="thermostat.pod_controller",
    port_env="POD_CONTROLLER_PORT",
    default_port=50061,
    public_services=("thermostat.pods.v1.PodController",),
    internal_services=("thermostat.pods.v1.PodControllerInternal",),
    health_service="thermostat.pods.v1.PodController",
    rest_prefixes=("/api/pods/", "/api/orphans"),
    reflection=True,
)
IDLE_MONITOR = ServiceDef(
    name="idle-monitor",
    package="thermostat.idle_monitor",
    port_env="IDLE_MONITOR_PORT",
    default_port=50062,
    public_services=("thermostat.monitor.v1.IdleMonitor",),
    internal_services=("thermostat.monitor.v1.IdleMonitorInternal",),
    health_service="thermostat.monitor.v1.IdleMonitor",
    rest_prefixes=("/api/pods/",),
)
POOL_DISPATCHER = ServiceDef(
    name="pool-dispatcher",
    package="thermostat.pool_dispatcher",
    port_env="POOL_DISPATCHER_PORT",
    default_port=50063,
    public_services=("thermostat.pool.v1.PoolDispatcher",),
    internal_services=("thermostat.pool.v1.PoolDispatcherInternal",),
    health_service="thermostat.pool.v1.PoolDispatcher",
    rest_prefixes=("/v1/",),
    # a 32 MiB payload (over the seed's 16 MiB floor) and the request's other fields
    max_message_bytes=33 * MIB,
    # a sync submit (SubmitJobSync, RunJob) waits up to boot + job timeout, WaitJob streams until the job ends,
    # RunJobs and RunJobsJson run sync jobs
    long_calls=(
        "thermostat.pool.v1.PoolDispatcher/SubmitJobSync",
        "thermostat.pool.v1.PoolDispatcher/RunJob",
        "thermostat.pool.v1.PoolDispatcher/WaitJob",
        "thermostat.pool.v1.PoolDispatcher/RunJobs",
        "thermostat.pool.v1.PoolDispatcher/RunJobsJson",
    ),
    long_call_seconds=MAX_WAIT_SECONDS,
    health_detail="thermostat.pool.v1.PoolDispatcher/GetPoolHealthJson",
    health_top_fallback='{"workers": {}, "machine_types": []}',
)
METERING = ServiceDef(
    name="metering",
    package="thermostat.metering",
    port_env="METERING_PORT",
    default_port=50064,
    public_services=("thermostat.metering.v1.Metering",),
    internal_services=("thermostat.metering.v1.MeteringInternal",),
    health_service="thermostat.metering.v1.Metering",
    rest_prefixes=("/api/pods/", "/api/metering/", "/v1/spend", "/v1/budgets/"),
    health_detail="thermostat.metering.v1.Metering/GetMeteringHealthJson",
)
GATEWAY = ServiceDef(
    name="gateway",
    package="thermostat.gateway",
    port_env="GATEWAY_PORT",
    default_port=50065,
    public_services=("thermostat.gateway.v1.InferenceGateway",),
    health_service="thermostat.gateway.v1.InferenceGateway",
    http_prefixes=("/openai/v1/",),
    http_port_env="GATEWAY_HTTP_PORT",
    default_http_port=50165,
)
SERVICES: tuple[ServiceDef, ...] = (POD_CONTROLLER, IDLE_MONITOR, POOL_DISPATCHER, METERING, GATEWAY)

PROGRAMS: tuple[str, ...] = ("thermostat.worker",)
"""Runnable packages under services/ that are not gRPC services of the house: the reference worker runs inside
the pool's machine images, behind the worker contract, and is started by a backend, not by the dev stack."""


def service(name: str) -> ServiceDef:
    """The registered service called `name`."""
    for entry in SERVICES:
        if entry.name == name:
            return entry
    raise KeyError(f"no service {name!r} in the registry; known: {', '.join(s.name for s in SERVICES)}")


def public_services(services: tuple[ServiceDef, ...] = SERVICES) -> tuple[str, ...]:
    """Every public gRPC service of the house: what the reflecting service lists for grpcurl."""
    return tuple(name for entry in services for name in entry.public_services)


def reflecting(services: tuple[ServiceDef, ...] = SERVICES) -> ServiceDef | None:
    """The service that answers reflection for the edge, if any of `services` does."""
    return next((entry for entry in services if entry.reflection), None)
