"""Every incident the pod-control seed records, replayed against the simulator: what RunPod was asked, in order."""

from __future__ import annotations

import grpc
import pytest

from tests.fixtures.services import TEMPLATE, VOLUME
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
    delete,
    observe,
    pods_on,
    start,
    wakes,
    writes,
)
from thermostat.pods.v1 import pods_pb2

# The simulator's catalogue is the 2026-09-11 probe: what each card is excluded for under a 1.00 cap.
EXCLUDED_AT_1_00 = {
    "NVIDIA A100 80GB PCIe": "PriceAboveMaximum",
    "AMD Instinct MI300X OAM": "PriceAboveMaximum",
    "NVIDIA RTX PRO 6000 Blackwell Server Edition": "PriceAboveMaximum",
    "NVIDIA L40S": "NoCapacity",
    "NVIDIA GeForce RTX 4090": "BelowMinVram",
    "NVIDIA RTX A5000": "BelowMinVram",
    "NVIDIA H100 80GB HBM3": "NotInDataCenter",
    "NVIDIA RTX A6000": "NotInDataCenter",
}


async def test_price_cap_of_1_00_fails_409_naming_every_excluded_gpu_and_the_one_candidates_400(
    runpod_sim, db_store
) -> None:
    """#2093: under 1.00 only the RTX PRO 4500 is left, its create 400s; the 409 detail names every exclusion."""
    async with controller(runpod_sim, db_store, RUNPOD_MAX_PRICE_PER_HOUR="1.00") as c:
        answer = await start(c.public)
        assert answer.code is grpc.StatusCode.ABORTED
        assert answer.metadata.get("x-http-code") == "409"
        assert answer.metadata.get("x-problem-title") == "Failed"
        assert "Exhausted after 1 of 1 candidate(s)" in answer.details
        assert "(last status 400)" in answer.details
        for gpu, reason in EXCLUDED_AT_1_00.items():
            assert f"{gpu}: {reason}" in answer.details
        assert api_calls(runpod_sim) == [LIST, CATALOG, CREATE]
        assert created_gpus(runpod_sim) == [RTX_4500]
        assert pods_on(runpod_sim, VOLUME) == []
        assert await actions(c.public) == []  # a non-2xx create bills nothing and is not an action
        (wake,) = await wakes(c.public)
        assert (wake.outcome, wake.wake_outcome, wake.last_provider_status, wake.candidates_considered) == (
            "Failed",
            "Failed",
            400,
            1,
        )
        assert "NVIDIA A100 80GB PCIe: PriceAboveMaximum" in wake.reason


async def test_price_cap_of_2_00_creates_on_the_a100_at_1_59(runpod_sim, db_store) -> None:
    """#2093, after the fix: the next wake at 2.00 created on the NVIDIA A100 80GB PCIe at 1.59 USD/h."""
    async with controller(runpod_sim, db_store, RUNPOD_MAX_PRICE_PER_HOUR="2.00") as c:
        answer = await start(c.public)
        assert answer.reply is not None
        assert (answer.reply.outcome, answer.reply.gpu_id, answer.reply.price_per_hour) == ("Created", A100, 1.59)
        assert created_gpus(runpod_sim) == [RTX_4500, A100]


async def test_a_cap_under_every_price_refuses_before_any_create_naming_each_card(runpod_sim, db_store) -> None:
    """No candidate at all: Refused with zero POSTs, and the detail still names every card and why."""
    async with controller(runpod_sim, db_store, RUNPOD_MAX_PRICE_PER_HOUR="0.10") as c:
        answer = await start(c.public)
        assert answer.code is grpc.StatusCode.ABORTED
        assert "at or under 0.10 USD/h" in answer.details
        assert f"{RTX_4500}: PriceAboveMaximum" in answer.details
        for gpu in EXCLUDED_AT_1_00:
            assert gpu in answer.details
        assert api_calls(runpod_sim) == [LIST, CATALOG]
        (wake,) = await wakes(c.public)
        assert wake.outcome == "Refused"


