"""Safe boot before the secret (pod-control seed: Disabled-until-configured): with RUNPOD_API_KEY unset or the volume id
blank the monitor stays up and SERVING, watches nothing, says so once and in GetMonitorState, and makes no
RunPod call; it starts watching a pod once the controller reports it configured — a controller restarted with
the secret while the monitor runs — and judges each of several pods on its own.

The monitor is built in this process (its watches are readable) against a real pod controller on loopback;
MONITOR_RECHECK_SECONDS is 0.05, and every wait is on something observable (the watch's ask count, the state).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import datetime

import pytest
from grpc_health.v1 import health_pb2

from tests.fixtures.polling import eventually
from tests.fixtures.services import VOLUME, pod_controller_env, start_pod_controller
from tests.integration.idle_monitor.conftest import POD, POD_ID, InProcessMonitor, in_process_monitor, messages
from thermostat.chassis.ports import free_port
from thermostat.chassis.registry import IDLE_MONITOR
from thermostat.dev.simulators.runpod.server import RunPodSimulator
from thermostat.monitor.v1 import monitor_pb2
from thermostat.store.db import Store
from thermostat.store.lease import LeaseStore

DISABLED_REASON = (
    "disabled until configured: the pod controller reports RUNPOD_API_KEY unset or the pod's volume id blank"
)
BLANKS = [
    pytest.param({"RUNPOD_API_KEY": None}, id="api-key-unset"),
    pytest.param({"RUNPOD_VOLUME_ID": ""}, id="volume-id-blank"),
]


def monitor_env(sim: RunPodSimulator, controller_address: str, **overrides: str) -> dict[str, str]:
    """The monitor reads the pod list from the same variables as the controller, but never the key."""
    env = {k: v for k, v in pod_controller_env(sim).items() if k != "RUNPOD_API_KEY"}
    env.update(
        {
            "POD_CONTROLLER_ADDR": controller_address,
            "MONITOR_RECHECK_SECONDS": "0.05",
            "CONTROLLER_TIMEOUT_SECONDS": "2",
            "MONITOR_LEASE_SECONDS": "5",
        }
    )
    env.update(overrides)
    return env


async def asked(monitor: InProcessMonitor, pod: str, times: int) -> bool | None:
    return True if monitor.watches[pod].asks >= times else None


async def watching(monitor: InProcessMonitor, pod: str = POD) -> monitor_pb2.GetMonitorStateResponse | None:
    """The pod's state once it is watched and a tick has been saved."""
    state = await monitor.state(pod)
    return state if state.watch == "Watching" and state.HasField("last_tick_at") else None


async def disabled(monitor: InProcessMonitor, pod: str = POD) -> monitor_pb2.GetMonitorStateResponse | None:
    state = await monitor.state(pod)
    return state if state.watch == "DisabledUntilConfigured" else None


@pytest.mark.parametrize("blank", BLANKS)
async def test_an_unconfigured_pod_leaves_the_monitor_serving_and_watching_nothing_without_a_runpod_call(
    runpod_sim: RunPodSimulator, db_store: Store, monitor_log: pytest.LogCaptureFixture, blank: Mapping[str, str]
) -> None:
    """Asked five times: SERVING, DisabledUntilConfigured with its reason, one warning line, no ticker, no lease."""
    runpod_sim.add_pod(pod_id=POD_ID, status="RUNNING", volume_id=VOLUME)
    async with (
        start_pod_controller(pod_controller_env(runpod_sim, **blank), db_store) as controller,
        in_process_monitor(monitor_env(runpod_sim, controller.address), db_store) as monitor,
    ):
        await eventually(lambda: asked(monitor, POD, 5), timeout=10)
        serving = health_pb2.HealthCheckResponse.SERVING
        assert await monitor.health() == await monitor.health(IDLE_MONITOR.health_service) == serving
        state = await monitor.state()
        assert (state.watch, state.watch_reason, state.phase, state.last_signal) == (
            "DisabledUntilConfigured",
            DISABLED_REASON,
            "Down",
            "",
        )
        assert not state.HasField("last_tick_at") and not state.HasField("projected_stop_at")
        assert monitor.monitor.leaders == [], "no ticker for a pod nobody may stop"
    assert runpod_sim.requests() == [], "no call reached RunPod"
    assert messages(monitor_log, "disabled until configured", logging.WARNING) == [
        f"pod qwen: {DISABLED_REASON}; watching nothing for it until then"
    ]
    assert await LeaseStore(db_store.pool).holder(f"monitor:{POD}") is None


