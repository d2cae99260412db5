"""The pod controller's process settings. Per-pod guard values (volume, price cap, allowlist, …) are parsed
by the never-widening option policy instead, so a bad guard keeps its default and warns rather than
stopping the service."""

from __future__ import annotations

from pydantic import Field, SecretStr, model_validator

from thermostat.chassis.registry import POD_CONTROLLER
from thermostat.chassis.settings import ServiceSettings
from thermostat.policy.common.orphan_sweep import OrphanSweep

LEASE_TRUST_FLOOR = 0.45


class PodControllerSettings(ServiceSettings):
    pod_controller_port: int = Field(default=POD_CONTROLLER.default_port, ge=0, le=65535)
    runpod_api_key: SecretStr | None = None
    runpod_v2_base_url: str = "https://api.runpod.io/v2"
    rig_operator_token: SecretStr | None = None
    rig_wake_token: SecretStr | None = None
    watch_poll_seconds: float = Field(default=2.0, gt=0, le=60)
    wake_lease_seconds: float = Field(default=60.0, gt=0.5, le=600)
    record_timeout_seconds: float = Field(default=10.0, gt=0, le=60)
    # a GET, a watch or a history page waits this long for the store, then answers without its fields
    store_read_timeout_seconds: float = Field(default=1.5, gt=0, le=30)
    runpod_timeout_seconds: float = Field(default=20.0, gt=0, le=120)
    # set: every wake asks metering's budget check first and is refused when metering cannot answer
    metering_addr: str | None = None
    metering_timeout_seconds: float = Field(default=2.0, gt=0, le=30)
    # the orphan sweep (issue 12): `report` logs pods it made that no configured pod manages; `terminate` also
    # ends them (a billable action with trigger `orphan`)
    orphan_sweep: OrphanSweep = OrphanSweep.REPORT
    orphan_sweep_seconds: float = Field(default=300.0, gt=0, le=86400)
    # how often the warm-hours schedule looks for a pod to wake before its hours open (RUNPOD_WARM_HOURS)
    warm_schedule_seconds: float = Field(default=30.0, gt=0, le=3600)

    @model_validator(mode="after")
    def _lease_outlives_a_call(self) -> PodControllerSettings:
        # Renewed every third of its TTL and trusted for 80% of it, a lease is always trusted for at least
        # ~45% of the TTL ahead; a billable call is issued only with RUNPOD_TIMEOUT_SECONDS of trust left.
        if self.wake_lease_seconds * LEASE_TRUST_FLOOR <= self.runpod_timeout_seconds:
            raise ValueError(
                f"WAKE_LEASE_SECONDS ({self.wake_lease_seconds:g}) must exceed RUNPOD_TIMEOUT_SECONDS "
                f"({self.runpod_timeout_seconds:g}) / {LEASE_TRUST_FLOOR}, or a wake could never issue a billable "
                "call (or issue one that outlives its lease)"
            )
        return self