async def test_a_waiting_wake_followed_by_rewakes_never_stacks_a_third_pod(runpod_sim, db_store) -> None:
    """Stale EXITED pod + a replacement still provisioning: re-wakes neither start nor create until it serves."""
    stale = runpod_sim.add_pod(volume_id=VOLUME, status="EXITED")
    runpod_sim.inject("POST", f"/v2/pods/{stale}/action", status=500)  # the start does not take
    runpod_sim.configure(provisioning_seconds=-1)
    async with controller(runpod_sim, db_store, RUNPOD_WAKE_MAX_POLLS="3", RUNPOD_GPU_ALLOWLIST=A100) as c:
        first = await start(c.public)
        assert first.reply is not None
        assert (first.reply.outcome, first.http_code) == ("Waiting", "202")
        replacement = first.reply.pod_id
        assert writes(runpod_sim) == [action(stale), CREATE]

        runpod_sim.clear_requests()
        again = await start(c.public)
        assert again.reply is not None
        assert again.reply.outcome == "Waiting"
        assert writes(runpod_sim) == []  # neither a start of the stale pod nor a third pod
        assert api_calls(runpod_sim)[0] == LIST
        assert {p["id"] for p in pods_on(runpod_sim, VOLUME)} == {stale, replacement}

        runpod_sim.set_pod_lifecycle(replacement, provisioning_seconds=0)
        runpod_sim.clear_requests()
        served = await start(c.public)
        assert served.reply is not None
        assert (served.reply.outcome, served.reply.pod_id) == ("AlreadyRunning", replacement)
        assert writes(runpod_sim) == [delete(stale)]  # the stale pod goes only once its replacement serves
        assert [p["id"] for p in pods_on(runpod_sim, VOLUME)] == [replacement]
        assert [(a.action, a.pod_id, a.ok) for a in await actions(c.public)] == [
            ("Start", stale, False),
            ("Create", replacement, True),
            ("Terminate", stale, True),
        ]


async def test_a_gateway_5xx_after_runpod_committed_the_create_adopts_the_pod(runpod_sim, db_store) -> None:
    """The create placed a pod but answered 502: the re-read finds it and adopts it; one POST, one pod."""
    runpod_sim.inject("POST", "/v2/pods", commit_then_fail=True)
    async with controller(runpod_sim, db_store, RUNPOD_GPU_ALLOWLIST=A100) as c:
        answer = await start(c.public)
        assert answer.reply is not None
        (pod,) = pods_on(runpod_sim, VOLUME)
        assert (answer.reply.outcome, answer.reply.pod_id, answer.reply.gpu_id) == ("Created", pod["id"], A100)
        assert api_calls(runpod_sim) == [LIST, CATALOG, CREATE, LIST, observe(answer.reply.pod_id)]
        (create,) = await actions(c.public)
        assert (create.action, create.pod_id, create.ok) == ("Create", pod["id"], True)
        assert "adopted" in create.detail


async def test_a_failed_volume_list_fails_the_wake_without_any_write(pods_stub, runpod_sim) -> None:
    """#1998: a 500 on GET /v2/pods is never "no pod": 409 Failed, Refused, and the list was the only call."""
    runpod_sim.inject("GET", "/v2/pods", status=500)
    answer = await start(pods_stub)
    assert answer.code is grpc.StatusCode.ABORTED
    assert answer.metadata.get("x-http-code") == "409"
    assert "unreadable" in answer.details
    assert api_calls(runpod_sim) == [LIST]
    (wake,) = await wakes(pods_stub)
    assert (wake.outcome, wake.wake_outcome) == ("Refused", "Failed")


@pytest.mark.parametrize(
    "env",
    [
        pytest.param({"RUNPOD_API_KEY": ""}, id="no-api-key"),
        pytest.param({"RUNPOD_VOLUME_ID": " "}, id="blank-volume"),
    ],
)
async def test_an_unconfigured_pod_is_unavailable_on_start_and_stop_without_a_runpod_call(
    runpod_sim, db_store, env
) -> None:
    """RUNPOD_API_KEY unset or RUNPOD_VOLUME_ID blank: start and stop 503, no request leaves, the wake Refused."""
    async with controller(runpod_sim, db_store, **env) as c:
        answer = await start(c.public)
        assert answer.code is grpc.StatusCode.UNAVAILABLE
        assert "not configured" in answer.details
        with pytest.raises(grpc.aio.AioRpcError) as stopped:
            await c.public.StopPod(
                pods_pb2.StopPodRequest(name="qwen"),
                metadata=(("x-rig-operator-token", "operator-token-for-tests"),),
                timeout=10,
            )
        assert stopped.value.code() is grpc.StatusCode.UNAVAILABLE
        assert runpod_sim.requests() == []
        (wake,) = await wakes(c.public)  # pod-control seed (Last wake outcome): unconfigured is a Refused wake
        assert (wake.outcome, wake.wake_outcome) == ("Refused", "Failed")


