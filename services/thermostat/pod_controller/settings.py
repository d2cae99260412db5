"""The pod controller's process settings. Per-pod guard values (volume, price cap, allowlist, …) are parsed
by the never-widening option policy instead, so a bad guard keeps its default and warns rather than
stopping the service."""

from __future__ import annotations

from pydantic import Field, SecretStr

from thermostat.chassis.settings import ServiceSettings


class PodControllerSettings(ServiceSettings):
    pod_controller_port: int = Field(default=50061, ge=0, le=65535)
    runpod_api_key: SecretStr | None = None
    runpod_v2_base_url: str = "https://api.runpod.io/v2"
    rig_operator_token: SecretStr | None = None
    rig_wake_token: SecretStr | None = None
    watch_poll_seconds: float = Field(default=2.0, gt=0, le=60)
    wake_lease_seconds: float = Field(default=15.0, gt=0.5, le=300)
    record_timeout_seconds: float = Field(default=10.0, gt=0, le=60)
    runpod_timeout_seconds: float = Field(default=20.0, gt=0, le=120)
