"""GetMonitorState over real gRPC: the phase, the streaks with their thresholds, the last signal and its pod,
the runtime-cap start, the projected stop time if nothing changes, and the wake ETA while booting."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import grpc
import pytest

from tests.fixtures.postgres import EmbeddedPostgres, frozen
from tests.fixtures.services import OPERATOR, pod_controller_env
from tests.integration.idle_monitor.conftest import POD, POD_ID, MakeRig, MonitorRig, minutes
from thermostat.chassis.registry import IDLE_MONITOR
from thermostat.chassis.server import ServiceHost, ServiceSpec
from thermostat.chassis.timestamps import from_timestamp as at
from thermostat.idle_monitor.repository import MonitorRepository
from thermostat.idle_monitor.servicer import IdleMonitorServicer
from thermostat.monitor.v1 import monitor_pb2, monitor_pb2_grpc
from thermostat.pods.v1 import pods_pb2
from thermostat.policy.common.pod_options import parse_pod_options
from thermostat.policy.idle.monitor_watch import Watch
from thermostat.store.db import Store


@contextlib.asynccontextmanager
async def monitor_service(
    rig: MonitorRig, states: MonitorRepository | None = None, **options: float
) -> AsyncIterator[monitor_pb2_grpc.IdleMonitorStub]:
    """The monitor's GetMonitorState served on loopback over the rig's state store (or `states`) and controller."""
    pods = parse_pod_options(pod_controller_env(rig.sim)).pods
    servicer = IdleMonitorServicer(
        pods, states or rig.states, rig.options, rig.pods, 10, watch_of=lambda _: Watch.WATCHING, **options
    )
    host = ServiceHost(
        ServiceSpec(
            name=IDLE_MONITOR.name,
            service_names=IDLE_MONITOR.served,
            register=lambda server: monitor_pb2_grpc.add_IdleMonitorServicer_to_server(servicer, server),
        )
    )
    port = await host.start("127.0.0.1", 0)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            yield monitor_pb2_grpc.IdleMonitorStub(channel)
    finally:
        await host.stop(0.5)


async def state_of(stub: monitor_pb2_grpc.IdleMonitorStub, name: str = POD) -> monitor_pb2.GetMonitorStateResponse:
    state: monitor_pb2.GetMonitorStateResponse = await stub.GetMonitorState(
        monitor_pb2.GetMonitorStateRequest(name=name), timeout=10
    )
    return state


async def test_monitor_state_follows_a_boot_into_ready(rig: MonitorRig) -> None:
    """Booting with its ticks and grace, then Ready with the streak, the ready time and the signal's pod."""
    rig.add_pod(POD_ID, model_ready_seconds=3 * 60)
    async with monitor_service(rig) as stub:
        before = await state_of(stub, "QWEN")
        assert (before.name, before.phase, before.last_signal) == (POD, "Down", "")
        assert not before.HasField("projected_stop_at") and not before.HasField("runtime_cap_start")

        first_seen = rig.now
        await rig.ticks(3)
        booting = await state_of(stub)
        assert (booting.phase, booting.booting_ticks, booting.boot_grace_threshold) == ("Booting", 3, 20)
        assert (booting.idle_streak, booting.idle_threshold) == (0, 15)
        assert (booting.last_signal, booting.last_signal_pod_id) == ("UnreachableButRunning", POD_ID)
        assert at(booting.runtime_cap_start) == first_seen
        assert (booting.runtime_cap_minutes, booting.check_seconds) == (360, 60)
        assert at(booting.last_tick_at) == first_seen + minutes(2)
        assert not booting.HasField("ready_since")
        assert (at(booting.projected_stop_at), booting.projected_stop_trigger) == (
            first_seen + minutes(19),
            "boot-grace",
        )

        ready_tick = rig.now
        await rig.ticks(5)
        ready = await state_of(stub)
        assert (ready.phase, ready.idle_streak, ready.booting_ticks) == ("Ready", 4, 0)
        assert (ready.last_signal, ready.last_signal_pod_id) == ("Idle", POD_ID)
        assert at(ready.ready_since) == ready_tick == await rig.ready_since()
        assert at(ready.runtime_cap_start) == first_seen
        assert (at(ready.projected_stop_at), ready.projected_stop_trigger) == (ready_tick + minutes(15), "idle")


async def test_an_unknown_pod_name_is_not_found(rig: MonitorRig) -> None:
    """The name is resolved against the configured pods before anything is read."""
    async with monitor_service(rig) as stub:
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await state_of(stub, "llama")
    assert raised.value.code() is grpc.StatusCode.NOT_FOUND


