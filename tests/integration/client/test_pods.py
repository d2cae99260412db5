"""The client's pod calls against the real pod controller, idle monitor and metering: a wake followed to ready
with its progress, stop, status, watch, history, the monitor's view, spend and budgets, and every refusal as
its typed error."""

from __future__ import annotations

import grpc
import pytest

from tests.fixtures.polling import eventually
from tests.integration.client.conftest import Stack
from thermostat.client import AsyncThermostat, Phase, WakeProgress, errors
from thermostat.client.progress import ORDER, progress_of


async def monitor_saw_it_down(client: AsyncThermostat) -> None:
    """Wait until the idle monitor has ticked on the stopped pod: its next boot is then a boot of its own."""

    async def down() -> bool | None:
        return True if (await client.pods.monitor("qwen")).phase == "Down" else None

    await eventually(down, timeout=15, every=0.05)


def outcomes(steps: list[WakeProgress]) -> list[str]:
    return [step.outcome for step in steps if step.outcome is not None]


def never_back(steps: list[WakeProgress]) -> bool:
    ranks = [ORDER.index(Phase(step.phase)) for step in steps]
    return ranks == sorted(ranks)


async def test_ensure_ready_wakes_the_pod_and_follows_it_until_the_model_answers(client: AsyncThermostat) -> None:
    steps = [step async for step in client.pods.ensure_ready("qwen", timeout=30)]
    assert (steps[0].phase, steps[0].detail, steps[0].outcome) == (Phase.WAKING, "waking qwen", None)
    assert outcomes(steps) == ["Created"]
    assert steps[-1].phase == Phase.READY
    ready = steps[-1].pod
    assert ready is not None and ready.is_running and ready.HasField("ready_since") and ready.proxy_url
    assert all(step.phase != Phase.DOWN for step in steps)


async def test_ensure_ready_on_a_ready_pod_wakes_nothing_and_ends_ready(client: AsyncThermostat, stack: Stack) -> None:
    _ = [step async for step in client.pods.ensure_ready("qwen", timeout=30)]
    writes = len([r for r in stack.sim.requests() if r.method == "POST"])
    steps = [step async for step in client.pods.ensure_ready("qwen", timeout=30)]
    assert [(s.phase, s.outcome) for s in steps] == [
        (Phase.WAKING, None),
        (Phase.WAKING, "AlreadyRunning"),
        (Phase.READY, None),
    ]
    assert len([r for r in stack.sim.requests() if r.method == "POST"]) == writes


async def test_the_boot_is_reported_while_the_wake_is_still_running(client: AsyncThermostat, stack: Stack) -> None:
    """StartPod answers once the pod runs; the watch beside it shows the pod being placed before that."""
    stack.sim.configure(provisioning_seconds=-1)  # held in PROVISIONING until the test lets it go
    steps: list[WakeProgress] = []
    async for step in client.pods.ensure_ready("qwen", timeout=30):
        steps.append(step)
        if step.phase == Phase.PROVISIONING and step.outcome is None:
            assert outcomes(steps) == [], "the wake cannot have answered: the pod does not run yet"
            stack.sim.configure(provisioning_seconds=0)
    phases = [s.phase for s in steps]
    assert Phase.PROVISIONING in phases and phases[-1] == Phase.READY
    assert len(outcomes(steps)) == 1


async def test_the_wakes_answer_after_the_watch_showed_the_boot_is_no_step_back(
    client: AsyncThermostat, stack: Stack
) -> None:
    """Issue 35: `provisioning → waking (Created …)` went back; the answer comes in the furthest phase reported."""
    stack.sim.configure(provisioning_seconds=-1)
    steps: list[WakeProgress] = []
    async for step in client.pods.ensure_ready("qwen", timeout=30):
        steps.append(step)
        if step.phase == Phase.PROVISIONING and step.outcome is None:
            stack.sim.configure(provisioning_seconds=0)
    assert never_back(steps), [(s.phase, s.outcome) for s in steps]
    (answer,) = [s for s in steps if s.outcome is not None]
    assert answer.outcome == "Created" and answer.phase != Phase.WAKING


