"""How a tick gathers: every pod on the volume scraped at once through the proxy URL template, with a
per-scrape timeout, a browser-like User-Agent and no API key; readiness reports reach the controller even
when one is dropped."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import time
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from datetime import datetime
from typing import Any

import grpc
import pytest

from tests.fixtures.services import INTERNAL_TOKEN, SIM_API_KEY
from tests.integration.idle_monitor.conftest import FRESH_ID, POD_ID, STALE_ID, MakeRig, MonitorRig
from thermostat.chassis.internal_auth import InternalTokenInterceptor
from thermostat.dev.simulators.serving import RecordedRequest
from thermostat.idle_monitor.scrape_clients import ScrapeClients
from thermostat.pods.v1 import pods_pb2_grpc
from thermostat.policy.idle.pod_signal import PodSignal

DELAY = 1.0
# A hung scrape's answer comes this late: far past any tick on a loaded machine, so a tick that waited for it
# (the timeout not applied) cannot pass for one that timed out after a slow start.
HANG = 30.0
# Long enough for the busy sibling's scrape to answer on a loaded machine, short next to the hang.
HUNG_SCRAPE_TIMEOUT = 2.0


async def timed(tick: Callable[[], Awaitable[Any]]) -> tuple[float, Any]:
    started = time.perf_counter()
    result = await tick()
    return time.perf_counter() - started, result


def arrived_together(scrapes: list[RecordedRequest]) -> bool:
    """Every scrape reached the proxy before the first could be answered (each answer waits DELAY): they were
    in flight at once. Scrapes one after another would arrive DELAY apart, however fast or slow the machine."""
    arrivals = sorted(r.received_at for r in scrapes)
    return arrivals[-1] - arrivals[0] < DELAY


async def test_every_pod_is_scraped_at_once_through_the_proxy_like_a_browser_without_the_key(rig: MonitorRig) -> None:
    """Three slow /metrics answers cost one delay, not three; the key goes to the API only."""
    pod_ids = [rig.add_pod(f"scrapedpod0000{i}") for i in range(3)]
    rig.sim.inject("GET", "/proxy/*/metrics", delay_seconds=DELAY, count=None)
    decision = await rig.tick()
    assert [v.signal for v in decision.verdicts] == [PodSignal.BUSY] * 3, "each answered (the first scrape seeds)"
    scrapes = rig.sim.requests("/proxy/")
    assert arrived_together(scrapes), "scrapes ran one after another"
    assert sorted(r.path for r in scrapes) == sorted(f"/proxy/{i}-8000/metrics" for i in pod_ids)
    for scrape in scrapes:
        assert scrape.headers["user-agent"].startswith("Mozilla/5.0 ")
        assert "authorization" not in scrape.headers
        assert SIM_API_KEY not in str(scrape.headers)
    api_calls = rig.sim.requests("/v2/")
    assert api_calls and all(r.headers.get("authorization") == f"Bearer {SIM_API_KEY}" for r in api_calls)


async def test_tick_time_does_not_grow_with_the_pods_on_the_volume(rig: MonitorRig) -> None:
    """Twenty pods whose scrapes each take the delay are scraped at once, not one after another."""
    for i in range(20):
        rig.add_pod(f"manypod{i:07d}")
    # The first tick opens 40 connections at once; the simulator listens with socketserver's backlog of 5, so
    # some SYNs are dropped and retried a second later. Measured from the second tick (connections kept).
    await rig.tick()
    rig.sim.clear_requests()
    rig.sim.inject("GET", "/proxy/*/metrics", delay_seconds=DELAY, count=None)
    decision = await rig.tick()
    assert len(decision.verdicts) == 20
    scrapes = rig.sim.requests("/proxy/")
    assert len(scrapes) == 20 and arrived_together(scrapes), "scrapes ran one after another"


async def test_a_scrape_that_hangs_times_out_and_that_pod_falls_back_to_the_control_plane(make_rig: MakeRig) -> None:
    """A hung proxy costs one scrape timeout; the pod reads UnreachableButRunning, its busy sibling still wins."""
    rig = await make_rig(scrape_timeout=HUNG_SCRAPE_TIMEOUT)
    rig.sim.configure(hang_seconds=HANG)
    rig.add_pod(STALE_ID)
    rig.add_pod(FRESH_ID)
    await rig.tick()
    rig.sim.record_turn(FRESH_ID, prompt_tokens=100, gen_tokens=10)
    rig.sim.inject("GET", f"/proxy/{STALE_ID}-8000/metrics", hang=True, count=1)
    took, decision = await timed(rig.tick)
    assert HUNG_SCRAPE_TIMEOUT <= took < HANG / 2, "one scrape timeout, never the hang"
    assert [v.signal for v in decision.verdicts] == [PodSignal.UNREACHABLE_BUT_RUNNING, PodSignal.BUSY]
    assert (decision.signal.signal, decision.signal.pod_id) == (PodSignal.BUSY, FRESH_ID)
    assert decision.state.pods[STALE_ID].baseline is not None, "a blip keeps the baseline"


class DropFirstReadinessReport(grpc.aio.UnaryUnaryClientInterceptor):  # type: ignore[misc]
    """Fails the first ReportReadiness on the channel with UNAVAILABLE, as a controller restart would."""

    def __init__(self) -> None:
        self.dropped = 0

    async def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        if details.method.endswith(b"/ReportReadiness") and not self.dropped:
            self.dropped += 1
            raise grpc.aio.AioRpcError(
                grpc.StatusCode.UNAVAILABLE, grpc.aio.Metadata(), grpc.aio.Metadata(), details="controller restarting"
            )
        return await continuation(details, request)


@contextlib.asynccontextmanager
async def ready_tick_report_dropped(rig: MonitorRig) -> AsyncIterator[datetime]:
    """POD_ID added and its ready tick run with that tick's readiness report dropped; the ready tick's time.
    Ticks inside the block still go through the channel that dropped it."""
    dropper = DropFirstReadinessReport()
    async with grpc.aio.insecure_channel(
        rig.controller.address, interceptors=[dropper, InternalTokenInterceptor(INTERNAL_TOKEN)]
    ) as flaky:
        rig.ticker.controller = pods_pb2_grpc.PodControllerInternalStub(flaky)
        rig.add_pod(POD_ID)
        ready_tick = rig.now
        await rig.tick()
        assert dropper.dropped == 1
        yield ready_tick


async def test_a_dropped_readiness_report_is_published_on_the_next_tick(
    rig: MonitorRig, monitor_log: pytest.LogCaptureFixture
) -> None:
    """The ready tick's report fails; the next tick publishes readySince as of the ready tick."""
    async with ready_tick_report_dropped(rig) as ready_tick:
        assert await rig.ready_since() is None
        await rig.tick()
    assert await rig.ready_since() == ready_tick
    assert any(
        "readiness report for qwenpod0000001 failed (UNAVAILABLE)" in r.getMessage() for r in monitor_log.records
    )


