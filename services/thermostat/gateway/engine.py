"""The model engine behind a pod's proxy URL: the request sent up and the answer streamed back as it comes.

aiohttp's client (already the house's HTTP server library): a streamed answer is read with `iter_any`, which hands
over each chunk the moment it arrives, so no SSE event is held back. The User-Agent is a browser's (RunPod's proxy
sits behind Cloudflare); the RunPod API key never goes up, nor any header of the caller's but the body's type.
A proxy that answers for a pod that is no longer there (its HTML 404/502, or no connection at all) is told apart
from the engine's own errors (JSON): the gateway then wakes the pod instead of passing the proxy's page on.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping

import aiohttp

log = logging.getLogger("thermostat.gateway")

PASSED_HEADERS = ("content-type", "cache-control")
_PROXY_STATUSES = frozenset({404, 502, 503, 504, 520, 521, 522, 523, 524})


class EngineUnreachable(Exception):
    """The pod's proxy did not connect, or answered for a pod that is not there (a stale proxy URL)."""


def proxy_answered_for_no_pod(status: int, content_type: str) -> bool:
    """An answer from the proxy itself rather than the engine: a gateway status with a page that is not JSON."""
    return status in _PROXY_STATUSES and "json" not in content_type


def passed_headers(headers: Mapping[str, str]) -> dict[str, str]:
    return {name: headers[name] for name in PASSED_HEADERS if name in headers}


class Engines:
    def __init__(self, *, user_agent: str, connect_timeout: float) -> None:
        self.user_agent = user_agent
        self.timeout = aiohttp.ClientTimeout(total=None, sock_connect=connect_timeout, sock_read=None)
        self.session: aiohttp.ClientSession | None = None
        self._served: dict[str, str] = {}

    async def start(self) -> None:
        # no per-host limit: every held or streaming request is a connection of its own, bounded by the holds
        self.session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), timeout=self.timeout)

    async def stop(self) -> None:
        if self.session is not None:
            await self.session.close()

    def post(self, url: str, body: bytes, accept: str) -> aiohttp.client._RequestContextManager:
        assert self.session is not None
        headers = {"Content-Type": "application/json", "User-Agent": self.user_agent, "Accept": accept or "*/*"}
        return self.session.post(url, data=body, headers=headers)

    async def served_model(self, pod_name: str, proxy_url: str, configured: str) -> str:
        """The model name the engine serves: the configured one, else the first of its /v1/models (read once per
        proxy URL), else the pod's name."""
        if configured:
            return configured
        known = self._served.get(proxy_url)
        if known is not None:
            return known
        assert self.session is not None
        try:
            async with self.session.get(
                f"{proxy_url.rstrip('/')}/v1/models", headers={"User-Agent": self.user_agent}
            ) as answer:
                payload = json.loads(await answer.read()) if answer.status == 200 else None
        except (aiohttp.ClientError, ValueError, TimeoutError) as error:
            log.warning("pod %s: served model unreadable (%s); sending its name", pod_name, type(error).__name__)
            return pod_name
        data = payload.get("data") if isinstance(payload, dict) else None
        first = data[0].get("id") if isinstance(data, list) and data and isinstance(data[0], dict) else None
        if not isinstance(first, str) or not first:
            log.warning("pod %s: the engine's /v1/models names no model; sending its name", pod_name)
            return pod_name
        self._served[proxy_url] = first
        return first
