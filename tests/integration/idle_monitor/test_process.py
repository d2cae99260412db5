"""`python -m thermostat.idle_monitor` as its own process against the in-process pod controller: it serves
GetMonitorState and ticks on its own, hands its lease back on SIGTERM, and stays up and SERVING, saying why,
when there is nothing it may watch."""

from __future__ import annotations

import asyncio
import re
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.fixtures.polling import eventually
from tests.fixtures.services import VOLUME, RunningService, pod_controller_env, start_pod_controller
from tests.integration.idle_monitor.conftest import POD, POD_ID, monitor_env, monitor_process
from thermostat.chassis.registry import IDLE_MONITOR
from thermostat.dev.simulators.runpod.server import RunPodSimulator
from thermostat.monitor.v1 import monitor_pb2, monitor_pb2_grpc
from thermostat.store.db import Store
from thermostat.store.lease import LeaseStore


@pytest.fixture
async def unconfigured_controller(runpod_sim: RunPodSimulator, db_store: Store) -> AsyncIterator[RunningService]:
    """A pod controller whose pod has no volume id: configured:false, nothing to watch."""
    async with start_pod_controller(pod_controller_env(runpod_sim, RUNPOD_VOLUME_ID=""), db_store) as running:
        yield running


def logged_port(log: Path) -> int | None:
    match = re.search(r"idle-monitor listening on 127\.0\.0\.1:(\d+)", logged(log))
    return int(match.group(1)) if match else None


def logged(log: Path) -> str:
    return log.read_text()


async def listening(log: Path) -> str:
    """The address the monitor process logged it listens on (a small file, read between polls)."""

    async def port() -> int | None:
        return logged_port(log)

    try:
        return f"127.0.0.1:{await eventually(port, timeout=20, every=0.05)}"
    except AssertionError:
        raise AssertionError(logged(log)) from None


@pytest.mark.parametrize(
    ("env", "name", "watch", "line"),
    [
        pytest.param(
            {},
            POD,
            "DisabledUntilConfigured",
            "pod qwen: disabled until configured: the pod controller "
            "reports RUNPOD_API_KEY unset or the pod's volume id blank; watching nothing for it until then",
            id="unconfigured",
        ),
        pytest.param(
            {"RUNPOD_POD_NAME": "llama"},
            "llama",
            "UnknownToController",
            "pod llama: the pod controller does not know this name (is RUNPOD_PODS the same for both services?); "
            "not watching it",
            id="a-name-the-controller-does-not-know",
        ),
    ],
)
async def test_the_monitor_stays_up_and_serving_when_it_has_nothing_to_watch(
    runpod_sim: RunPodSimulator,
    unconfigured_controller: RunningService,
    database_url: str,
    tmp_path: Path,
    env: dict[str, str],
    name: str,
    watch: str,
    line: str,
) -> None:
    """No exit (an orchestrator would restart it in a loop): SERVING, the reason said once and in GetMonitorState,
    no RunPod call; SIGTERM still ends it with status 0."""
    log = tmp_path / "monitor.log"
    env = monitor_env(database_url, unconfigured_controller.address, MONITOR_RECHECK_SECONDS="0.05", **env)
    async with monitor_process(env, log) as process:
        address = await listening(log)
        async with grpc.aio.insecure_channel(address) as channel:
            health = await health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=IDLE_MONITOR.health_service), timeout=5
            )
            assert health.status == health_pb2.HealthCheckResponse.SERVING
            stub = monitor_pb2_grpc.IdleMonitorStub(channel)

            async def said() -> monitor_pb2.GetMonitorStateResponse | None:
                state = await stub.GetMonitorState(monitor_pb2.GetMonitorStateRequest(name=name), timeout=5)
                return state if state.watch == watch else None

            state = await eventually(said, timeout=20, every=0.05)
        assert process.returncode is None, "still up"
        process.send_signal(signal.SIGTERM)
        await asyncio.wait_for(process.wait(), timeout=20)
    output = log.read_text()
    assert process.returncode == 0, output
    assert output.count(line) == 1, output
    assert state.watch_reason and state.watch_reason in line
    assert runpod_sim.requests() == []


async def test_the_monitor_process_ticks_serves_its_state_and_hands_the_lease_back_on_sigterm(
    runpod_sim: RunPodSimulator, pod_controller: RunningService, database_url: str, db_store: Store, tmp_path: Path
) -> None:
    """build() wires leaders, the state store and GetMonitorState; SIGTERM releases the lease at once."""
    runpod_sim.add_pod(pod_id=POD_ID, status="RUNNING", volume_id=VOLUME)
    log = tmp_path / "monitor.log"
    env = monitor_env(
        database_url, pod_controller.address, CHECK_SECONDS="0.2", IDLE_MINUTES="0.02", MONITOR_LEASE_SECONDS="1"
    )
    async with monitor_process(env, log) as process:
        address = await listening(log)
        async with grpc.aio.insecure_channel(address) as channel:
            stub = monitor_pb2_grpc.IdleMonitorStub(channel)

            async def stopped() -> monitor_pb2.GetMonitorStateResponse | None:
                state = await stub.GetMonitorState(monitor_pb2.GetMonitorStateRequest(name=POD), timeout=5)
                return state if state.phase == "Down" and state.last_signal == "NotRunning" else None

            # 0.02 idle minutes at 0.2 s is a six-tick window after the seeding ready tick
            state = await eventually(stopped, timeout=20, every=0.2)
        holder = await LeaseStore(db_store.pool).holder(f"monitor:{POD}")
        assert holder is not None
        process.send_signal(signal.SIGTERM)
        await asyncio.wait_for(process.wait(), timeout=20)

    output = log.read_text()
    assert process.returncode == 0, output
    assert (state.idle_threshold, state.check_seconds) == (6, 0.2)
    assert runpod_sim.pod(POD_ID)["status"] == "EXITED"
    assert f"pod {POD_ID} ready after" in output
    assert f"pod qwen: stopping {POD_ID} (idle: idle streak 6/6)" in output
    assert await LeaseStore(db_store.pool).holder(f"monitor:{POD}") is None, "released, not left to expire"
