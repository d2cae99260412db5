"""GetPod always answers (configured or not, blip or not), ranks the serving pod, and WatchPod streams changes."""

from __future__ import annotations

import asyncio
import contextlib
from datetime import UTC, datetime, timedelta

import grpc
import pytest

from tests.fixtures.clock import FakeClock
from tests.fixtures.services import OPERATOR, VOLUME
from tests.integration.pod_controller.harness import A100, LIST, controller, start, wakes
from thermostat.chassis.timestamps import from_timestamp, to_timestamp
from thermostat.dev.simulators.runpod.server import RunPodSimulator
from thermostat.pods.v1 import pods_pb2

QWEN = pods_pb2.GetPodRequest(name="qwen")
POLL = 0.05  # WATCH_POLL_SECONDS of the test controllers


def lists(sim: RunPodSimulator) -> int:
    """How many times RunPod's pod list was asked for."""
    return [(r.method, r.path) for r in sim.requests()].count(LIST)


@pytest.mark.parametrize(
    "env",
    [
        pytest.param({"RUNPOD_API_KEY": ""}, id="no-api-key"),
        pytest.param({"RUNPOD_VOLUME_ID": ""}, id="blank-volume"),
    ],
)
async def test_get_of_an_unconfigured_pod_answers_configured_false_without_a_runpod_call(
    runpod_sim, db_store, env
) -> None:
    """Unconfigured: 200 with configured false, lookup UNCONFIGURED, status UNKNOWN, and no request sent."""
    async with controller(runpod_sim, db_store, **env) as c:
        view = await c.public.GetPod(QWEN, timeout=10)
    assert (view.name, view.configured, view.lookup, view.status, view.is_running) == (
        "qwen",
        False,
        "UNCONFIGURED",
        "UNKNOWN",
        False,
    )
    assert (view.pod_id, view.proxy_url, view.pods_on_volume, view.datacenter) == ("", "", 0, "EU-RO-1")
    assert runpod_sim.requests() == []


async def test_get_during_a_list_blip_is_unreadable_unknown_not_a_verdict(pods_stub, runpod_sim) -> None:
    """A 502 on GET /v2/pods: still an answer, lookup UNREADABLE and status UNKNOWN, no pod named."""
    runpod_sim.add_pod(volume_id=VOLUME, status="RUNNING")
    runpod_sim.inject("GET", "/v2/pods", status=502)
    view = await pods_stub.GetPod(QWEN, timeout=10)
    assert (view.configured, view.lookup, view.status, view.is_running, view.pod_id) == (
        True,
        "UNREADABLE",
        "UNKNOWN",
        False,
        "",
    )


async def test_get_with_no_pod_on_the_volume_is_not_found_unknown(pods_stub, runpod_sim) -> None:
    """An empty, readable list: lookup NOT_FOUND, nothing observed beyond the list."""
    view = await pods_stub.GetPod(QWEN, timeout=10)
    assert (view.lookup, view.status, view.pods_on_volume) == ("NOT_FOUND", "UNKNOWN", 0)
    assert [(r.method, r.path) for r in runpod_sim.requests()] == [LIST]


async def test_get_naming_no_pod_leaves_pod_id_and_proxy_url_unset_and_names_them_for_the_edge(pods_stub) -> None:
    """No pod named: pod_id/proxy_url are not on the wire, and x-json-nulls asks the edge for podId/proxyUrl null."""
    call = pods_stub.GetPod(QWEN, timeout=10)
    view = await call
    assert not {"pod_id", "proxy_url"} & {field.name for field, _ in view.ListFields()}
    assert pods_pb2.GetPodResponse.FromString(view.SerializeToString()).pod_id == ""
    nulls = dict(await call.initial_metadata())["x-json-nulls"].split(",")
    assert {"podId", "proxyUrl"} <= set(nulls)


async def test_get_naming_a_pod_does_not_ask_for_pod_id_null(pods_stub, runpod_sim) -> None:
    pod = runpod_sim.add_pod(volume_id=VOLUME, status="EXITED")
    call = pods_stub.GetPod(QWEN, timeout=10)
    assert (await call).pod_id == pod
    nulls = dict(await call.initial_metadata()).get("x-json-nulls", "").split(",")
    assert "podId" not in nulls and "proxyUrl" not in nulls


