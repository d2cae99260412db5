"""The HTTP clients a ticker scrapes /metrics with: one per pod on the volume.

Not one shared client: httpx's connection pool does work in proportion to every request it holds each time
one starts or ends, so N concurrent scrapes through one client cost O(N²) CPU — about 20 s for 1,000 pods
on this machine, against about 1 s with a client per pod (bench/monitor_scale.py) — and a tick would grow
with the number of pods instead of lasting as long as the slowest scrape. A client per pod is also what the
proxy is: every pod its own host ({podId}-{port}.proxy.runpod.net), one connection each, none capped.

The clients share one TLS context, so the CA bundle is loaded once rather than per pod. They carry no
credential: the proxy is not the API (see `thermostat.providers.vllm.scrape`).
"""

from __future__ import annotations

from collections.abc import Collection
from types import TracebackType
from typing import Self

import httpx

from thermostat.chassis.tracing import http_transport
from thermostat.providers.vllm.scrape import get_metrics

_PER_POD = httpx.Limits(max_connections=2, max_keepalive_connections=1)


class ScrapeClients:
    def __init__(self) -> None:
        self._tls = httpx.create_ssl_context()
        self._clients: dict[str, httpx.AsyncClient] = {}

    def __len__(self) -> int:
        return len(self._clients)

    async def scrape(self, pod_id: str, proxy_url: str, *, timeout: float) -> str | None:
        """The pod's /metrics text, or None when it could not be read (see `get_metrics`)."""
        client = self._clients.get(pod_id)
        if client is None:
            transport = http_transport(verify=self._tls, limits=_PER_POD)  # None (httpx's own) without tracing
            client = self._clients[pod_id] = httpx.AsyncClient(transport=transport, verify=self._tls, limits=_PER_POD)
        return await get_metrics(client, proxy_url, timeout=timeout)

    async def retain(self, pod_ids: Collection[str]) -> None:
        """Close the clients of pods no longer on the volume, so replacements cannot grow the map."""
        for pod_id in [i for i in self._clients if i not in pod_ids]:
            await self._clients.pop(pod_id).aclose()

    async def aclose(self) -> None:
        await self.retain(())

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()
