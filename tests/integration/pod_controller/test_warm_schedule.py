"""The warm-hours schedule over the real wake (issue 26): a stopped pod is started before its hours open with
trigger `schedule` in the history, once per window, and never a second pod — not with two replicas scheduling,
not with a user's wake in flight. A malformed RUNPOD_WARM_HOURS stops the start naming the variable."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta

import pytest

from tests.fixtures.clock import FakeClock
from tests.fixtures.services import SIM_API_KEY, VOLUME, pod_controller_env, start_pod_controller
from tests.integration.pod_controller.harness import pods_on
from thermostat.dev.simulators.runpod.server import RunPodSimulator
from thermostat.pod_controller.repository import ActionRow, PodRepository
from thermostat.pod_controller.servicer import PodControl
from thermostat.pod_controller.wake_gate import WakeGate
from thermostat.pod_controller.wake_service import WakeService
from thermostat.pod_controller.warm_schedule import WarmSchedule
from thermostat.policy.common.pod_options import parse_pod_options
from thermostat.policy.common.warm_hours import parse_warm_hours
from thermostat.providers.runpod.client import RunPodV2Client
from thermostat.store.db import Store

OPENS = datetime(2026, 12, 2, 8, 0, tzinfo=UTC)  # Wednesday 08:00 UTC
HOURS = parse_warm_hours("Mon-Fri 08:00-18:00 UTC", "RUNPOD_WARM_HOURS")


MakeControl = Callable[[RunPodSimulator, Store, str], PodControl]


@pytest.fixture
async def control_of() -> AsyncIterator[MakeControl]:
    """control_of(sim, store, replica): one replica's wake path (gate, wake, records); its client closed after."""
    clients: list[RunPodV2Client] = []

    def make(sim: RunPodSimulator, store: Store, replica: str) -> PodControl:
        client = RunPodV2Client(SIM_API_KEY, base_url=sim.base_url, timeout_seconds=2)
        clients.append(client)
        return _control(sim, store, replica, client)

    yield make
    for client in clients:
        await client.aclose()


def _control(sim: RunPodSimulator, store: Store, replica: str, client: RunPodV2Client) -> PodControl:
    pods = parse_pod_options(pod_controller_env(sim)).pods
    records = PodRepository(store.pool)
    gate = WakeGate(records, store.leases, replica=replica, lease_seconds=5, call_budget=2)
    return PodControl(pods, client, records, gate, WakeService(client, records))


def schedule_of(control: PodControl, store: Store, clock: FakeClock, replica: str) -> WarmSchedule:
    return WarmSchedule(
        control.pods,
        {"qwen": HOURS},
        control.records,
        store.leases,
        lambda pod: control.run_wake(pod, trigger="schedule"),
        replica=replica,
        every_seconds=30,
        clock=clock,
    )


async def test_a_stopped_pod_is_started_before_its_hours_open_with_trigger_schedule(
    runpod_sim: RunPodSimulator, db_store: Store, control_of: MakeControl
) -> None:
    pod_id = runpod_sim.add_pod(volume_id=VOLUME, status="EXITED")
    clock = FakeClock(wall=OPENS - timedelta(minutes=11))  # no measured boot: lead 10 min + one 30 s pass
    control = control_of(runpod_sim, db_store, "replica-a")
    schedule = schedule_of(control, db_store, clock, "replica-a")
    assert await schedule.run_pass() == [], "10 min 30 s ahead is not yet"
    clock.advance((OPENS - timedelta(minutes=10, seconds=30) - clock.now()).total_seconds())
    started = await schedule.run_pass()
    assert [(name, due.window.start) for name, due in started] == [("qwen", OPENS)]
    await schedule.settle()
    assert [(a.action, a.pod_id, a.trigger, a.ok) for a in await actions_of(control)] == [
        ("Start", pod_id, "schedule", True)
    ]
    clock.advance((OPENS - clock.now()).total_seconds())
    assert await schedule.run_pass() == [], "once per window"


