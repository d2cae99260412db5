"""A service's drain hooks run as its stop begins, beside the gRPC drain, and its stop hooks only after them; the
signal that stopped a served process is on its host for the stop hooks to read (the pool: a deploy's SIGTERM
keeps the fleet, thermostat.policy.pool.departure)."""

from __future__ import annotations

import asyncio
import os
import signal

from thermostat.chassis.server import ServiceHost, ServiceSpec, serve_until_signalled


def spec(**hooks: object) -> ServiceSpec:
    return ServiceSpec(name="t", service_names=["test.Echo"], register=lambda s: None, **hooks)  # type: ignore[arg-type]


async def test_the_stop_hooks_run_after_the_drain_hooks_have_finished() -> None:
    order: list[str] = []
    draining, release = asyncio.Event(), asyncio.Event()

    async def drain() -> None:
        order.append("drain began")
        draining.set()
        await release.wait()
        order.append("drain ended")

    async def stop() -> None:
        order.append("stop hook")

    host = ServiceHost(spec(on_drain=[drain], on_stop=[stop]))
    await host.start()
    stopping = asyncio.ensure_future(host.stop(5.0))
    await draining.wait()
    assert order == ["drain began"] and not stopping.done()
    release.set()
    await stopping
    assert order == ["drain began", "drain ended", "stop hook"]


async def test_a_drain_hook_past_the_grace_is_cut_and_the_stop_hooks_still_run() -> None:
    stopped = asyncio.Event()

    async def forever() -> None:
        await asyncio.Event().wait()

    async def stop() -> None:
        stopped.set()

    host = ServiceHost(spec(on_drain=[forever], on_stop=[stop]))
    await host.start()
    await asyncio.wait_for(host.stop(0.1), timeout=30)
    assert stopped.is_set()


async def test_the_signal_that_stopped_a_served_process_is_on_its_host() -> None:
    seen: list[str | None] = []
    host = ServiceHost(spec())

    async def stop() -> None:
        seen.append(host.stopped_by)

    host.spec.on_stop = [stop]
    serving = asyncio.ensure_future(serve_until_signalled(host, host="127.0.0.1", port=0, grace=0.1))
    while not host.serving:
        await asyncio.sleep(0.01)
    os.kill(os.getpid(), signal.SIGTERM)  # the loop's handler takes it: this process is not ended
    await asyncio.wait_for(serving, timeout=30)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.remove_signal_handler(sig)
    assert seen == ["SIGTERM"]
