"""Reading a pod's vLLM /metrics through RunPod's public proxy.

The proxy is not the API: no bearer ever goes there (the key must never leave for a pod's host), and the
request carries a browser-like User-Agent because Cloudflare fronts the proxy and 403s library defaults.
Every failure — non-2xx (Cloudflare 404 while stopped, 502 while the model loads), transport error,
timeout — is None: "unreachable", which the monitor then asks the control plane about.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Final

import httpx

_log = logging.getLogger(__name__)

MAX_METRICS_BYTES: Final = 8 * 1024 * 1024
"""A vLLM exposition is tens of KB; a body past this is not one, and is not read into the monitor's memory."""

BROWSER_USER_AGENT: Final = (
    "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/126.0.0.0 Safari/537.36"
)


async def get_metrics(http: httpx.AsyncClient, proxy_base_url: str, *, timeout: float) -> str | None:
    """GET {proxy_base_url}/metrics; the exposition text, or None when it could not be read within `timeout`.

    `timeout` bounds the whole scrape: httpx's own timeout applies per read, so a proxy that drips a byte
    every few seconds would otherwise hold the monitor's tick — and every stop it would decide — forever.
    """
    try:
        async with asyncio.timeout(timeout):
            return await _get_metrics(http, proxy_base_url, timeout=timeout)
    except TimeoutError:
        _log.debug("metrics scrape of %s took longer than %.1fs", proxy_base_url, timeout)
        return None


async def _get_metrics(http: httpx.AsyncClient, proxy_base_url: str, *, timeout: float) -> str | None:
    try:
        request = http.build_request(
            "GET",
            proxy_base_url.rstrip("/") + "/metrics",
            headers={"User-Agent": BROWSER_USER_AGENT, "Accept": "text/plain, */*"},
            timeout=timeout,
        )
        # A shared client may carry default headers; the scrape must not inherit a credential.
        request.headers.pop("Authorization", None)
        response = await http.send(request, follow_redirects=False, stream=True)
    except Exception as error:
        # Per-tick outcomes stay at DEBUG: scrape chatter is what once rotated billable lines away (#2050).
        _log.debug("metrics scrape of %s failed: %s", proxy_base_url, type(error).__name__)
        return None
    try:
        if not response.is_success:
            _log.debug("metrics scrape of %s -> %d", proxy_base_url, response.status_code)
            return None
        body = bytearray()
        async for chunk in response.aiter_bytes():  # decoded: a small gzip body may inflate past the bound
            body += chunk
            if len(body) > MAX_METRICS_BYTES:
                _log.debug("metrics scrape of %s: body over %d bytes", proxy_base_url, MAX_METRICS_BYTES)
                return None
        return bytes(body).decode(response.encoding or "utf-8")
    except (UnicodeDecodeError, LookupError):
        return None
    except Exception as error:  # the body broke off
        _log.debug("metrics scrape of %s failed reading: %s", proxy_base_url, type(error).__name__)
        return None
    finally:
        await response.aclose()