async def test_two_replicas_scheduling_at_once_start_one_pod_once(
    runpod_sim: RunPodSimulator, db_store: Store, control_of: MakeControl
) -> None:
    runpod_sim.add_pod(volume_id=VOLUME, status="EXITED")
    clock = FakeClock(wall=OPENS - timedelta(minutes=5))
    a, b = control_of(runpod_sim, db_store, "replica-a"), control_of(runpod_sim, db_store, "replica-b")
    first, second = schedule_of(a, db_store, clock, "replica-a"), schedule_of(b, db_store, clock, "replica-b")
    started = await asyncio.gather(first.run_pass(), second.run_pass())
    assert sorted(len(s) for s in started) == [0, 1], "the schedule lease lets one replica wake"
    await asyncio.gather(first.settle(), second.settle())
    assert [a.action for a in await actions_of(a)] == ["Start"]
    assert len(pods_on(runpod_sim, VOLUME)) == 1


@pytest.mark.parametrize(
    "user_first", [pytest.param(True, id="user-wake-first"), pytest.param(False, id="schedule-first")]
)
async def test_a_user_wake_and_the_schedule_together_start_one_pod(
    runpod_sim: RunPodSimulator, db_store: Store, control_of: MakeControl, user_first: bool
) -> None:
    """Both go through one gate: whichever asks first runs the wake, the other joins it — one pod, one Start."""
    runpod_sim.add_pod(volume_id=VOLUME, status="EXITED")
    control = control_of(runpod_sim, db_store, "replica-a")
    schedule = schedule_of(control, db_store, FakeClock(wall=OPENS - timedelta(minutes=5)), "replica-a")
    pod = control.pods[0]
    if user_first:
        user = asyncio.create_task(control.run_wake(pod))
        await asyncio.sleep(0)  # the user's wake holds the in-process gate before the pass asks
        await schedule.run_pass()
    else:
        await schedule.run_pass()
        user = asyncio.create_task(control.run_wake(pod))
    await schedule.settle()
    result = await user
    assert str(result.outcome) in ("Started", "AlreadyRunning")
    starts = [(a.action, a.trigger) for a in await actions_of(control)]
    assert starts == [("Start", "wake" if user_first else "schedule")]
    assert len(pods_on(runpod_sim, VOLUME)) == 1


async def test_a_malformed_warm_hours_stops_the_start_naming_the_variable(
    runpod_sim: RunPodSimulator, db_store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    env = pod_controller_env(runpod_sim, RUNPOD_WARM_HOURS="weekdays 8-18")
    with pytest.raises(SystemExit) as exit_:
        async with start_pod_controller(env, db_store):
            pass
    assert exit_.value.code == 2
    assert "RUNPOD_WARM_HOURS='weekdays 8-18'" in capsys.readouterr().err


async def test_a_pod_without_warm_hours_is_never_scheduled(
    runpod_sim: RunPodSimulator, db_store: Store, control_of: MakeControl
) -> None:
    """An empty RUNPOD_WARM_HOURS reads as none: the pass, even at a window's start, wakes nothing."""
    runpod_sim.add_pod(volume_id=VOLUME, status="EXITED")
    control = control_of(runpod_sim, db_store, "replica-a")
    env_hours = {"qwen": parse_warm_hours("", "RUNPOD_WARM_HOURS")}
    schedule = WarmSchedule(
        control.pods,
        env_hours,
        control.records,
        db_store.leases,
        lambda pod: control.run_wake(pod, trigger="schedule"),
        replica="replica-a",
        clock=FakeClock(wall=OPENS),
    )
    assert not schedule.scheduled
    assert await schedule.run_pass() == []
    assert await actions_of(control) == []


async def actions_of(control: PodControl) -> list[ActionRow]:
    """The pod's billable actions as recorded, oldest first."""
    page = await control.records.history_page("qwen", before=None, limit=500)
    return [e.entry for e in reversed(page) if isinstance(e.entry, ActionRow)]
