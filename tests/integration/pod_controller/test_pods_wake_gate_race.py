"""Two replicas asked to wake the same pod run one wake (issue 3), however fast it is; a joiner takes over
from a leader that died. The joiner waits on an injected clock, so these tests step time instead of waiting."""

from __future__ import annotations

import asyncio
import uuid

from tests.fixtures.clock import FakeClock
from tests.fixtures.postgres import open_store
from thermostat.pod_controller.repository import PodRepository, WakeCompletion
from thermostat.pod_controller.wake_gate import WakeGate
from thermostat.policy.wake.wake_result import WakeOutcome, WakeResult
from thermostat.store.db import Store


def _gate(store: Store, replica: str) -> WakeGate:
    return WakeGate(PodRepository(store.pool), store.leases, replica=replica)


async def test_two_replicas_at_the_same_moment_run_one_wake_even_when_it_is_fast(database_url) -> None:
    """A wake shorter than the joiner's poll must still be joined, not run a second time; both get its result."""
    async with (
        await open_store(database_url, max_size=4, application_name="a") as store_a,
        await open_store(database_url, max_size=4, application_name="b") as store_b,
    ):
        gate_a, gate_b = _gate(store_a, "a"), _gate(store_b, "b")
        doubled = 0
        for i in range(20):
            runs: list[str] = []

            def wake_as(who: str, runs: list[str] = runs):
                async def wake(attempt, fence, after_abandoned):
                    runs.append(who)
                    # shorter than the joiner's poll (0.1 s): the other replica must still join, not rerun
                    await asyncio.sleep(0.03)
                    return (
                        WakeResult(outcome=WakeOutcome.ALREADY_RUNNING, message=f"by {who}"),
                        WakeCompletion(outcome="Succeeded", wake_outcome="AlreadyRunning", reason="x"),
                    )

                return wake

            results = await asyncio.gather(gate_a.run(f"qwen{i}", wake_as("a")), gate_b.run(f"qwen{i}", wake_as("b")))
            if len(runs) > 1:
                doubled += 1
            else:
                assert (
                    results[0] == results[1] == WakeResult(outcome=WakeOutcome.ALREADY_RUNNING, message=f"by {runs[0]}")
                )
        assert doubled == 0, f"{doubled}/20 simultaneous wake pairs ran the wake twice"


def _completion() -> WakeCompletion:
    return WakeCompletion(outcome="Succeeded", wake_outcome="AlreadyRunning", reason="x")


async def test_a_joiner_polls_the_leaders_row_per_interval_of_its_clock_and_returns_the_leaders_result(
    db_store: Store,
) -> None:
    """Replica b joins a's wake in flight; a's result reaches b at b's first poll after a completed."""
    clock = FakeClock()
    gate_a = _gate(db_store, "a")
    gate_b = WakeGate(PodRepository(db_store.pool), db_store.leases, replica="b", clock=clock)
    running, release, runs = asyncio.Event(), asyncio.Event(), []

    async def lead(attempt, fence, after_abandoned):
        runs.append("a")
        running.set()
        await release.wait()
        return WakeResult(outcome=WakeOutcome.STARTED, pod_id="p1", message="by a"), _completion()

    async def rerun(attempt, fence, after_abandoned):
        runs.append("b")
        return WakeResult(outcome=WakeOutcome.STARTED, message="by b"), _completion()

    leader = asyncio.create_task(gate_a.run("qwen", lead))
    await running.wait()
    joiner = asyncio.create_task(gate_b.run("qwen", rerun))
    await clock.settled(1)  # b found a's row in flight and waits for its next poll
    clock.advance(gate_b.poll_seconds)
    await clock.settled(1)
    assert not joiner.done()
    release.set()
    led = await leader
    clock.advance(gate_b.poll_seconds)
    assert await joiner == led == WakeResult(outcome=WakeOutcome.STARTED, pod_id="p1", message="by a")
    assert runs == ["a"]


async def test_a_joiner_whose_leader_died_leads_a_new_wake_at_its_next_lease_check(db_store: Store) -> None:
    """The leader's lease is gone but its row is open: the joiner notices at its lease check (a third of the
    lease, on its clock), closes the row as abandoned and runs the wake itself."""
    clock = FakeClock()
    repository = PodRepository(db_store.pool)
    gate = WakeGate(repository, db_store.leases, replica="b", clock=clock)
    dead = await db_store.leases.acquire("wake:qwen", "a:crashed", 60)
    assert dead is not None
    await repository.insert_wake(uuid.uuid4(), "qwen", "a:crashed")
    runs = []

    async def wake(attempt, fence, after_abandoned):
        runs.append("b")
        return WakeResult(outcome=WakeOutcome.STARTED, message="by b"), _completion()

    joiner = asyncio.create_task(gate.run("qwen", wake))
    await clock.settled(1)
    await db_store.leases.release(dead)  # the leader is gone; its row stays open
    clock.advance(gate.poll_seconds)
    await clock.settled(1)
    assert runs == []  # between lease checks the joiner only reads the row
    clock.advance(gate.lease_seconds / 3)
    assert await joiner == WakeResult(outcome=WakeOutcome.STARTED, message="by b")
    assert runs == ["b"]
    reasons = [r["reason"] for r in await db_store.pool.fetch("SELECT reason FROM pod_wakes ORDER BY requested_at")]
    assert reasons[0].startswith("abandoned") and len(reasons) == 2
