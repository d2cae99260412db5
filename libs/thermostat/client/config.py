"""Where the client connects and with which tokens: each setting an argument, else its environment variable.

The variables are the services' own (RIG_OPERATOR_TOKEN, STRATA_POOL_TOKEN, ...), so a bot deployed beside
Thermostat reads the same Secret. Tokens are kept out of repr: a config printed in a log shows none.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TypedDict

DEFAULT_TARGET = "127.0.0.1:8080"  # the edge: its gRPC passthrough routes every public service
DEFAULT_TIMEOUT = 30.0
DEFAULT_WAIT_TIMEOUT = 3600.0

ENV_TARGET = "THERMOSTAT_ADDR"
ENV_OPERATOR_TOKEN = "RIG_OPERATOR_TOKEN"  # noqa: S105 -- variable names, not secrets
ENV_WAKE_TOKEN = "RIG_WAKE_TOKEN"  # noqa: S105
ENV_POOL_TOKEN = "STRATA_POOL_TOKEN"  # noqa: S105
ENV_POOL_ADMIN_TOKEN = "STRATA_POOL_ADMIN_TOKEN"  # noqa: S105
ENV_TENANT = "STRATA_TENANT"


class ConnectArgs(TypedDict, total=False):
    """What `AsyncThermostat.connect` / `Thermostat.connect` take: ClientConfig.from_env's arguments."""

    target: str | None
    operator_token: str | None
    wake_token: str | None
    pool_token: str | None
    pool_admin_token: str | None
    tenant: str | None
    timeout: float
    wait_timeout: float


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientConfig:
    """ClientConfig is one resolved client setup.

    `timeout` bounds every unary call (seconds); `wait_timeout` bounds a stream or a job wait when the call
    names none. `target` is the edge (every public service); `pods_target` and the like point one service's
    calls elsewhere. Tokens are optional: a call that needs one the config lacks is refused by the server
    (errors.Unauthenticated), never guessed.
    """

    target: str = DEFAULT_TARGET
    operator_token: str | None = field(default=None, repr=False)
    wake_token: str | None = field(default=None, repr=False)
    pool_token: str | None = field(default=None, repr=False)
    pool_admin_token: str | None = field(default=None, repr=False)
    tenant: str | None = None
    timeout: float = DEFAULT_TIMEOUT
    wait_timeout: float = DEFAULT_WAIT_TIMEOUT
    # a service's own address instead of `target` (talking to the services directly, without the edge)
    pods_target: str | None = None
    monitor_target: str | None = None
    pool_target: str | None = None
    metering_target: str | None = None

    def target_of(self, service: str) -> str:
        """The address for `service` (pods, monitor, pool or metering): its own target, else `target`."""
        own: str | None = getattr(self, f"{service}_target")
        return own or self.target

    def __post_init__(self) -> None:
        if not self.target.strip():
            raise ValueError("target: an address such as 127.0.0.1:8080 is required")
        for name in ("timeout", "wait_timeout"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
                raise ValueError(f"{name}: seconds, a finite number above 0 (got {value!r})")

    @classmethod
    def from_env(
        cls,
        target: str | None = None,
        operator_token: str | None = None,
        wake_token: str | None = None,
        pool_token: str | None = None,
        pool_admin_token: str | None = None,
        tenant: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        wait_timeout: float = DEFAULT_WAIT_TIMEOUT,
        *,
        env: Mapping[str, str] | None = None,
    ) -> ClientConfig:
        """Each setting from its argument, else the environment (`env`, default os.environ); blank is unset.

        A pool token given as an argument is the one the pool calls use: the environment's admin token is then not
        read (issue 35: with README's exports the admin token, which pool calls prefer, made
        `thermostat --pool-token wrong workers` answer 0); an admin token given as an argument still is."""
        source = os.environ if env is None else env

        def pick(given: str | None, variable: str) -> str | None:
            if given is not None and given.strip():
                return given.strip()
            value = source.get(variable, "").strip()
            return value or None

        if pool_token is not None and pool_token.strip() and not (pool_admin_token or "").strip():
            source = {name: value for name, value in source.items() if name != ENV_POOL_ADMIN_TOKEN}

        return cls(
            target=pick(target, ENV_TARGET) or DEFAULT_TARGET,
            operator_token=pick(operator_token, ENV_OPERATOR_TOKEN),
            wake_token=pick(wake_token, ENV_WAKE_TOKEN),
            pool_token=pick(pool_token, ENV_POOL_TOKEN),
            pool_admin_token=pick(pool_admin_token, ENV_POOL_ADMIN_TOKEN),
            tenant=pick(tenant, ENV_TENANT),
            timeout=timeout,
            wait_timeout=wait_timeout,
        )
