"""GET /api/pods/{name}/monitor and the readySince it publishes, through the real Envoy edge: REST JSON
transcoded from GetMonitorState, in the pod routes' lowerCamelCase."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from tests.fixtures.edge import house_edge, port_of
from tests.fixtures.services import VOLUME, RunningService, pod_controller_env
from thermostat.chassis.registry import IDLE_MONITOR, POD_CONTROLLER
from thermostat.chassis.server import ServiceHost, ServiceSpec
from thermostat.dev.simulators.runpod.server import RunPodSimulator
from thermostat.idle_monitor.repository import MonitorRepository
from thermostat.idle_monitor.scrape_clients import ScrapeClients
from thermostat.idle_monitor.servicer import IdleMonitorServicer
from thermostat.idle_monitor.ticker import PodTicker
from thermostat.monitor.v1 import monitor_pb2_grpc
from thermostat.pods.v1 import pods_pb2_grpc
from thermostat.policy.common.pod_options import parse_pod_options
from thermostat.policy.idle.monitor_options import MonitorOptions
from thermostat.policy.idle.monitor_watch import Watch
from thermostat.store.db import Store

POD_ID = "edgepod0000001"
pytestmark = pytest.mark.e2e


def iso(at: datetime) -> str:
    return at.astimezone(UTC).isoformat().replace("+00:00", "Z")


@pytest.fixture
async def monitor_port(
    runpod_sim: RunPodSimulator, pod_controller: RunningService, db_store: Store
) -> AsyncIterator[int]:
    pods = parse_pod_options(pod_controller_env(runpod_sim)).pods
    async with pod_controller.channel() as channel:
        servicer = IdleMonitorServicer(
            pods,
            MonitorRepository(db_store.pool),
            MonitorOptions(),
            pods_pb2_grpc.PodControllerStub(channel),
            10,
            watch_of=lambda _: Watch.WATCHING,
        )
        host = ServiceHost(
            ServiceSpec(
                name=IDLE_MONITOR.name,
                service_names=IDLE_MONITOR.served,
                register=lambda server: monitor_pb2_grpc.add_IdleMonitorServicer_to_server(servicer, server),
            )
        )
        port = await host.start("127.0.0.1", 0)
        yield port
        await host.stop(0.5)


@pytest.fixture
async def edge(pod_controller: RunningService, monitor_port: int, tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    ports = {POD_CONTROLLER.name: port_of(pod_controller.address), IDLE_MONITOR.name: monitor_port}
    async with (
        house_edge(ports, tmp_path / "envoy.yaml") as envoy,
        httpx.AsyncClient(base_url=f"http://127.0.0.1:{envoy.listeners['edge']}", timeout=10) as http,
    ):
        yield http


async def test_the_monitor_state_and_ready_since_are_served_as_rest_json(
    runpod_sim: RunPodSimulator, pod_controller: RunningService, db_store: Store, edge: httpx.AsyncClient
) -> None:
    """Two ticks of an idle pod: Ready since the first, streak 1 of 15, an idle stop projected 14 ticks on."""
    runpod_sim.add_pod(pod_id=POD_ID, status="RUNNING", volume_id=VOLUME)
    ready = datetime.now(UTC).replace(microsecond=0)
    async with pod_controller.channel() as channel, ScrapeClients() as scrapes:
        ticker = PodTicker(
            pod_name="qwen",
            controller=pods_pb2_grpc.PodControllerInternalStub(channel),
            scrapes=scrapes,
            states=MonitorRepository(db_store.pool),
            options=MonitorOptions(),
            replica="edge-test",
            scrape_timeout=10,  # a hang guard only: the simulator answers at once
            controller_timeout=10,
        )
        for at in (ready, ready + timedelta(seconds=60)):
            await ticker.tick_once(at)

    reply = await edge.get("/api/pods/QWEN/monitor")
    assert reply.status_code == 200, reply.text
    state = reply.json()
    assert {
        k: state[k]
        for k in (
            "name",
            "phase",
            "idleStreak",
            "idleThreshold",
            "bootingTicks",
            "bootGraceThreshold",
            "lastSignal",
            "lastSignalPodId",
            "checkSeconds",
            "runtimeCapMinutes",
            "projectedStopTrigger",
            "watch",
            "watchReason",
        )
    } == {
        "name": "qwen",
        "phase": "Ready",
        "idleStreak": 1,
        "idleThreshold": 15,
        "bootingTicks": 0,
        "bootGraceThreshold": 20,
        "lastSignal": "Idle",
        "lastSignalPodId": POD_ID,
        "checkSeconds": 60,
        "runtimeCapMinutes": 360,
        "projectedStopTrigger": "idle",
        "watch": "Watching",
        "watchReason": "",
    }
    assert (state["readySince"], state["runtimeCapStart"]) == (iso(ready), iso(ready))
    assert state["projectedStopAt"] == iso(ready + timedelta(minutes=15))
    assert "etaSeconds" not in state

    pod = (await edge.get("/api/pods/qwen")).json()
    assert (pod["podId"], pod["isRunning"], pod["readySince"]) == (POD_ID, True, iso(ready))
    assert (await edge.get("/api/pods/llama/monitor")).status_code == 404
