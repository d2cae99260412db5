"""Settings from the environment (pydantic-settings). A bad value stops the service at start with a
message naming the variable; a secret's value is never echoed back in that message."""

from __future__ import annotations

import sys
from typing import Literal, TypeVar

from pydantic import Field, SecretStr, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

from thermostat.chassis.event_loop import EventLoopSetting
from thermostat.chassis.logs import register_secret


class ServiceSettings(BaseSettings):
    """ServiceSettings are what every service reads; each service subclasses it with its own fields."""

    model_config = SettingsConfigDict(case_sensitive=False, extra="ignore", env_ignore_empty=True)

    database_url: SecretStr | None = Field(default=None, description="Postgres DSN; unset = embedded dev DB")
    grpc_host: str = Field(default="127.0.0.1", description="address the gRPC server binds")
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    shutdown_grace_seconds: float = Field(default=10.0, gt=0, le=300)
    health_probe_seconds: float = Field(default=2.0, gt=0, le=60)
    event_loop: EventLoopSetting = Field(
        default="uvloop", description="uvloop when installed (chassis/event_loop.py), or asyncio's own loop"
    )
    thermostat_internal_token: SecretStr | None = Field(
        default=None, description="the deployment's token for service-to-service calls; unset refuses them"
    )

    def internal_token(self) -> str | None:
        token = self.thermostat_internal_token
        return token.get_secret_value() if token else None

    def secrets(self) -> list[str]:
        """Every secret value this configuration holds, for log redaction."""
        return [
            value.get_secret_value()
            for value in (getattr(self, name) for name in type(self).model_fields)
            if isinstance(value, SecretStr)
        ]


S = TypeVar("S", bound=ServiceSettings)


def describe_errors(cls: type[BaseSettings], error: ValidationError) -> list[str]:
    lines = []
    for item in error.errors():
        field = str(item["loc"][0]) if item["loc"] else "?"
        info = cls.model_fields.get(field)
        variable = (info.alias if info and info.alias else field).upper()
        secret = info is not None and "SecretStr" in repr(info.annotation)
        shown = "" if secret or "input" not in item else f"={item['input']!r}"
        lines.append(f"{variable}{shown}: {item['msg']}")
    return lines


def load_settings(cls: type[S]) -> S:
    """Read `cls` from the environment, or exit(2) naming every bad variable."""
    try:
        settings = cls()
    except ValidationError as error:
        print("invalid configuration:", file=sys.stderr)
        for line in describe_errors(cls, error):
            print(f"  {line}", file=sys.stderr)
        raise SystemExit(2) from None
    for secret in settings.secrets():
        register_secret(secret)
    return settings
