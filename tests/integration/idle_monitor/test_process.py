"""`python -m thermostat.idle_monitor` as its own process against the in-process pod controller: it serves
GetMonitorState and ticks on its own, hands its lease back on SIGTERM, and exits with one clear line when
there is nothing it may watch."""

from __future__ import annotations

import asyncio
import re
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from tests.fixtures.polling import eventually
from tests.fixtures.services import VOLUME, RunningService, pod_controller_env, start_pod_controller
from tests.integration.idle_monitor.conftest import POD, POD_ID, monitor_env, monitor_process
from thermostat.dev.simulators.runpod import RunPodSimulator
from thermostat.monitor.v1 import monitor_pb2, monitor_pb2_grpc
from thermostat.store.db import Store
from thermostat.store.lease import LeaseStore


@pytest.fixture
async def unconfigured_controller(runpod_sim: RunPodSimulator, db_store: Store) -> AsyncIterator[RunningService]:
    """A pod controller whose pod has no volume id: configured:false, nothing to watch."""
    async with start_pod_controller(pod_controller_env(runpod_sim, RUNPOD_VOLUME_ID=""), db_store) as running:
        yield running


@pytest.mark.parametrize(("env", "line"), [
    pytest.param({}, "idle monitor: no pod is configured (RUNPOD_API_KEY unset or RUNPOD_VOLUME_ID blank); "
                     "nothing to watch, exiting", id="unconfigured"),
    pytest.param({"RUNPOD_POD_NAME": "llama"}, "pod llama: the pod controller does not know this name",
                 id="a-name-the-controller-does-not-know"),
])
async def test_the_monitor_exits_with_a_clear_line_when_it_has_nothing_to_watch(
        unconfigured_controller: RunningService, database_url: str, tmp_path: Path, env: dict[str, str],
        line: str) -> None:
    """Exit status 0 within seconds, and the reason on one line — no silent idling, no retry loop."""
    log = tmp_path / "monitor.log"
    async with monitor_process(monitor_env(database_url, unconfigured_controller.address, **env), log) as process:
        try:
            await asyncio.wait_for(process.wait(), timeout=20)
        except TimeoutError:
            raise AssertionError(f"still running:\n{log.read_text()}") from None
    output = log.read_text()
    assert process.returncode == 0, output
    assert line in output


async def test_the_monitor_process_ticks_serves_its_state_and_hands_the_lease_back_on_sigterm(
        runpod_sim: RunPodSimulator, pod_controller: RunningService, database_url: str, db_store: Store,
        tmp_path: Path) -> None:
    """build() wires leaders, the state store and GetMonitorState; SIGTERM releases the lease at once."""
    runpod_sim.add_pod(pod_id=POD_ID, status="RUNNING", volume_id=VOLUME)
    log = tmp_path / "monitor.log"
    env = monitor_env(database_url, pod_controller.address, CHECK_SECONDS="0.2", IDLE_MINUTES="0.02",
                      MONITOR_LEASE_SECONDS="1")
    async with monitor_process(env, log) as process:
        async def port() -> int | None:
            match = re.search(r"idle-monitor listening on 127\.0\.0\.1:(\d+)", log.read_text())
            return int(match.group(1)) if match else None

        try:
            address = f"127.0.0.1:{await eventually(port, timeout=20, every=0.05)}"
        except AssertionError:
            raise AssertionError(log.read_text()) from None
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
