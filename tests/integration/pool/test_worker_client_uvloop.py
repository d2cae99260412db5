"""The worker hop on uvloop, the loop the dispatcher runs on in production (EVENT_LOOP's default).

uvloop's transports are not subclasses of asyncio's: the hop must take them as they come. Found when the
first bench of the two together left every machine `starting` (its health probe raised in connection_made).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest
import uvloop

from tests.integration.pool import test_worker_connections as connections
from tests.integration.pool.conftest import MACHINE_TOKEN, machine
from thermostat.policy.pool.job_outcome import ReplyKind
from thermostat.providers.pool.local import LocalBackend
from thermostat.providers.pool.worker_client import WorkerClient


async def _probe_run_and_reuse() -> tuple[str, bool, list[tuple[ReplyKind, int | None, bytes]], int]:
    async with WorkerClient() as client:
        backend = LocalBackend(client, stop_grace_seconds=2.0)
        try:
            async with machine(backend) as handle:
                healthy = await client.health(handle.endpoint)
                replies = [
                    await client.execute(handle.endpoint, MACHINE_TOKEN, f"job {n}".encode(), deadline_seconds=30)
                    for n in range(3)
                ]
                cancel = await client.cancel(handle.endpoint, MACHINE_TOKEN, "no-such-build")
        finally:
            await backend.aclose()
    loop = type(asyncio.get_running_loop()).__module__
    return loop, healthy, [(r.kind, r.status, r.body) for r in replies], cancel.status or 0


def test_a_machine_is_probed_runs_jobs_over_a_kept_connection_and_takes_a_cancel_on_uvloop() -> None:
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        loop, healthy, replies, cancel_status = runner.run(_probe_run_and_reuse())
    assert loop.startswith("uvloop")
    assert healthy
    assert replies == [(ReplyKind.ANSWERED, 200, f"job {n}".encode()) for n in range(3)]
    assert cancel_status == 404


@pytest.mark.parametrize(
    "scenario",
    [
        connections.test_a_connection_answered_before_its_payload_went_out_whole_is_not_reused,
        connections.test_a_close_delimited_answer_cut_by_a_reset_is_broken_not_complete,
        connections.test_an_answer_head_that_never_ends_is_broken_and_its_connection_closed,
    ],
    ids=["answered-before-the-payload-went-out", "cut-by-a-reset", "endless-head"],
)
def test_the_hops_bounds_hold_on_uvloop(scenario: Callable[[], Awaitable[None]]) -> None:
    """uvloop's transports buffer, reset and deliver reads their own way: the same scripted workers, on uvloop."""
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(scenario())