async def test_ensure_ready_reports_the_eta_while_the_model_loads(client: AsyncThermostat, stack: Stack) -> None:
    """A first boot is measured; while the second one loads its model, the ETA comes from it."""
    _ = [step async for step in client.pods.ensure_ready("qwen", timeout=30)]
    await client.pods.stop("qwen")
    await monitor_saw_it_down(client)
    stack.sim.configure(model_ready_seconds=-1)  # the model does not answer until the test says
    async for step in client.pods.ensure_ready("qwen", timeout=30):
        if step.phase == Phase.LOADING and step.outcome is None:  # not the wake's answer, given in the phase reached
            assert step.eta_seconds is not None and step.eta_seconds >= 0
            assert "ready in about" in step.detail
            stack.sim.configure(model_ready_seconds=0)
    assert step.phase == Phase.READY


async def test_a_pod_that_goes_down_while_it_boots_is_wake_failed(client: AsyncThermostat, stack: Stack) -> None:
    """The pod goes down once the wake answered Created, while its model loads. Stopped at the answer, not at the
    watch's first loading view: the watch can see the pod running before the wake's own poll does, and a pod
    stopped then fails the wake itself ("new pod … is EXITED …; not retrying"), another ordering with its own
    test (policy/wake: decide_new_pod)."""
    stack.sim.configure(model_ready_seconds=-1)

    async def stop_it_while_loading() -> None:
        async for step in client.pods.ensure_ready("qwen", timeout=30):
            if step.outcome == "Created":
                pod = await client.pods.status("qwen")
                assert progress_of(pod).phase == Phase.LOADING
                stack.sim.set_pod_status(pod.pod_id, "EXITED")

    with pytest.raises(errors.WakeFailed) as failed:
        await stop_it_while_loading()
    assert "not running (EXITED) after the wake (Created)" in failed.value.detail


async def test_a_new_pod_that_goes_down_before_the_wake_saw_it_run_fails_the_wake_itself(
    client: AsyncThermostat, stack: Stack
) -> None:
    """The other ordering: the created pod is held provisioning, so the wake is still polling it when the watch
    shows it; it exits then, and the wake's next poll gives up on it without a second create."""
    stack.sim.configure(provisioning_seconds=-1)

    async def stop_it_while_provisioning() -> None:
        async for step in client.pods.ensure_ready("qwen", timeout=30):
            if step.phase == Phase.PROVISIONING and step.pod is not None and step.pod.pod_id:
                stack.sim.set_pod_status(step.pod.pod_id, "EXITED")

    with pytest.raises(errors.WakeFailed) as failed:
        await stop_it_while_provisioning()
    assert "is EXITED with 1 GPU(s); not retrying" in failed.value.detail
    assert len(stack.sim.pods()) == 1  # no second create


async def test_a_wake_that_answered_waiting_is_asked_again_once_the_pod_is_down(
    client: AsyncThermostat, stack: Stack
) -> None:
    """The seed's 202 Waiting means "poll again": the pod stayed PROVISIONING past the controller's polls; when
    it is then seen down the client wakes it once more, and follows that wake to ready."""
    stack.sim.configure(provisioning_seconds=-1)  # the wake's polls run out: Waiting
    steps: list[WakeProgress] = []
    async for step in client.pods.ensure_ready("qwen", timeout=30):
        steps.append(step)
        if step.outcome == "Waiting":
            (pod_id,) = [str(p["id"]) for p in stack.sim.pods()]
            stack.sim.set_pod_status(pod_id, "EXITED")
            stack.sim.configure(provisioning_seconds=0)
    assert outcomes(steps) == ["Waiting", "Started"]
    assert steps[-1].phase == Phase.READY
    assert never_back(steps), [(s.phase, s.outcome) for s in steps]  # the second wake's boot is not shown again


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