async def test_get_reads_every_pod_on_the_volume_from_one_list_call(pods_stub, runpod_sim) -> None:
    """Reporting costs one RunPod call however many pods the volume holds: the list carries each pod's object."""
    stale = runpod_sim.add_pod(volume_id=VOLUME, status="EXITED")
    serving = runpod_sim.add_pod(volume_id=VOLUME, status="RUNNING")
    runpod_sim.inject("GET", f"/v2/pods/{serving}", status=500)  # a per-pod GET would blip; none is made
    view = await pods_stub.GetPod(QWEN, timeout=10)
    assert (view.lookup, view.pod_id, view.status, view.is_running) == ("FOUND", serving, "RUNNING", True)
    assert view.pods_on_volume == 2
    assert view.proxy_url == f"{runpod_sim.url}/proxy/{serving}-8000"
    assert stale != serving
    assert [(r.method, r.path) for r in runpod_sim.requests()] == [LIST]


async def test_get_and_watch_observe_by_id_a_running_pod_listed_without_runtime(pods_stub, runpod_sim) -> None:
    """A list entry without `runtime` cannot say the pod serves: it is read by id, so isRunning is true (issue 7)."""
    runpod_sim.configure(list_without_runtime=True)
    stale = runpod_sim.add_pod(volume_id=VOLUME, status="EXITED")
    serving = runpod_sim.add_pod(volume_id=VOLUME, status="RUNNING")
    view = await pods_stub.GetPod(QWEN, timeout=10)
    assert (view.lookup, view.pod_id, view.status, view.is_running) == ("FOUND", serving, "RUNNING", True)
    assert [(r.method, r.path) for r in runpod_sim.requests()] == [LIST, ("GET", f"/v2/pods/{serving}")]
    assert stale != serving
    call = pods_stub.WatchPod(pods_pb2.WatchPodRequest(name="qwen"))
    try:
        first = await asyncio.wait_for(anext(aiter(call)), 5)
        assert (first.pod.pod_id, first.pod.status, first.pod.is_running) == (serving, "RUNNING", True)
    finally:
        call.cancel()


async def test_ready_since_shows_for_the_ranked_pod_only_and_an_accepted_stop_clears_it(
    pods_stub, internal_stub, runpod_sim
) -> None:
    """Readiness reported for the serving pod is shown (#2052); for another pod it is not; a stop ends it."""
    stale = runpod_sim.add_pod(volume_id=VOLUME, status="EXITED")
    serving = runpod_sim.add_pod(volume_id=VOLUME, status="RUNNING")
    ready_at = datetime.now(UTC).replace(microsecond=0)
    await internal_stub.ReportReadiness(
        pods_pb2.ReportReadinessRequest(name="qwen", pod_id=stale, ready_since=to_timestamp(ready_at)), timeout=10
    )
    view = await pods_stub.GetPod(QWEN, timeout=10)
    assert (view.pod_id, view.is_running) == (serving, True)
    assert not view.HasField("ready_since")

    await internal_stub.ReportReadiness(
        pods_pb2.ReportReadinessRequest(name="qwen", pod_id=serving, ready_since=to_timestamp(ready_at)), timeout=10
    )
    view = await pods_stub.GetPod(QWEN, timeout=10)
    assert from_timestamp(view.ready_since) == ready_at

    await pods_stub.StopPod(pods_pb2.StopPodRequest(name="qwen"), metadata=OPERATOR, timeout=10)
    view = await pods_stub.GetPod(QWEN, timeout=10)
    assert view.status == "EXITED"
    assert not view.HasField("ready_since")


async def test_get_reports_the_last_wake(pods_stub, runpod_sim) -> None:
    """After a wake, lastWake carries its outcome, pod, GPU and both timestamps (#2541)."""
    created = await start(pods_stub)
    assert created.reply is not None
    view = await pods_stub.GetPod(QWEN, timeout=10)
    wake = view.last_wake
    assert (wake.outcome, wake.wake_outcome, wake.pod_id, wake.gpu_id, wake.price_per_hour) == (
        "Succeeded",
        "Created",
        created.reply.pod_id,
        A100,
        1.59,
    )
    assert wake.requested_at.ToDatetime() <= wake.completed_at.ToDatetime()
    assert wake.attempt_id