async def test_configuration_that_appears_later_is_watched_without_restarting_the_monitor(
    runpod_sim: RunPodSimulator, db_store: Store, monitor_log: pytest.LogCaptureFixture
) -> None:
    """No controller yet, then one without the volume, then one restarted with it: the same monitor watches.

    A controller that later loses its configuration again turns the watch back to disabled (the ticks decide
    nothing), and regaining it resumes ticking with the same ticker.
    """
    runpod_sim.add_pod(pod_id=POD_ID, status="RUNNING", volume_id=VOLUME)
    port = free_port()
    unconfigured = pod_controller_env(runpod_sim, RUNPOD_VOLUME_ID="")
    async with in_process_monitor(
        monitor_env(runpod_sim, f"127.0.0.1:{port}", CHECK_SECONDS="0.1"), db_store
    ) as monitor:
        await eventually(lambda: asked(monitor, POD, 2), timeout=10)
        assert (await monitor.state()).watch == "WaitingForController"

        async with start_pod_controller(unconfigured, db_store, port=port):
            await eventually(lambda: disabled(monitor), timeout=10)
            asks = monitor.watches[POD].asks
            await eventually(lambda: asked(monitor, POD, asks + 3), timeout=10)
            assert (await monitor.state()).watch == "DisabledUntilConfigured"
        assert runpod_sim.requests() == []

        async with start_pod_controller(pod_controller_env(runpod_sim), db_store, port=port):
            state = await eventually(lambda: watching(monitor), timeout=10)
        assert (state.watch_reason, state.last_signal_pod_id) == ("", POD_ID)
        assert [r.path for r in runpod_sim.requests()][:1] == ["/v2/pods"]

        async with start_pod_controller(unconfigured, db_store, port=port):
            again = await eventually(lambda: disabled(monitor), timeout=10)
            assert not again.HasField("projected_stop_at"), "no tick moves the state; nothing is projected"

        async with start_pod_controller(pod_controller_env(runpod_sim), db_store, port=port):
            resumed = await eventually(lambda: watching(monitor), timeout=10)
            ticked = resumed.last_tick_at.ToDatetime()
            await eventually(lambda: _ticked_after(monitor, ticked), timeout=10)
        assert len(monitor.monitor.leaders) == 1, "one ticker, started the first time the pod was configured"

    # each change said once, however many asks and ticks repeated it ("not reachable" lines depend on how the
    # restarts fall between asks, so they are left out)
    assert [m for m in messages(monitor_log, "configured") if m.startswith("pod qwen:")] == [
        f"pod qwen: {DISABLED_REASON}; watching nothing for it until then",
        "pod qwen: configured; watching it (configuration appeared)",
        f"pod qwen: {DISABLED_REASON}; watching nothing for it until then",
        "pod qwen: configured; watching it (configuration appeared)",
    ]


async def _ticked_after(monitor: InProcessMonitor, at: datetime) -> bool | None:
    state = await monitor.state()
    return True if state.last_tick_at.ToDatetime() > at else None


async def test_several_pods_are_judged_each_on_its_own(runpod_sim: RunPodSimulator, db_store: Store) -> None:
    """qwen has a volume, llama none: qwen is watched (its ask and one tick are the only RunPod calls), llama is
    disabled however often it is asked."""
    env = {"RUNPOD_PODS": "qwen,llama", "RUNPOD_VOLUME_ID": "", "RUNPOD_QWEN_VOLUME_ID": VOLUME}
    async with (
        start_pod_controller(pod_controller_env(runpod_sim, **env), db_store) as controller,
        in_process_monitor(
            monitor_env(runpod_sim, controller.address, CHECK_SECONDS="3600", **env), db_store
        ) as monitor,
    ):
        await eventually(lambda: watching(monitor, "qwen"), timeout=10)
        await eventually(lambda: asked(monitor, "llama", 5), timeout=10)
        llama = await monitor.state("llama")
        assert (llama.watch, llama.watch_reason) == ("DisabledUntilConfigured", DISABLED_REASON)
        assert [leader.ticker.pod_name for leader in monitor.monitor.leaders] == ["qwen"]
    # one CHECK_SECONDS is an hour: qwen's ask and its first tick listed the pods; llama's five asks, nothing
    assert [(r.method, r.path) for r in runpod_sim.requests()] == [("GET", "/v2/pods")] * 2
    assert await LeaseStore(db_store.pool).holder("monitor:llama") is None