async def test_a_wake_without_a_template_refuses_to_create(runpod_sim, db_store) -> None:
    """RUNPOD_TEMPLATE_ID blank and no pod: 409 Failed after the list alone, Refused in the wake history."""
    async with controller(runpod_sim, db_store, RUNPOD_TEMPLATE_ID="") as c:
        answer = await start(c.public)
        assert answer.code is grpc.StatusCode.ABORTED
        assert "RUNPOD_TEMPLATE_ID" in answer.details
        assert api_calls(runpod_sim) == [LIST]
        (wake,) = await wakes(c.public)
        assert wake.outcome == "Refused"


async def test_an_observe_404_is_reconfirmed_by_the_volume_list_and_the_listed_pod_is_driven(
    pods_stub, runpod_sim
) -> None:
    """A problem+json 404 on a listed pod re-reads GET /v2/pods before anything else; still listed → started."""
    pod = runpod_sim.add_pod(volume_id=VOLUME, status="EXITED")
    runpod_sim.inject("GET", f"/v2/pods/{pod}", status=404, body="problem")
    answer = await start(pods_stub)
    assert answer.reply is not None
    assert (answer.reply.outcome, answer.reply.pod_id) == ("Started", pod)
    assert api_calls(runpod_sim) == [LIST, observe(pod), LIST, observe(pod), action(pod), observe(pod)]
    assert CREATE not in api_calls(runpod_sim)


async def test_a_bare_404_on_a_listed_pod_is_unreadable_and_never_creates(runpod_sim, db_store) -> None:
    """A text 404 (a proxy page) says nothing about the pod: repoll to Waiting, no re-list, no write."""
    pod = runpod_sim.add_pod(volume_id=VOLUME, status="EXITED")
    runpod_sim.inject("GET", f"/v2/pods/{pod}", status=404, body="text", count=None)
    async with controller(runpod_sim, db_store, RUNPOD_WAKE_MAX_POLLS="3") as c:
        answer = await start(c.public)
        assert answer.reply is not None
        assert (answer.reply.outcome, answer.reply.pod_id, answer.http_code) == ("Waiting", pod, "202")
        assert api_calls(runpod_sim) == [LIST, observe(pod), observe(pod), observe(pod)]


@pytest.mark.parametrize(
    "newest_first", [pytest.param(False, id="stale-listed-first"), pytest.param(True, id="stale-listed-last")]
)
async def test_a_stale_pod_listed_next_to_its_replacement_is_terminated_only_once_the_replacement_runs(
    runpod_sim, db_store, newest_first
) -> None:
    """EXITED + STARTING: no start, no create, no delete; once the replacement runs, AlreadyRunning and DELETE."""
    runpod_sim.configure(list_newest_first=newest_first)
    stale = runpod_sim.add_pod(volume_id=VOLUME, status="EXITED")
    replacement = runpod_sim.add_pod(volume_id=VOLUME, status="STARTING")
    runpod_sim.set_pod_lifecycle(replacement, starting_seconds=-1)
    async with controller(runpod_sim, db_store, RUNPOD_WAKE_MAX_POLLS="2") as c:
        view = await c.public.GetPod(pods_pb2.GetPodRequest(name="qwen"), timeout=10)
        assert (view.pod_id, view.status, view.pods_on_volume) == (replacement, "STARTING", 2)

        booting = await start(c.public)
        assert booting.reply is not None
        assert (booting.reply.outcome, booting.reply.pod_id) == ("Waiting", replacement)  # the one in flight
        assert writes(runpod_sim) == []

        runpod_sim.set_pod_lifecycle(replacement, starting_seconds=0)
        view = await c.public.GetPod(pods_pb2.GetPodRequest(name="qwen"), timeout=10)
        assert (view.pod_id, view.status, view.is_running) == (replacement, "RUNNING", True)

        runpod_sim.clear_requests()
        served = await start(c.public)
        assert served.reply is not None
        assert (served.reply.outcome, served.reply.pod_id) == ("AlreadyRunning", replacement)
        calls = api_calls(runpod_sim)
        assert calls[0] == LIST
        assert sorted(calls[1:3]) == sorted([observe(stale), observe(replacement)])
        assert calls[3:] == [delete(stale)]
        assert [p["id"] for p in pods_on(runpod_sim, VOLUME)] == [replacement]
        (terminate,) = await actions(c.public)
        assert (terminate.action, terminate.pod_id, terminate.trigger) == ("Terminate", stale, "wake")
        assert replacement in terminate.detail


