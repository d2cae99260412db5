"""Two replicas asked to wake the same pod at the same moment run one wake (issue 3), however fast it is."""
from __future__ import annotations

import asyncio

from thermostat.pod_controller.repository import PodRepository, WakeCompletion
from thermostat.pod_controller.wake_gate import WakeGate
from thermostat.policy.wake.wake_result import WakeOutcome, WakeResult
from thermostat.store.db import Store


def _gate(store: Store, replica: str) -> WakeGate:
    return WakeGate(PodRepository(store.pool), store.leases, replica=replica)


async def test_two_replicas_at_the_same_moment_run_one_wake_even_when_it_is_fast(database_url) -> None:
    """A wake shorter than the joiner's poll must still be joined, not run a second time; both get its result."""
    async with (
        await Store.open(database_url, max_size=4, application_name="a") as store_a,
        await Store.open(database_url, max_size=4, application_name="b") as store_b,
    ):
        gate_a, gate_b = _gate(store_a, "a"), _gate(store_b, "b")
        doubled = 0
        for i in range(20):
            runs: list[str] = []

            def wake_as(who: str, runs: list[str] = runs):
                async def wake(attempt, fence):
                    runs.append(who)
                    # shorter than the joiner's poll (0.1 s): the other replica must still join, not rerun
                    await asyncio.sleep(0.03)
                    return (WakeResult(outcome=WakeOutcome.ALREADY_RUNNING, message=f"by {who}"),
                            WakeCompletion(outcome="Succeeded", wake_outcome="AlreadyRunning", reason="x"))
                return wake

            results = await asyncio.gather(gate_a.run(f"qwen{i}", wake_as("a")), gate_b.run(f"qwen{i}", wake_as("b")))
            if len(runs) > 1:
                doubled += 1
            else:
                assert results[0] == results[1] == WakeResult(outcome=WakeOutcome.ALREADY_RUNNING,
                                                              message=f"by {runs[0]}")
        assert doubled == 0, f"{doubled}/20 simultaneous wake pairs ran the wake twice"
