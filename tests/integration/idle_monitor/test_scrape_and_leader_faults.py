"""A scrape that must not hang the tick, and a leader task that must survive a store blip."""

from __future__ import annotations

import asyncio
import contextlib
import time
from datetime import datetime

from tests.fixtures.clock import FakeClock
from thermostat.idle_monitor.leader import PodLeader
from thermostat.idle_monitor.repository import SavedState
from thermostat.idle_monitor.scrape_clients import ScrapeClients
from thermostat.policy.idle.monitor_state import MonitorState
from thermostat.providers.vllm.scrape import MAX_METRICS_BYTES
from thermostat.store.db import Store


async def _drip_server() -> tuple[asyncio.AbstractServer, int]:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n")
        await writer.drain()
        try:
            for _ in range(1000):  # one byte every 0.3 s: each read finishes well inside the timeout
                writer.write(b"1\r\n#\r\n")
                await writer.drain()
                await asyncio.sleep(0.3)
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


async def test_a_dripping_proxy_is_cut_off_at_the_scrape_timeout() -> None:
    """A proxy dripping a byte every 0.3 s cannot hold a scrape past its timeout (nor the tick, nor its stops)."""
    server, port = await _drip_server()
    async with server, ScrapeClients() as scrapes:
        started = time.monotonic()
        task = asyncio.ensure_future(scrapes.scrape("p1", f"http://127.0.0.1:{port}", timeout=1.0))
        # bounded far below the 300 s drip, generous for a loaded machine: only a scrape past its timeout fails it
        done, _ = await asyncio.wait({task}, timeout=10.0)
        elapsed = time.monotonic() - started
        task.cancel()
        assert done, f"scrape with timeout=1.0 still running after {elapsed:.1f}s (tick would hang)"


class _FlakyStates:
    """Monitor state store whose first load fails (a DB blip right after the lease is won)."""

    def __init__(self) -> None:
        self.loads = 0

    async def load(self, pod_name: str) -> SavedState:
        self.loads += 1
        if self.loads == 1:
            raise ConnectionResetError("db blip")
        return SavedState(state=MonitorState())


class _CountingTicker:
    pod_name = "qwen"

    def __init__(self) -> None:
        self.ticks = 0

    def republish(self, state: object) -> None:
        pass

    async def tick_once(self, now: datetime, may_act: object = None) -> None:
        self.ticks += 1


async def test_a_store_blip_when_leadership_starts_does_not_end_the_leader(db_store: Store) -> None:
    """One failed state load right after winning the lease: the leader pauses, campaigns again and ticks."""
    clock, ticker, states = FakeClock(), _CountingTicker(), _FlakyStates()
    leader = PodLeader(
        ticker,
        db_store.leases,
        states,
        replica="r1",
        lease_seconds=30.0,  # type: ignore[arg-type]
        check_seconds=1.0,
        clock=clock,
    )
    task = asyncio.create_task(leader.run())
    try:
        await clock.settled(2)  # the pause after the failure, and the keeper still renewing the won lease
        assert (states.loads, ticker.ticks) == (1, 0)
        clock.advance(1.0)
        await clock.settled(2)  # leading again: its tick interval and its keeper
        assert (states.loads, ticker.ticks) == (2, 1)
        assert leader.leading and not task.done()
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_a_metrics_body_past_the_bound_is_unreadable_and_not_read_whole() -> None:
    """A proxy answering 64 MiB for /metrics (an exposition is tens of KB) reads as unreachable, and the scrape stops
    reading at MAX_METRICS_BYTES rather than holding the whole body in the monitor's memory."""
    sent = 0
    finished = asyncio.Event()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal sent
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n")
        line = b"# padding\n" * 6554  # 64 KiB a chunk
        try:
            while sent < 64 * 1024 * 1024:
                writer.write(b"%x\r\n%s\r\n" % (len(line), line))
                await writer.drain()
                sent += len(line)
            writer.write(b"0\r\n\r\n")
            await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()
            finished.set()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server, ScrapeClients() as scrapes:
        assert await scrapes.scrape("p1", f"http://127.0.0.1:{port}", timeout=60.0) is None
        await asyncio.wait_for(finished.wait(), 30)
    assert sent < MAX_METRICS_BYTES + 16 * 1024 * 1024  # what the sockets' buffers took beyond what was read
