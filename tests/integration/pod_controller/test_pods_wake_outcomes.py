"""Each wake outcome over real gRPC, with the exact RunPod calls it made (pod-control seed: Wake service, part 2b)."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from tests.fixtures.polling import eventually
from tests.fixtures.services import OPERATOR, SIM_API_KEY, VOLUME, pod_controller_env
from tests.integration.pod_controller.harness import (
    A100,
    CATALOG,
    CREATE,
    LIST,
    RTX_4500,
    action,
    actions,
    api_calls,
    controller,
    created_gpus,
    observe,
    pods_on,
    start,
    wakes,
    writes,
)
from thermostat.pod_controller.repository import PodRepository
from thermostat.pod_controller.wake_fence import Halt
from thermostat.pod_controller.wake_service import WakeService
from thermostat.pods.v1 import pods_pb2
from thermostat.policy.common.pod_options import parse_pod_options
from thermostat.providers.runpod.client import RunPodV2Client


async def test_a_wake_of_a_running_pod_is_already_running_and_bills_nothing(pods_stub, runpod_sim) -> None:
    """A RUNNING pod on the volume: one list, one observe, no billable call, no gpuId or price."""
    pod = runpod_sim.add_pod(volume_id=VOLUME, status="RUNNING")
    answer = await start(pods_stub)
    assert answer.code is grpc.StatusCode.OK
    assert answer.http_code is None
    assert answer.reply is not None
    assert answer.reply.outcome == "AlreadyRunning"
    assert answer.reply.pod_id == pod
    assert answer.reply.proxy_url == f"{runpod_sim.url}/proxy/{pod}-8000"
    assert not answer.reply.HasField("gpu_id")
    assert not answer.reply.HasField("price_per_hour")
    assert api_calls(runpod_sim) == [LIST, observe(pod)]
    assert await actions(pods_stub) == []
    (wake,) = await wakes(pods_stub)
    assert (wake.outcome, wake.wake_outcome, wake.pod_id) == ("Succeeded", "AlreadyRunning", pod)


async def test_a_wake_of_an_exited_pod_starts_it_once_and_records_the_start(pods_stub, runpod_sim) -> None:
    """An EXITED pod: exactly one start action, then Started on the same pod; the Start is in the audit trail."""
    pod = runpod_sim.add_pod(volume_id=VOLUME, status="EXITED")
    answer = await start(pods_stub)
    assert answer.reply is not None
    assert (answer.reply.outcome, answer.reply.pod_id) == ("Started", pod)
    assert not answer.reply.HasField("gpu_id")
    assert api_calls(runpod_sim) == [LIST, observe(pod), action(pod), observe(pod)]
    (start_request,) = runpod_sim.requests(f"/v2/pods/{pod}/action")
    assert start_request.json_body == {"action": "start"}
    (recorded,) = await actions(pods_stub)
    assert (recorded.action, recorded.pod_id, recorded.ok, recorded.trigger, recorded.http_status) == (
        "Start",
        pod,
        True,
        "wake",
        200,
    )


async def test_a_wake_with_no_pod_creates_one_and_reports_its_gpu_and_price(pods_stub, runpod_sim) -> None:
    """No pod: catalogue, the 400 on the cheapest listed card, 201 on the A100 at 1.59, one pod on the volume."""
    answer = await start(pods_stub)
    assert answer.reply is not None
    assert answer.reply.outcome == "Created"
    assert (answer.reply.gpu_id, answer.reply.price_per_hour) == (A100, 1.59)
    (pod,) = pods_on(runpod_sim, VOLUME)
    assert answer.reply.pod_id == pod["id"]
    assert api_calls(runpod_sim) == [LIST, CATALOG, CREATE, CREATE, observe(answer.reply.pod_id)]
    assert created_gpus(runpod_sim) == [RTX_4500, A100]
    (create,) = await actions(pods_stub)
    assert (create.action, create.pod_id, create.gpu_id, create.price_per_hour, create.http_status, create.ok) == (
        "Create",
        answer.reply.pod_id,
        A100,
        1.59,
        201,
        True,
    )
    (wake,) = await wakes(pods_stub)
    assert (wake.outcome, wake.wake_outcome, wake.gpu_id, wake.candidates_considered) == (
        "Succeeded",
        "Created",
        A100,
        2,
    )


async def test_a_create_that_stays_provisioning_is_waiting_202_and_terminates_nothing(runpod_sim, db_store) -> None:
    """A new pod held in PROVISIONING past the poll budget: 202 Waiting naming it, no terminate, TimedOut."""
    stale = runpod_sim.add_pod(volume_id=VOLUME, status="RUNNING", gpu_count=1)
    runpod_sim.patch_pod(stale, {"runtime": {"uptime": 60, "gpus": []}})  # running without a GPU: replace it
    runpod_sim.configure(provisioning_seconds=-1)
    async with controller(runpod_sim, db_store, RUNPOD_WAKE_MAX_POLLS="3") as c:
        answer = await start(c.public)
        assert answer.code is grpc.StatusCode.OK
        assert answer.http_code == "202"
        assert answer.reply is not None
        assert answer.reply.outcome == "Waiting"
        new = answer.reply.pod_id
        assert new not in ("", stale)
        assert api_calls(runpod_sim) == [LIST, observe(stale), CATALOG, CREATE, CREATE, *[observe(new)] * 3]
        assert ("DELETE", f"/v2/pods/{stale}") not in api_calls(runpod_sim)
        assert {p["id"] for p in pods_on(runpod_sim, VOLUME)} == {stale, new}
        (wake,) = await wakes(c.public)
        assert (wake.outcome, wake.wake_outcome, wake.pod_id) == ("TimedOut", "Waiting", new)
        assert [a.action for a in await actions(c.public)] == ["Create"]
        assert writes(runpod_sim) == [CREATE, CREATE]


@pytest.mark.parametrize(
    ("halt", "outcome", "kind"),
    [
        pytest.param(Halt(in_flight=True, reason="lease moved"), "Waiting", None, id="lease-lost-is-waiting"),
        pytest.param(
            Halt(in_flight=False, reason="stopped"),
            "Failed",
            "StoppedDuringWake",
            id="stopped-during-the-wake-is-failed",
        ),
    ],
)
async def test_a_halted_wake_issues_no_billable_call(runpod_sim, db_store, halt, outcome, kind) -> None:
    """Fencing: with the fence closed no start or create is sent; a lost lease is Waiting, a stop is Failed."""
    pod = parse_pod_options(pod_controller_env(runpod_sim)).pods[0]

    async def closed() -> Halt:
        return halt

    async with RunPodV2Client(SIM_API_KEY, base_url=runpod_sim.base_url) as client:
        result = await WakeService(client, PodRepository(db_store.pool)).wake(pod, closed)
    assert result.outcome == outcome
    assert result.failure_kind == kind
    assert not result.billed
    writes = [r for r in runpod_sim.requests("/v2") if r.method in ("POST", "DELETE")]
    assert writes == []


async def test_an_operators_stop_during_a_wake_is_not_undone_by_a_replacement(runpod_sim, db_store) -> None:
    """The wake starts the stopped pod, the operator stops it: the wake ends Failed without creating or deleting."""
    pod = runpod_sim.add_pod(volume_id=VOLUME, status="EXITED")
    runpod_sim.set_pod_lifecycle(pod, starting_seconds=-1, provisioning_seconds=-1)
    # the wake polls the starting pod for as long as it takes the stop to land: no window for the stop to miss
    async with controller(runpod_sim, db_store, RUNPOD_WAKE_POLL_SECONDS="0.1", RUNPOD_WAKE_MAX_POLLS="1000") as c:
        wake = asyncio.create_task(start(c.public, timeout=60))

        async def started() -> bool | None:
            return True if action(pod) in writes(runpod_sim) else None

        await eventually(started, timeout=30)
        stopped = await c.public.StopPod(pods_pb2.StopPodRequest(name="qwen"), metadata=OPERATOR, timeout=10)
        assert stopped.ok
        answer = await wake
    assert answer.code == grpc.StatusCode.ABORTED
    assert "stopped (manual) during the wake" in answer.details
    assert CREATE not in writes(runpod_sim)
    assert not [w for w in writes(runpod_sim) if w[0] == "DELETE"]