async def test_eta_shows_while_booting_only_when_a_boot_was_measured(runpod_sim, db_store) -> None:
    """No measured boot: no etaSeconds. After one 90 s wake → ready, a booting re-wake shows ~90 s left."""
    async with controller(runpod_sim, db_store, RUNPOD_WAKE_MAX_POLLS="2") as c:
        created = await start(c.public)
        assert created.reply is not None
        pod = created.reply.pod_id
        (first,) = await wakes(c.public)

        await c.public.StopPod(pods_pb2.StopPodRequest(name="qwen"), metadata=OPERATOR, timeout=10)
        runpod_sim.set_pod_lifecycle(pod, starting_seconds=-1)
        booting = await start(c.public)
        assert booting.reply is not None
        assert booting.reply.outcome == "Waiting"
        view = await c.public.GetPod(QWEN, timeout=10)
        assert (view.status, view.is_running) == ("STARTING", False)
        assert not view.HasField("eta_seconds")  # nothing measured yet: no made-up number

        await c.public.StopPod(pods_pb2.StopPodRequest(name="qwen"), metadata=OPERATOR, timeout=10)
        ready = from_timestamp(first.requested_at) + timedelta(seconds=90)
        await c.internal.ReportReadiness(
            pods_pb2.ReportReadinessRequest(name="qwen", pod_id=pod, ready_since=to_timestamp(ready)), timeout=10
        )
        await c.internal.ReportReadiness(pods_pb2.ReportReadinessRequest(name="qwen", pod_id=pod), timeout=10)

        again = await start(c.public)
        assert again.reply is not None
        assert again.reply.outcome == "Waiting"
        view = await c.public.GetPod(QWEN, timeout=10)
        assert view.status == "STARTING"
        assert view.HasField("eta_seconds")
        assert 80 < view.eta_seconds <= 90


async def test_watch_streams_a_view_per_change_not_per_poll_and_ends_when_cancelled(runpod_sim, db_store) -> None:
    """The first view at once, nothing while nothing changes, the woken pod next; cancel stops the polling."""
    pod = runpod_sim.add_pod(volume_id=VOLUME, status="EXITED")
    clock = FakeClock()
    async with controller(runpod_sim, db_store, clock=clock) as c:
        runpod_sim.clear_requests()
        call = c.public.WatchPod(pods_pb2.WatchPodRequest(name="qwen"))
        views: asyncio.Queue[pods_pb2.GetPodResponse] = asyncio.Queue()

        async def consume() -> None:
            async for message in call:
                views.put_nowait(message.pod)

        reader = asyncio.create_task(consume())
        try:
            first = await asyncio.wait_for(views.get(), 5)
            assert (first.pod_id, first.status, first.is_running) == (pod, "EXITED", False)
            await clock.settled(1)
            for _ in range(8):
                clock.advance(POLL)
                await clock.settled(1)  # the poller built the view again and waits for the next interval
            assert views.empty()
            assert lists(runpod_sim) == 9  # it did poll meanwhile: once at the start, once per interval

            woken = await start(c.public)
            assert woken.reply is not None
            clock.advance(POLL)
            latest = await asyncio.wait_for(views.get(), 5)
            assert (latest.status, latest.is_running) == ("RUNNING", True)
            assert (latest.last_wake.outcome, latest.last_wake.wake_outcome) == ("Succeeded", "Started")
        finally:
            call.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader
        assert call.cancelled()
        await clock.settled(0)  # the server stopped watching: its poller is gone
        polled = len(runpod_sim.requests())
        clock.advance(10 * POLL)
        await asyncio.sleep(0)
        assert len(runpod_sim.requests()) == polled


async def test_watch_of_an_unknown_name_is_not_found(pods_stub, runpod_sim) -> None:
    """WatchPod resolves the name first: NOT_FOUND, no RunPod call."""
    call = pods_stub.WatchPod(pods_pb2.WatchPodRequest(name="llama"))
    with pytest.raises(grpc.aio.AioRpcError) as error:
        await call.read()
    assert error.value.code() is grpc.StatusCode.NOT_FOUND
    assert runpod_sim.requests() == []


