"""TenantNetworks: each tenant's internal Docker network, made on demand, found again by its label, removed once its
last machine is gone (policy/pool/tenant_network.py has the names and shapes; issue 36).

- ensure: `GET /networks?filters={label: [pool, tenant_network=key]}`; none listed: `POST /networks/create`
  (`Internal`, labelled, its bridge named `thtn{key}`); a 409 (another process made it first) is the network.
- release: `GET /containers/json?all=true&filters=…` for containers still carrying the network's label; none:
  `DELETE /networks/{name}`, where 404 (gone) and 403 / 409 (an endpoint still attached: a machine booting) are
  fine, the next machine's stop tries again. An endpoint that is the tenant's egress proxy's (`detach`: docker_egress.py
  removes the proxies and says whether there were any) does not keep it: the proxies go, and the delete is tried once
  more. A tenant without egress makes no call more than before.
A start and a release of the same tenant's network in this process take one lock, so a release never removes the
network between a start's ensure and its create. Across processes sharing a daemon the window remains: a create
that meets it fails with the daemon's "network … not found", and that boot fails (the pool boots another).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import httpx

from thermostat.policy.pool.tenant_network import (
    create_network_body,
    last_one_gone,
    network_filter,
    network_key,
    network_name,
)
from thermostat.providers.pool.backend import BackendError
from thermostat.providers.pool.provider_errors import json_object

_log = logging.getLogger(__name__)


class Call(Protocol):
    def __call__(
        self, method: str, path: str, subject: str, what: str, secrets: tuple[str, ...], **kwargs: Any
    ) -> Awaitable[httpx.Response]: ...


class TenantNetworks:
    """TenantNetworks keeps one internal network per tenant of `pool` on the daemon `call` speaks to."""

    def __init__(
        self,
        call: Call,
        refused: Callable[[httpx.Response, str, str], BackendError],
        *,
        pool: str,
        detach: Callable[[str, str], Awaitable[bool]] | None = None,
    ) -> None:
        self._call = call
        self._refused = refused
        self._pool = pool
        self._detach = detach
        self._locks: dict[str, asyncio.Lock] = {}

    def key(self, tenant_id: str) -> str:
        return network_key(self._pool, tenant_id)

    def held(self, key: str) -> asyncio.Lock:
        """The lock a start (ensure and create) and a release of this network take."""
        return self._locks.setdefault(key, asyncio.Lock())

    async def ensure(self, tenant_id: str, subject: str, key: str | None = None) -> str:
        """The tenant's network's name (or its network `key`: an egress type's), made when the daemon has none; the
        caller holds `held(key)`."""
        key = self.key(tenant_id) if key is None else key
        name = network_name(self._pool, key)
        wanted = {"filters": json.dumps(network_filter(self._pool, key))}
        listed = await self._call("GET", "/networks", subject, "list networks", (), params=wanted)
        if listed.status_code != 200:
            raise self._refused(listed, subject, "list networks")
        try:
            found = listed.json()
        except ValueError:
            raise BackendError(f"docker: {subject}: list networks answered no JSON") from None
        for network in found if isinstance(found, list) else []:
            if isinstance(network, dict) and isinstance(network.get("Name"), str):
                return str(network["Name"])
        body = create_network_body(self._pool, tenant_id, key)
        created = await self._call("POST", "/networks/create", subject, "create network", (), json=body)
        if created.status_code not in (201, 409):
            raise self._refused(created, subject, "create network")
        if created.status_code == 201:
            _log.info("docker: made network %s (internal) for %s", name, subject)
        return name

    async def release(self, key: str) -> None:
        """Remove the network once no container of the pool carries its label; never raises (a stop succeeded)."""
        subject = f"network {network_name(self._pool, key)}"
        try:
            async with self.held(key):
                await self._release(key, subject)
        except BackendError as error:
            _log.warning("docker: %s not removed: %s", subject, error)

    async def _release(self, key: str, subject: str) -> None:
        listed = await self._call(
            "GET", "/containers/json", subject, "list containers", (),
            params={"all": "true", "filters": json.dumps(network_filter(self._pool, key))},
        )  # fmt: skip
        try:
            containers = listed.json() if listed.status_code == 200 else None
        except ValueError:
            containers = None
        if not isinstance(containers, list) or not last_one_gone(containers):
            return
        removed = await self._call("DELETE", f"/networks/{network_name(self._pool, key)}", subject, "remove", ())
        if removed.status_code in (403, 409) and self._detach is not None and await self._detach(key, subject):
            removed = await self._call("DELETE", f"/networks/{network_name(self._pool, key)}", subject, "remove", ())
        if removed.status_code in (403, 409):  # an endpoint is still attached: the next stop tries again
            _log.info("docker: %s kept: %s", subject, json_object(removed).get("message"))
        elif removed.status_code not in (204, 404):
            raise self._refused(removed, subject, "remove network")