@pytest.mark.parametrize(
    "runtime",
    [
        pytest.param(None, id="runtime-null"),
        pytest.param({}, id="runtime-empty"),
        pytest.param({"uptime": 0, "gpus": []}, id="uptime-0"),
    ],
)
async def test_a_running_pod_whose_gpu_is_still_attaching_is_waited_for_not_replaced(
    runpod_sim, db_store, runtime
) -> None:
    """RUNNING without a live runtime is STARTING (pod-control seed, PR 2 hard requirement): repoll, never a
    second pod."""
    pod = runpod_sim.add_pod(volume_id=VOLUME, status="RUNNING")
    runpod_sim.patch_pod(pod, {"runtime": runtime})
    async with controller(runpod_sim, db_store, RUNPOD_WAKE_MAX_POLLS="3") as c:
        answer = await start(c.public)
        assert answer.reply is not None
        assert (answer.reply.outcome, answer.reply.pod_id) == ("Waiting", pod)
        assert api_calls(runpod_sim) == [LIST, observe(pod), observe(pod), observe(pod)]
        view = await c.public.GetPod(pods_pb2.GetPodRequest(name="qwen"), timeout=10)
        assert (view.status, view.is_running) == ("STARTING", False)


async def test_a_wake_that_billed_a_start_is_failed_not_refused(runpod_sim, db_store) -> None:
    """2026-09-11 shape: start accepted, pod still EXITED, no GPU under the cap — Refused ⇔ no action-log row."""
    from tests.integration.pod_controller.harness import actions, wakes

    stale = runpod_sim.add_pod(volume_id=VOLUME, status="EXITED")
    runpod_sim.inject("POST", f"/v2/pods/{stale}/action", status=200, body="json", json_body={})
    async with controller(runpod_sim, db_store, RUNPOD_MAX_PRICE_PER_HOUR="0.10") as c:
        await start(c.public)
        rows = [(a.action, a.ok) for a in await actions(c.public)]
        (wake,) = await wakes(c.public)
    assert rows == [("Start", True)]
    assert wake.outcome == "Failed"


async def test_a_create_runpod_refuses_as_off_contract_422_aborts_the_walk_with_no_second_candidate(
    runpod_sim, db_store, caplog
) -> None:
    """Against the simulator's spec 422 (v2.9.0: "must not be a serverless template (→ 422)", "Fix the request.
    Never retry."): the walk's Abort path ends the wake after one POST, though two more candidates were in line."""
    runpod_sim.configure(serverless_template_id=TEMPLATE)
    async with controller(runpod_sim, db_store, RUNPOD_MAX_PRICE_PER_HOUR="2.00") as c:
        answer = await start(c.public)
        assert answer.code is grpc.StatusCode.ABORTED
        assert answer.metadata.get("x-http-code") == "409"
        assert "Aborted after 1 of 3 candidate(s)" in answer.details
        assert "(last status 422)" in answer.details
        assert api_calls(runpod_sim) == [LIST, CATALOG, CREATE]
        assert created_gpus(runpod_sim) == [RTX_4500]
        assert pods_on(runpod_sim, VOLUME) == []
        (wake,) = await wakes(c.public)
        assert (wake.outcome, wake.last_provider_status, wake.candidates_considered) == ("Failed", 422, 1)
        assert "$.templateId: cnz5fxyadi is a serverless template" in caplog.text  # the 422's `errors`, logged
