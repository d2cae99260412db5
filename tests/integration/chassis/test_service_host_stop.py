"""The chassis's stop ends whatever its health probe is doing: the probe is cancelled as its store check
answers (Python 3.11's wait_for dropped that cancellation, so the probe went on and the stop waited for it
for ever: a SIGTERM that never finished), and a dependency check that swallows its own cancellation does not
keep the probe, or the stop, alive either."""

from __future__ import annotations

import asyncio

import pytest

from thermostat.chassis.server import ServiceHost, ServiceSpec

STOP_BOUND = 30.0
"""Only how long the test waits before calling a stop hung; a stop that works takes its grace (0.1 s)."""


class HeldCheck:
    """A dependency check: the first (at start) answers at once; each later one waits until released."""

    def __init__(self, *, swallow_cancel: bool = False) -> None:
        self.calls = 0
        self.entered = asyncio.Event()
        self.release = asyncio.Event()
        self.swallow_cancel = swallow_cancel

    async def __call__(self) -> bool:
        self.calls += 1
        if self.calls == 1:
            return True
        self.entered.set()
        try:
            await self.release.wait()
        except asyncio.CancelledError:
            if not self.swallow_cancel:
                raise
        return True


async def started_host(check: HeldCheck) -> ServiceHost:
    """A host probing every 0.05 s, its probe's second check in flight."""
    host = ServiceHost(
        ServiceSpec(name="t", service_names=["test.Echo"], register=lambda s: None, dependency_check=check),
        probe_seconds=0.05,
    )
    await host.start()
    await check.entered.wait()
    return host


async def stop_ends(host: ServiceHost) -> bool:
    stopping = asyncio.create_task(host.stop(0.1))
    done, _ = await asyncio.wait({stopping}, timeout=STOP_BOUND)
    return bool(done)


@pytest.mark.parametrize(
    "turns",
    [
        pytest.param(0, id="the-answer-is-in-flight"),
        pytest.param(1, id="the-check-answered-and-the-probe-has-not-resumed"),
        pytest.param(2, id="the-probe-has-the-answer"),
    ],
)
async def test_a_stop_as_the_store_check_answers_ends_and_ends_the_probe(turns: int) -> None:
    """The check answers, the event loop turns `turns` times, then the stop cancels the probe: it ends."""
    check = HeldCheck()
    host = await started_host(check)
    check.release.set()
    for _ in range(turns):
        await asyncio.sleep(0)
    assert await stop_ends(host), "the stop waited for a health probe that carried on"
    assert host._probe is not None and host._probe.done()


async def test_a_check_that_swallows_its_cancellation_holds_neither_the_probe_nor_the_stop() -> None:
    """The check catches the stop's cancellation and answers: the probe ends after that pass, and so does the stop."""
    check = HeldCheck(swallow_cancel=True)
    host = await started_host(check)
    assert await stop_ends(host)
    assert host._probe is not None and host._probe.done()
    assert check.calls == 2  # the check at start and the one that swallowed the cancellation: no pass after it