async def test_a_pod_that_left_the_volume_is_forgotten_with_its_scrape_client(rig: MonitorRig) -> None:
    """A terminated stale pod drops out of the memory and its client closes: replacements never grow either."""
    rig.add_pod(STALE_ID)
    rig.add_pod(FRESH_ID)
    await rig.tick()
    assert len(rig.scrapes) == 2
    rig.sim.set_pod_status(STALE_ID, "TERMINATED")
    decision = await rig.tick()
    assert [v.pod_id for v in decision.verdicts] == [FRESH_ID]
    assert set(decision.state.pods) == {FRESH_ID}
    assert len(rig.scrapes) == 1


class _CancelTheTickOnFirstScrape(ScrapeClients):
    """Scrape clients that cancel the tick the moment the first scrape is asked for: the tick ends (as at
    shutdown) while its scrapes are being launched, before any of them has run a step."""

    def __init__(self) -> None:
        super().__init__()
        self.tick: asyncio.Task[Any] | None = None

    def scrape(self, pod_id: str, proxy_url: str, *, timeout: float) -> Coroutine[Any, Any, str | None]:
        if self.tick is not None:
            self.tick.cancel()
            self.tick = None
        return super().scrape(pod_id, proxy_url, timeout=timeout)


async def test_a_tick_cancelled_while_its_scrapes_start_leaves_no_scrape_unawaited(rig: MonitorRig) -> None:
    """Every scrape coroutine made is awaited: none is made for a scrape cancelled before it starts."""
    for i in range(3):
        rig.add_pod(f"cancelpod000{i}")
    async with _CancelTheTickOnFirstScrape() as scrapes:
        ticker = rig.new_ticker("replica-a", scrapes=scrapes)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            tick = asyncio.ensure_future(ticker.tick_once(rig.now))
            scrapes.tick = tick
            with pytest.raises(asyncio.CancelledError):
                await tick
            gc.collect()  # a coroutine dropped unawaited warns when it is collected
    assert [str(w.message) for w in caught if "never awaited" in str(w.message)] == []
