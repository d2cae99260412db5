"""The HTTP client a ticker scrapes /metrics with: one lean HTTP/1.1 pool, a kept-alive connection per pod.

Why not httpx: its per-request work is Python — a request and response object, header models, the transport's
pool bookkeeping — about a millisecond of CPU a scrape here, and the monitor scrapes every pod on every tick:
at 1,000 pods it was 1.2 ms per pod per tick and rising with the count (issue 26; one shared httpx client was
worse still, O(N²) in its pool). The pool's own client (providers/pool/http1.py: an asyncio Protocol per
connection, the answer parsed by httptools in C) does the same GET for a fraction of that, so a tick at 10,000
pods stays within the scrape timeout. Every pod is its own origin ({podId}-{port}.proxy.runpod.net), so each
keeps its own connection; a pod that leaves the volume has its idle connection closed (`retain`).

The connections share one TLS context (the CA bundle loaded once). They carry no credential: the proxy is not
the API (see `thermostat.providers.vllm.scrape`). A connection idle past KEEPALIVE_SECONDS is not reused, so
one tick's connections carry the next tick's scrapes at the default CHECK_SECONDS (60) but not a stale one.
"""

from __future__ import annotations

from collections.abc import Collection
from types import TracebackType
from typing import Self

import httpx

from thermostat.chassis import tracing
from thermostat.providers.pool.http1 import Http1Pool
from thermostat.providers.vllm.scrape import get_metrics_http1

KEEPALIVE_SECONDS = 90.0
CONNECT_TIMEOUT_SECONDS = 10.0


class ScrapeClients:
    def __init__(self, *, keepalive_seconds: float = KEEPALIVE_SECONDS) -> None:
        # httpx's context: the same certifi bundle the scrapes verified against before
        self._pool = Http1Pool(
            keepalive_seconds=keepalive_seconds,
            connect_timeout_seconds=CONNECT_TIMEOUT_SECONDS,
            ssl_context=httpx.create_ssl_context(),
            origins_kept=1_000_000,  # one origin per pod: the cache holds every pod the volume lists
            poll_before_reuse=False,  # a GET: a connection the proxy closed unseen is retried once on a new one
        )
        self._endpoints: dict[str, str] = {}  # pod id -> the proxy URL its connection goes to

    def __len__(self) -> int:
        """How many pods have a connection (or had one) kept for them."""
        return len(self._endpoints)

    async def scrape(self, pod_id: str, proxy_url: str, *, timeout: float) -> str | None:
        """The pod's /metrics text, or None when it could not be read (see `get_metrics_http1`)."""
        endpoint = self._endpoints.get(pod_id)
        if endpoint != proxy_url:
            if endpoint is not None:
                self._pool.forget(endpoint)
            self._endpoints[pod_id] = proxy_url
        spans = tracing.hop_spans()
        span = spans.start("GET", pod_id, proxy_url.rstrip("/") + "/metrics", {}) if spans is not None else None
        text = await get_metrics_http1(self._pool, proxy_url, timeout=timeout)
        if span is not None:
            if text is None:  # a failed scrape, whatever the reason (get_metrics_http1 says which at DEBUG)
                tracing.HopSpans.failed(span, "unread")
            else:
                span.end()
        return text

    async def retain(self, pod_ids: Collection[str]) -> None:
        """Close the connections of pods no longer on the volume, so replacements cannot grow the map."""
        for pod_id in [i for i in self._endpoints if i not in pod_ids]:
            self._pool.forget(self._endpoints.pop(pod_id))

    async def aclose(self) -> None:
        self._endpoints.clear()
        await self._pool.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()
