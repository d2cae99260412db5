"""Metering's process settings."""

from __future__ import annotations

from pydantic import Field, SecretStr

from thermostat.chassis.registry import METERING, POD_CONTROLLER
from thermostat.chassis.settings import ServiceSettings


class MeteringSettings(ServiceSettings):
    metering_port: int = Field(default=METERING.default_port, ge=0, le=65535)
    pod_controller_addr: str = POD_CONTROLLER.address()
    # the pool's usage feed is read when set (the dev stack and the cluster's ConfigMap set it); unset: no pool feed
    pool_dispatcher_addr: str | None = None
    rig_operator_token: SecretStr | None = None
    # the pool's tokens: GET /v1/spend is read with them, scoped like the pool's GET /v1/usage
    strata_pool_token: SecretStr | None = None
    strata_pool_admin_token: SecretStr | None = None
    # how often the ledger reads a feed that had nothing new, and how much it reads at once
    ledger_poll_seconds: float = Field(default=2.0, gt=0, le=300)
    ledger_page_size: int = Field(default=1000, ge=1, le=5000)
    # the ingest lease: one replica reads the feeds; a dead one's place is taken within it
    ledger_lease_seconds: float = Field(default=30.0, gt=0.5, le=600)
    feed_timeout_seconds: float = Field(default=10.0, gt=0, le=120)