@pytest.mark.parametrize(
    ("env", "setup", "warmup", "trigger"),
    [
        pytest.param({}, {}, 6, "idle", id="idle"),
        pytest.param({}, {"model_ready_seconds": -1}, 4, "boot-grace", id="boot-grace"),
        pytest.param(
            {"MAX_RUNTIME_MINUTES": "12.5"}, {"in_flight": 1}, 3, "runtime-cap", id="runtime-cap-off-the-grid"
        ),
        pytest.param(
            {"MAX_RUNTIME_MINUTES": "10", "CHECK_SECONDS": "45"},
            {"in_flight": 1},
            2,
            "runtime-cap",
            id="runtime-cap-between-ticks",
        ),
    ],
)
async def test_the_projected_stop_is_when_the_monitor_actually_stops(
    make_rig: MakeRig, env: dict[str, str], setup: dict[str, float], warmup: int, trigger: str
) -> None:
    """If nothing changes the pod stops on the projected tick, for the reason projected."""
    rig = await make_rig(**env)
    rig.add_pod(POD_ID, model_ready_seconds=setup.get("model_ready_seconds"))
    if "in_flight" in setup:
        rig.sim.set_in_flight(POD_ID, running=int(setup["in_flight"]))
    async with monitor_service(rig) as stub:
        await rig.ticks(warmup)
        projected = await state_of(stub)
        _, stopped_at, decision = await rig.tick_until_stop(limit=60)
    assert decision.stop is not None and str(decision.stop.trigger) == trigger
    assert (at(projected.projected_stop_at), projected.projected_stop_trigger) == (stopped_at, trigger)


async def test_a_busy_pod_projects_no_idle_stop_only_the_cap(rig: MonitorRig) -> None:
    """Read as the last tick, a busy pod never goes idle: what would stop it is the runtime cap (its tokens flow,
    so the stall guard projects nothing either)."""
    rig.add_pod(POD_ID)
    rig.sim.set_in_flight(POD_ID, running=1)
    first_seen = rig.now
    async with monitor_service(rig) as stub:
        for _ in range(3):
            rig.sim.record_turn(POD_ID, 10, 10)
            await rig.tick()
        busy = await state_of(stub)
    assert (busy.phase, busy.last_signal) == ("Ready", "Busy")
    assert (at(busy.projected_stop_at), busy.projected_stop_trigger) == (first_seen + minutes(360), "runtime-cap")


async def test_a_booting_pod_shows_the_wake_eta_from_its_measured_boots(rig: MonitorRig) -> None:
    """The first wake is measured (wake → ready, 4 minutes); the second wake's GetPod and state carry etaSeconds."""
    rig.sim.configure(model_ready_seconds=4 * 60)
    woke = await rig.pods.StartPod(pods_pb2.StartPodRequest(name=POD), metadata=OPERATOR, timeout=30)
    assert woke.outcome == "Created"
    async with monitor_service(rig) as stub:
        await rig.ticks(5)
        assert (await state_of(stub)).phase == "Ready"
        assert not (await rig.view()).HasField("eta_seconds")
        await rig.pods.StopPod(pods_pb2.StopPodRequest(name=POD), metadata=OPERATOR, timeout=10)
        await rig.tick()
        assert (await state_of(stub)).phase == "Down"

        again = await rig.pods.StartPod(pods_pb2.StartPodRequest(name=POD), metadata=OPERATOR, timeout=30)
        assert (again.outcome, again.pod_id) == ("Started", woke.pod_id)
        await rig.tick()
        view, booting = await rig.view(), await state_of(stub)
        assert booting.phase == "Booting"
        assert view.HasField("eta_seconds") and booting.HasField("eta_seconds")
        # the measured boot is four simulated minutes less the time since this wake. The rig's clock starts at
        # the current minute rounded down while the controller stamps wakes with the database's real clock, so
        # the measure may be short by up to a minute: anything but a four-minute boot falls outside this range
        assert 120 < booting.eta_seconds <= 240
        assert abs(booting.eta_seconds - view.eta_seconds) < 5

        await rig.ticks(4)
        ready = await state_of(stub)
        assert ready.phase == "Ready"
        assert not ready.HasField("eta_seconds") and not (await rig.view()).HasField("eta_seconds")


async def test_a_frozen_store_answers_unavailable_within_the_read_bound(
    rig: MonitorRig, dedicated_postgres: EmbeddedPostgres
) -> None:
    """The state read is bounded by STORE_READ_TIMEOUT_SECONDS, as the controller's GET is: a hung store is a 503
    within the bound (here 0.5 s, against a 6 s deadline), not a 500 once the pool's 30 s statement timeout ends."""
    async with (
        await Store.open(dedicated_postgres.dsn, max_size=2, application_name="frozen-monitor") as store,
        monitor_service(rig, MonitorRepository(store.pool), store_read_timeout=0.5) as stub,
    ):
        assert (await state_of(stub)).phase == "Down"  # answered while the store answers
        with frozen(dedicated_postgres), pytest.raises(grpc.aio.AioRpcError) as error:
            await stub.GetMonitorState(monitor_pb2.GetMonitorStateRequest(name=POD), timeout=6)
        assert error.value.code() is grpc.StatusCode.UNAVAILABLE
        assert (await state_of(stub)).phase == "Down"  # and again once it thaws
