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

from thermostat.providers.pool.http1 import Broken, Http1Pool, Unreachable

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


async def get_metrics_http1(pool: Http1Pool, proxy_base_url: str, *, timeout: float) -> str | None:
    """`get_metrics` through the lean HTTP/1.1 client (providers/pool/http1.py): the same request (browser-like
    User-Agent, no credential, no redirect followed), the same None for every failure, the same body bound —
    at a fraction of httpx's CPU per scrape, which the monitor pays for every pod on every tick (issue 26)."""
    endpoint = proxy_base_url.rstrip("/")
    try:
        async with asyncio.timeout(timeout):
            answer = await pool.request(endpoint, "GET", "/metrics", _SCRAPE_FIELDS, b"", limit=MAX_METRICS_BYTES)
    except TimeoutError:
        _log.debug("metrics scrape of %s took longer than %.1fs", proxy_base_url, timeout)
        return None
    except (Unreachable, Broken, ValueError) as error:  # ValueError: not an http(s) URL
        _log.debug("metrics scrape of %s failed: %s", proxy_base_url, type(error).__name__)
        return None
    if not 200 <= answer.status < 300 or answer.too_large:
        _log.debug("metrics scrape of %s -> %d", proxy_base_url, answer.status)
        return None
    try:
        return answer.body.decode(_charset(answer.headers))
    except (UnicodeDecodeError, LookupError):
        return None


_SCRAPE_FIELDS: Final = {"User-Agent": BROWSER_USER_AGENT, "Accept": "text/plain, */*"}


def _charset(headers: list[tuple[bytes, bytes]]) -> str:
    for name, value in headers:
        if name.lower() == b"content-type":
            charset = _CHARSETS.get(value)
            if charset is None:
                charset = _charset_of(value)
                if len(_CHARSETS) < 64:
                    _CHARSETS[value] = charset
            return charset
    return "utf-8"


_CHARSETS: dict[bytes, str] = {}  # content types seen: every pod's vLLM sends the same one


def _charset_of(content_type: bytes) -> str:
    for parameter in content_type.decode("latin-1").split(";")[1:]:
        key, _, charset = parameter.strip().partition("=")
        if key.lower() == "charset" and charset:
            return charset.strip('"')
    return "utf-8"
