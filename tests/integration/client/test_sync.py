"""The blocking client against the same real services: calls return values, iterators are plain iterators (and
closing one early closes its stream), errors are the same typed errors. The services run on the test's event
loop, so each script runs in a worker thread, as a script's main thread would."""

from __future__ import annotations

import asyncio

import pytest

from tests.integration.client.conftest import Stack
from thermostat.client import JobRequest, Phase, Thermostat, errors


async def test_a_script_wakes_a_pod_and_runs_jobs(stack: Stack) -> None:
    def script() -> tuple[list[str], bytes, list[str], str, dict[int, bytes]]:
        with Thermostat(stack.config) as t:
            phases = [step.phase for step in t.pods.ensure_ready("qwen", timeout=30)]
            echoed = t.pool.run("local", b"from a script")
            job = t.pool.submit("local", b"waited")
            states = [j.state for j in t.pool.wait(job.id, timeout=30)]
            with pytest.raises(errors.JobFailed) as failed:
                t.pool.run("failing", b"x")
            many = {
                o.request.key: o.value()
                for o in t.pool.run_many(JobRequest("local", b"%d" % n, key=n) for n in range(5))
            }
            return phases, echoed, states, failed.value.job.state, many

    phases, echoed, states, failed_state, many = await asyncio.to_thread(script)
    assert phases[0] == Phase.WAKING and phases[-1] == Phase.READY
    assert echoed == b"from a script"
    assert many == {n: b"%d" % n for n in range(5)}
    assert states[-1] == "completed"
    assert failed_state == "failed"


async def test_leaving_an_iterator_early_closes_its_stream_and_the_client_still_works(stack: Stack) -> None:
    def script() -> tuple[str, bool]:
        t = Thermostat(stack.config)
        with t:
            first = next(iter(t.pods.watch("qwen", timeout=30)))
            answer = first.pod.name, t.pods.status("qwen").configured
        t.close()  # closing again does nothing
        return answer

    assert await asyncio.to_thread(script) == ("qwen", True)


async def test_the_sync_client_raises_the_same_typed_errors(stack: Stack) -> None:
    def script() -> None:
        with Thermostat(stack.config) as t:
            t.pods.status("nosuchpod")

    with pytest.raises(errors.NotFound):
        await asyncio.to_thread(script)


async def test_connect_reads_the_environment(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("THERMOSTAT_ADDR", stack.pool.address)
    monkeypatch.setenv("STRATA_POOL_TOKEN", stack.config.pool_token or "")
    monkeypatch.setenv("STRATA_TENANT", "from-env")

    def script() -> str:
        with Thermostat.connect() as t:
            return t.pool.submit("local", b"env").tenant_id

    assert await asyncio.to_thread(script) == "from-env"
