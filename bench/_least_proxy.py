"""The least gateway: an aiohttp server that passes a POST's body to one upstream URL and streams the answer back,
and nothing else (no auth, no parsing, no wake, no activity reports). bench/gateway_latency.py runs it in a process
of its own in front of the same engine, as the floor a Python hop costs on this machine.

Run: python bench/_least_proxy.py PORT UPSTREAM_BASE
"""

from __future__ import annotations

import sys

import aiohttp
from aiohttp import web

HEADERS = {"User-Agent": "Mozilla/5.0 (X11; Linux x86_64) Firefox/128.0", "Content-Type": "application/json"}


def main() -> None:
    port, upstream = int(sys.argv[1]), sys.argv[2].rstrip("/")
    session: aiohttp.ClientSession | None = None

    async def relay(request: web.Request) -> web.StreamResponse:
        assert session is not None
        async with session.post(
            f"{upstream}/{request.match_info['tail']}", data=await request.read(), headers=HEADERS
        ) as up:
            response = web.StreamResponse(status=up.status, headers={"Content-Type": up.headers["Content-Type"]})
            await response.prepare(request)
            async for chunk in up.content.iter_any():
                await response.write(chunk)
            await response.write_eof()
            return response

    async def open_session(app: web.Application) -> None:
        nonlocal session
        session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))

    async def close_session(app: web.Application) -> None:
        if session is not None:
            await session.close()

    app = web.Application()
    app.router.add_post("/{tail:.*}", relay)
    app.on_startup.append(open_session)
    app.on_cleanup.append(close_session)
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


if __name__ == "__main__":
    main()