async def test_observe_volume_reports_every_pod_in_list_order_for_the_monitor(internal_stub, runpod_sim) -> None:
    """ObserveVolume: each pod on the volume with its status, GPUs and proxy URL, from one list call."""
    running = runpod_sim.add_pod(volume_id=VOLUME, status="RUNNING")
    stopped = runpod_sim.add_pod(volume_id=VOLUME, status="EXITED")
    runpod_sim.add_pod(volume_id="agv6w2qcg7", status="RUNNING")
    runpod_sim.clear_requests()
    reply = await internal_stub.ObserveVolume(pods_pb2.ObserveVolumeRequest(name="Qwen"), timeout=10)
    assert (reply.name, reply.configured, reply.lookup) == ("qwen", True, "FOUND")
    assert [(p.pod_id, p.lookup, p.status, p.gpu_count, p.gpu_id) for p in reply.pods] == [
        (running, "FOUND", "RUNNING", 1, A100),
        (stopped, "FOUND", "EXITED", 1, A100),
    ]
    assert reply.lookup_result == pods_pb2.LOOKUP_RESULT_FOUND, "each enum beside its string"
    assert [(p.lookup_result, p.pod_status) for p in reply.pods] == [
        (pods_pb2.LOOKUP_RESULT_FOUND, pods_pb2.POD_STATUS_RUNNING),
        (pods_pb2.LOOKUP_RESULT_FOUND, pods_pb2.POD_STATUS_EXITED),
    ]
    assert reply.pods[0].proxy_url == f"{runpod_sim.url}/proxy/{running}-8000"
    assert [(r.method, r.path) for r in runpod_sim.requests()] == [LIST]


async def test_observe_volume_keeps_a_failed_list_unreadable_and_an_unconfigured_pod_silent(
    runpod_sim, db_store
) -> None:
    """A failed list is UNREADABLE with no pods (never "nothing there"); unconfigured makes no request."""
    runpod_sim.add_pod(volume_id=VOLUME, status="RUNNING")
    runpod_sim.inject("GET", "/v2/pods", status=500)
    async with controller(runpod_sim, db_store) as c:
        reply = await c.internal.ObserveVolume(pods_pb2.ObserveVolumeRequest(name="qwen"), timeout=10)
        assert (reply.lookup, list(reply.pods)) == ("UNREADABLE", [])
        assert reply.lookup_result == pods_pb2.LOOKUP_RESULT_UNREADABLE
    runpod_sim.clear_requests()
    async with controller(runpod_sim, db_store, RUNPOD_API_KEY="") as c:
        reply = await c.internal.ObserveVolume(pods_pb2.ObserveVolumeRequest(name="qwen"), timeout=10)
        assert (reply.configured, reply.lookup, list(reply.pods)) == (False, "UNCONFIGURED", [])
        assert reply.lookup_result == pods_pb2.LOOKUP_RESULT_UNCONFIGURED
    assert runpod_sim.requests() == []


async def test_several_watchers_of_one_pod_share_one_poller(runpod_sim, db_store) -> None:
    """Five watchers cost RunPod what one does (the account's rate limit is shared with the wake): one list when
    the first arrives, then exactly one per poll interval."""
    runpod_sim.add_pod(volume_id=VOLUME, status="RUNNING")
    clock = FakeClock()
    async with controller(runpod_sim, db_store, clock=clock) as c:
        runpod_sim.clear_requests()
        calls = [c.public.WatchPod(pods_pb2.WatchPodRequest(name="qwen")) for _ in range(5)]
        firsts = await asyncio.gather(*(call.read() for call in calls))
        assert {f.pod.status for f in firsts} == {"RUNNING"}
        await clock.settled(1)
        for _ in range(10):
            clock.advance(POLL)
            await clock.settled(1)
        for call in calls:
            call.cancel()
        assert lists(runpod_sim) == 1 + 10


async def test_get_serves_the_readiness_of_the_pod_it_reports_when_two_pods_answered(
    pods_stub, internal_stub, runpod_sim
) -> None:
    """Readiness is per pod: the stale pod's later report does not hide the serving pod's readySince."""
    serving = runpod_sim.add_pod(volume_id=VOLUME, status="RUNNING")
    stale = runpod_sim.add_pod(volume_id=VOLUME, status="EXITED")
    serving_ready = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
    for pod, at in ((serving, serving_ready), (stale, serving_ready + timedelta(minutes=5))):
        await internal_stub.ReportReadiness(
            pods_pb2.ReportReadinessRequest(name="qwen", pod_id=pod, ready_since=to_timestamp(at)), timeout=10
        )
    view = await pods_stub.GetPod(QWEN, timeout=10)
    assert view.pod_id == serving
    assert from_timestamp(view.ready_since) == serving_ready
    await internal_stub.ReportReadiness(pods_pb2.ReportReadinessRequest(name="qwen", pod_id=stale), timeout=10)
    view = await pods_stub.GetPod(QWEN, timeout=10)
    assert from_timestamp(view.ready_since) == serving_ready
