"""The client's pod calls against the real pod controller, idle monitor and metering: a wake followed to ready
with its progress, stop, status, watch, history, the monitor's view, spend and budgets, and every refusal as
its typed error."""

from __future__ import annotations

import grpc
import pytest

from tests.integration.client.conftest import Stack
from thermostat.client import AsyncThermostat, Phase, errors


async def test_ensure_ready_wakes_the_pod_and_follows_it_until_the_model_answers(client: AsyncThermostat) -> None:
    steps = [step async for step in client.pods.ensure_ready("qwen", timeout=30)]
    assert steps[0].phase == Phase.WAKING and "Created" in steps[0].detail
    assert steps[-1].phase == Phase.READY
    ready = steps[-1].pod
    assert ready is not None and ready.is_running and ready.HasField("ready_since") and ready.proxy_url
    assert all(step.phase != Phase.DOWN for step in steps)


async def test_ensure_ready_on_a_ready_pod_wakes_nothing_and_ends_ready(client: AsyncThermostat, stack: Stack) -> None:
    _ = [step async for step in client.pods.ensure_ready("qwen", timeout=30)]
    starts = len([r for r in stack.sim.requests() if r.method == "POST"])
    steps = [step async for step in client.pods.ensure_ready("qwen", timeout=30)]
    assert "AlreadyRunning" in steps[0].detail
    assert [s.phase for s in steps[1:]] == [Phase.READY]
    assert len([r for r in stack.sim.requests() if r.method == "POST"]) == starts


async def test_ensure_ready_reports_the_eta_while_the_model_loads(client: AsyncThermostat, stack: Stack) -> None:
    """A first boot is measured; the second shows its duration as the ETA while the model loads."""
    _ = [step async for step in client.pods.ensure_ready("qwen", timeout=30)]
    await client.pods.stop("qwen")
    stack.sim.configure(model_ready_seconds=1.5)
    steps = [step async for step in client.pods.ensure_ready("qwen", timeout=30)]
    loading = [s for s in steps if s.phase == Phase.LOADING]
    assert loading, [s.phase for s in steps]
    assert any(s.eta_seconds is not None for s in loading)
    assert "ready in about" in loading[-1].detail or "no estimate" in loading[-1].detail
    assert steps[-1].phase == Phase.READY


async def test_a_wake_the_controller_refuses_is_wake_failed(client: AsyncThermostat, stack: Stack) -> None:
    await client.pods.set_budget("qwen", daily_usd=0.0)
    with pytest.raises(errors.WakeFailed) as refused:
        _ = [step async for step in client.pods.ensure_ready("qwen", timeout=30)]
    assert refused.value.code is grpc.StatusCode.ABORTED
    assert "budget" in refused.value.detail
    assert isinstance(refused.value, errors.Conflict)


async def test_start_stop_status_and_history(client: AsyncThermostat) -> None:
    started = await client.pods.start("qwen")
    assert started.outcome in ("Created", "Started") and started.pod_id
    status = await client.pods.status("qwen")
    assert status.name == "qwen" and status.configured and status.pod_id == started.pod_id
    stopped = await client.pods.stop("qwen")
    assert stopped.ok and [p.pod_id for p in stopped.pods] == [started.pod_id]
    history = await client.pods.history("qwen", page_size=10)
    actions = [e.action.action for e in history.entries if e.HasField("action")]
    assert "Stop" in actions and ("Create" in actions or "Start" in actions)
    first = await client.pods.history("qwen", page_size=1)
    assert first.next_page_token and len(first.entries) == 1
    second = await client.pods.history("qwen", page_size=1, page_token=first.next_page_token)
    assert second.entries[0] != first.entries[0]


async def test_watch_streams_the_pod_view(client: AsyncThermostat) -> None:
    async for message in client.pods.watch("qwen", timeout=10):
        assert message.pod.name == "qwen"
        break


async def test_the_monitor_spend_and_budget_of_a_pod(client: AsyncThermostat) -> None:
    state = await client.pods.monitor("qwen")
    assert state.name == "qwen" and state.check_seconds == pytest.approx(0.1)
    spend = await client.pods.spend("qwen")
    assert spend.name == "qwen" and spend.total_usd >= 0
    budget = await client.pods.set_budget("qwen", daily_usd=5.0, monthly_usd=100.0)
    assert (budget.daily_usd, budget.monthly_usd) == (5.0, 100.0)
    read = await client.pods.budget("qwen")
    assert (read.daily_usd, read.monthly_usd) == (5.0, 100.0)
    cleared = await client.pods.set_budget("qwen", monthly_usd=100.0)
    assert not cleared.HasField("daily_usd")


async def test_an_unknown_pod_is_not_found_on_every_pod_call(client: AsyncThermostat) -> None:
    for call in (client.pods.status, client.pods.start, client.pods.stop, client.pods.history, client.pods.spend):
        with pytest.raises(errors.NotFound):
            await call("nosuchpod")


async def test_tokens_are_checked_and_refusals_are_typed(stack: Stack) -> None:
    async with AsyncThermostat(stack.config_with(operator_token=None, wake_token=None)) as anonymous:
        with pytest.raises(errors.Unauthenticated):
            await anonymous.pods.start("qwen")
        with pytest.raises(errors.Unauthenticated):
            await anonymous.pods.stop("qwen")
        with pytest.raises(errors.Unauthenticated):
            await anonymous.pods.set_budget("qwen", daily_usd=1.0)
        assert (await anonymous.pods.status("qwen")).configured  # reads are open
    async with AsyncThermostat(stack.config_with(operator_token=None, wake_token="not-the-token")) as wrong:
        with pytest.raises(errors.PermissionDenied) as denied:
            await wrong.pods.start("qwen")
        assert "not-the-token" not in str(denied.value)
    # the wake-only token wakes, and does not stop
    async with AsyncThermostat(stack.config_with(operator_token=None)) as waker:
        assert (await waker.pods.start("qwen")).outcome in ("Created", "Started")
        with pytest.raises(errors.Unauthenticated):
            await waker.pods.stop("qwen")


async def test_an_invalid_page_size_is_invalid_argument_naming_it(client: AsyncThermostat) -> None:
    with pytest.raises(errors.InvalidArgument) as refused:
        await client.pods.history("qwen", page_size=-1)
    assert "page_size" in refused.value.detail
