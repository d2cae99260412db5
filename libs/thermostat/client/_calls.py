"""What every sub-client shares: the transport, the config, and the metadata a call carries."""

from __future__ import annotations

from dataclasses import dataclass

from grpc import aio

from .config import ClientConfig
from .transport import Metadata, Transport

TENANT_HEADER = "x-strata-tenant"


def bearer(token: str | None) -> Metadata:
    """An Authorization header for `token` (none when there is no token: the server then says UNAUTHENTICATED)."""
    return (("authorization", f"Bearer {token}"),) if token else ()


@dataclass(frozen=True, slots=True)
class Calls:
    transport: Transport
    config: ClientConfig

    def channel(self, service: str) -> aio.Channel:
        return self.transport.channel(self.config.target_of(service))

    def deadline(self, timeout: float | None) -> float:
        """A unary call's deadline: the call's own, else the config's."""
        return self.config.timeout if timeout is None else _positive("timeout", timeout)

    def wait_deadline(self, timeout: float | None) -> float:
        """A stream's or a job wait's deadline: the call's own, else the config's wait_timeout."""
        return self.config.wait_timeout if timeout is None else _positive("timeout", timeout)

    def tenant(self, tenant: str | None) -> str:
        chosen = (tenant or "").strip() or self.config.tenant
        if not chosen:
            raise ValueError("tenant: pass tenant= or set STRATA_TENANT (the pool scopes every job to a tenant)")
        return chosen


def _positive(name: str, value: float) -> float:
    if not value > 0:
        raise ValueError(f"{name}: seconds above 0 (got {value!r})")
    return value
