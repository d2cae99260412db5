"""Two replicas asked to wake the same pod at the same moment run one wake (issue 3), however fast it is."""
from __future__ import annotations

import asyncio

from thermostat.pod_controller.wake_gate import WakeGate
from thermostat.store.db import Store


async def test_two_replicas_at_the_same_moment_run_one_wake_even_when_it_is_fast(database_url) -> None:
    """A wake shorter than the joiner's poll must still be joined, not run a second time."""
    async with (
        await Store.open(database_url, max_size=4, application_name="a") as store_a,
        await Store.open(database_url, max_size=4, application_name="b") as store_b,
    ):
        gate_a = WakeGate(store_a, replica="a")
        gate_b = WakeGate(store_b, replica="b")
        doubled = 0
        for i in range(20):
            runs: list[str] = []

            def wake_as(who: str, runs: list[str] = runs):
                async def wake(attempt, fence):
                    runs.append(who)
                    await asyncio.sleep(0.03)
                    return ({"outcome": "AlreadyRunning", "by": who},
                            {"outcome": "Succeeded", "wake_outcome": "AlreadyRunning", "reason": "x"})
                return wake

            await asyncio.gather(gate_a.run(f"qwen{i}", wake_as("a")), gate_b.run(f"qwen{i}", wake_as("b")))
            if len(runs) > 1:
                doubled += 1
        assert doubled == 0, f"{doubled}/20 simultaneous wake pairs ran the wake twice"
