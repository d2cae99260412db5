"""The pool dispatcher's process settings (docs/configuration.md)."""

from __future__ import annotations

from pydantic import Field, SecretStr, model_validator

from thermostat.chassis.registry import POOL_DISPATCHER
from thermostat.chassis.settings import ServiceSettings
from thermostat.policy.common.orphan_sweep import OrphanSweep
from thermostat.policy.pool.backends import BackendChoice, backend_choice
from thermostat.policy.pool.retention import DEFAULT_RETENTION_HOURS
from thermostat.providers.pool.settings import PoolBackendSettings

GRPC_MESSAGE_BYTES = POOL_DISPATCHER.max_message_bytes or 0
"""gRPC message limits, and the edge's REST body limit (the registry holds it, so the edge reads it too)."""

MAX_PAYLOAD_BYTES = GRPC_MESSAGE_BYTES - 1024 * 1024  # the request's other fields fit in the last MiB
"""The largest payload (and stored result) the pool accepts: 32 MiB, over the seed's 16 MiB floor. A larger
payload is a 413 and nothing is queued."""


SHUTDOWN_GRACE_DEFAULT = 300.0
"""POOL_SHUTDOWN_GRACE_SECONDS' default: five minutes, the seed's default sync wait (a sync caller's job that ends
within its default wait ends within the grace), short enough for a rolling deploy; the Kubernetes manifest's
terminationGracePeriodSeconds covers it. A job running longer fails at its end (docs/pool-deploys.md)."""


class PoolDispatcherSettings(ServiceSettings, PoolBackendSettings):
    """The service's own settings plus the provider backends' (POOL_DOCKER_SOCKET, FLY_API_TOKEN, ...)."""

    pool_dispatcher_port: int = Field(default=POOL_DISPATCHER.default_port, ge=0, le=65535)
    strata_pool_token: SecretStr | None = None
    strata_pool_admin_token: SecretStr | None = None
    pool_machine_types: str | None = Field(
        default=None, description="the catalogue at start: a JSON list in the PUT shape, or a path to a file"
    )
    pool_max_workers_total: int | None = Field(default=None, ge=1)
    pool_scaler_seconds: float = Field(default=10.0, gt=0, le=3600)
    pool_lease_seconds: float = Field(default=30.0, ge=1, le=3600)
    pool_health_poll_seconds: float = Field(default=0.5, gt=0, le=60)
    pool_instance_id: str | None = Field(default=None, min_length=1, max_length=100)
    # the local backend's machines outlive this process (a deploy's release keeps them; providers/pool/local.py)
    pool_local_machines_outlive_process: bool = False
    # a deploy's SIGTERM: how long in-flight jobs may still run before the process releases its machines
    # (docs/pool-deploys.md; Kubernetes' terminationGracePeriodSeconds must cover it)
    pool_shutdown_grace_seconds: float = Field(default=SHUTDOWN_GRACE_DEFAULT, gt=0, le=3600)
    # set: every submit and hint asks metering for the tenant's budget first, and is refused when it cannot answer
    metering_addr: str | None = None
    metering_timeout_seconds: float = Field(default=2.0, gt=0, le=60)
    # how often warm machines of tenants over budget are looked for (with METERING_ADDR set)
    pool_budget_reap_seconds: float = Field(default=5.0, gt=0, le=3600)
    # the orphan sweep (issue 12): `report` logs and counts pool-named provider machines no row knows; `terminate`
    # also ends them (recorded in pool_orphan_stops with trigger `orphan`)
    orphan_sweep: OrphanSweep = OrphanSweep.REPORT
    orphan_sweep_seconds: float = Field(default=300.0, gt=0, le=86400)
    # how long a missing usage position may still be filled by a transaction in flight (policy/pool/usage_feed.py)
    pool_usage_settle_seconds: float = Field(default=10.0, gt=0, le=600)
    # retention (docs/pool-retention.md): a finished job and its result are kept this long, usage events and dead
    # machines' events this long and until metering's ledger took them; pruned in batches of at most
    # POOL_PRUNE_BATCH_ROWS rows per statement, every POOL_PRUNE_SECONDS once caught up, by one process at a time
    pool_job_retention_hours: float = Field(default=DEFAULT_RETENTION_HOURS, gt=0, le=24 * 366)
    pool_prune_seconds: float = Field(default=10.0, gt=0, le=3600)
    pool_prune_batch_rows: int = Field(default=1000, ge=1, le=10000)
    pool_max_payload_bytes: int = Field(default=MAX_PAYLOAD_BYTES, ge=16 * 1024 * 1024, le=MAX_PAYLOAD_BYTES)
    # which backends the catalogue may name (local only when listed) and the one an entry without `backend` runs on
    pool_enabled_backends: str | None = None
    pool_default_backend: str | None = None

    @model_validator(mode="after")
    def _backends_chosen(self) -> PoolDispatcherSettings:
        self.backend_choice  # noqa: B018 -- fails the start naming the variable (ValueError)
        return self

    @property
    def backend_choice(self) -> BackendChoice:
        """POOL_ENABLED_BACKENDS and POOL_DEFAULT_BACKEND, read (thermostat.policy.pool.backends.backend_choice)."""
        return backend_choice(self.pool_enabled_backends, self.pool_default_backend)
