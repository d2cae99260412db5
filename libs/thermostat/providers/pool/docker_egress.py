"""EgressProxies: the egress proxy of a tenant network and allow-list, made on demand, found again by its labels,
removed with the tenant's network (policy/pool/egress.py has the configuration, names and shapes; issue 36).

- ensure: `GET /containers/json?all=true&filters={label: [pool, egress_of=key, egress_list=digest]}`; a running one
  is the proxy (one that is not, left by a daemon restart or a crash, is removed and made again). None: the tenant's
  outside network (`GET /networks?filters=…`, else `POST /networks/create`, not internal; a 409 is another process's),
  then `POST /containers/create?name={pool}-egress-{key}-{digest}` on it, `POST /networks/{tenant network}/connect`
  (the Engine API before 1.44 attaches one network at create), `POST /containers/{id}/start`, and its address on the
  tenant's network from `GET /containers/{id}/json`: the worker's HTTP_PROXY. A proxy that was created but would not
  join or start is removed before the error is raised. A 409 on the name is another process making the same proxy:
  it is waited for (a few seconds), as a found one.
- remove (the tenant network's last machine is gone and its delete met an endpoint, under its lock): every proxy
  carrying `egress_of=key` is force-removed, then the outside network (404: gone; 403 / 409: an endpoint still
  attached, the next stop tries again); whether there was a proxy to remove.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable, Sequence
from typing import Any, Final

import httpx

from thermostat.policy.pool.egress import (
    create_outside_network_body,
    create_proxy_body,
    egress_digest,
    egress_filter,
    outside_network_name,
    proxy_name,
)
from thermostat.providers.pool.backend import BackendError
from thermostat.providers.pool.docker_networks import Call
from thermostat.providers.pool.provider_errors import json_object

MADE_ELSEWHERE_TRIES: Final = 20
MADE_ELSEWHERE_PAUSE_SECONDS: Final = 0.25

_log = logging.getLogger(__name__)


class EgressProxies:
    """EgressProxies keeps one egress proxy per tenant network and allow-list of `pool`, running `image`."""

    def __init__(
        self, call: Call, refused: Callable[[httpx.Response, str, str], BackendError], *, pool: str, image: str
    ) -> None:
        self._call = call
        self._refused = refused
        self._pool = pool
        self.image = image

    async def ensure(self, tenant_id: str, key: str, network: str, hosts: Sequence[str], subject: str) -> str:
        """The address on `network` (the tenant's, key `key`) of the proxy allowing `hosts`, made when none runs; the
        caller holds the tenant network's lock."""
        digest = egress_digest(hosts)
        found = await self._running(key, digest, network, subject)
        if found is not None:
            return found
        outside = await self._outside(tenant_id, key, subject)
        proxy: str | None = None
        try:
            body = create_proxy_body(image=self.image, hosts=hosts, pool=self._pool, key=key, outside=outside)
            name = proxy_name(self._pool, key, digest)
            created = await self._call("POST", "/containers/create", subject, "create egress proxy", (),
                                       params={"name": name}, json=body)  # fmt: skip
            if created.status_code == 409:  # another process is making this proxy: its start is waited for
                return await self._made_elsewhere(key, digest, network, subject)
            if created.status_code != 201:
                raise self._refused(created, subject, "create egress proxy")
            made = json_object(created).get("Id")
            proxy = made if isinstance(made, str) and made else name
            joined = await self._call("POST", f"/networks/{network}/connect", subject, "connect egress proxy", (),
                                      json={"Container": proxy})  # fmt: skip
            if joined.status_code != 200:
                raise self._refused(joined, subject, "connect egress proxy")
            started = await self._call("POST", f"/containers/{proxy}/start", subject, "start egress proxy", ())
            if started.status_code not in (204, 304):
                raise self._refused(started, subject, "start egress proxy")
            address = await self._address(proxy, network, subject)
        except BaseException:
            # a proxy that will not run is removed, and its outside network with it when it was the only one
            with contextlib.suppress(Exception):
                await asyncio.shield(self._discard(proxy, key, subject))
            raise
        if address is None:
            raise BackendError(f"docker: {subject}: the daemon gave the egress proxy no address on {network}")
        _log.info("docker: egress proxy %s for %s (%d hosts) at %s", name, subject, len(hosts), address)
        return address

    async def remove(self, key: str, subject: str, *, outside_alone: bool = False) -> bool:
        """Every proxy of the tenant network `key`, then its outside network; whether there was a proxy. With
        `outside_alone`, the outside network goes only when no proxy is on it."""
        listed = await self._call(
            "GET", "/containers/json", subject, "list egress proxies", (),
            params={"all": "true", "filters": json.dumps(egress_filter(self._pool, key))},
        )  # fmt: skip
        proxies = [proxy["Id"] for proxy in _listed(listed) if isinstance(proxy.get("Id"), str)]
        if listed.status_code != 200 or (proxies and outside_alone) or (not proxies and not outside_alone):
            return False
        for proxy in proxies:
            await self._remove_container(proxy, subject)
        outside = outside_network_name(self._pool, key)
        removed = await self._call("DELETE", f"/networks/{outside}", subject, "remove egress network", ())
        if removed.status_code in (403, 409):
            _log.info("docker: %s kept: %s", outside, json_object(removed).get("message"))
        elif removed.status_code not in (204, 404):
            raise self._refused(removed, subject, "remove egress network")
        return True

    async def _discard(self, proxy: str | None, key: str, subject: str) -> None:
        if proxy is not None:
            await self._remove_container(proxy, subject)
        await self.remove(key, subject, outside_alone=True)

    async def _running(self, key: str, digest: str, network: str, subject: str) -> str | None:
        listed = await self._call(
            "GET", "/containers/json", subject, "list egress proxies", (),
            params={"all": "true", "filters": json.dumps(egress_filter(self._pool, key, digest))},
        )  # fmt: skip
        if listed.status_code != 200:
            raise self._refused(listed, subject, "list egress proxies")
        for proxy in _listed(listed):
            if not isinstance(proxy.get("Id"), str):
                continue
            address = await self._address(proxy["Id"], network, subject) if proxy.get("State") == "running" else None
            if address is not None:
                return address
            await self._remove_container(proxy["Id"], subject)  # stopped, or off the tenant's network: made again
        return None

    async def _made_elsewhere(self, key: str, digest: str, network: str, subject: str) -> str:
        for _ in range(MADE_ELSEWHERE_TRIES):
            await asyncio.sleep(MADE_ELSEWHERE_PAUSE_SECONDS)
            listed = await self._call(
                "GET", "/containers/json", subject, "list egress proxies", (),
                params={"filters": json.dumps(egress_filter(self._pool, key, digest))},
            )  # fmt: skip
            for proxy in _listed(listed):
                address = await self._address(str(proxy.get("Id")), network, subject)
                if address is not None:
                    return address
        raise BackendError(f"docker: {subject}: the egress proxy another process was making did not start")

    async def _outside(self, tenant_id: str, key: str, subject: str) -> str:
        name = outside_network_name(self._pool, key)
        listed = await self._call("GET", "/networks", subject, "list networks", (),
                                  params={"filters": json.dumps(egress_filter(self._pool, key))})  # fmt: skip
        if listed.status_code != 200:
            raise self._refused(listed, subject, "list networks")
        if any(isinstance(n, dict) and n.get("Name") == name for n in _listed(listed)):
            return name
        created = await self._call("POST", "/networks/create", subject, "create egress network", (),
                                   json=create_outside_network_body(self._pool, tenant_id, key))  # fmt: skip
        if created.status_code not in (201, 409):
            raise self._refused(created, subject, "create egress network")
        return name

    async def _address(self, proxy: str, network: str, subject: str) -> str | None:
        inspected = await self._call("GET", f"/containers/{proxy}/json", subject, "inspect egress proxy", ())
        if inspected.status_code != 200:
            return None
        body = json_object(inspected)
        state, settings = body.get("State"), body.get("NetworkSettings")
        if not isinstance(state, dict) or state.get("Running") is not True:
            return None
        networks = settings.get("Networks") if isinstance(settings, dict) else None
        attached = networks.get(network) if isinstance(networks, dict) else None
        address = attached.get("IPAddress") if isinstance(attached, dict) else None
        return address if isinstance(address, str) and address else None

    async def _remove_container(self, proxy: str, subject: str) -> None:
        removed = await self._call("DELETE", f"/containers/{proxy}", subject, "remove egress proxy", (),
                                   params={"force": "true"})  # fmt: skip
        if removed.status_code not in (204, 404, 409):  # 409: another remover has it
            raise self._refused(removed, subject, "remove egress proxy")


def _listed(response: httpx.Response) -> list[dict[str, Any]]:
    try:
        found = response.json() if response.status_code == 200 else None
    except ValueError:
        return []
    return [item for item in found if isinstance(item, dict)] if isinstance(found, list) else []
