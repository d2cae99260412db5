"""ReportReadiness refuses a publish about a process that ended: one observed at an incarnation older than the
pod's newest accepted start, create, stop or terminate (policy/wake/readiness_fence).

The monitor's report and a stop travel separately, so each ordering of {observe, stop accepted, re-wake, report
lands} is driven here one call at a time; the case where the stop's action commits while the report is being
checked is forced with the feed lock held by the test (the lock the report takes before it checks).
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from tests.fixtures.services import OPERATOR, VOLUME
from tests.integration.pod_controller.harness import start
from tests.integration.pod_controller.test_pods_incarnation import incarnations
from thermostat.chassis.timestamps import to_timestamp
from thermostat.pod_controller.repository import ActionEntry, PodRepository
from thermostat.pods.v1 import pods_pb2
from thermostat.store.db import Store

READY_AT = datetime(2026, 9, 9, 9, 46, 57, tzinfo=UTC)


def report(pod_id: str, incarnation: int | None) -> pods_pb2.ReportReadinessRequest:
    request = pods_pb2.ReportReadinessRequest(name="qwen", pod_id=pod_id, ready_since=to_timestamp(READY_AT))
    if incarnation is not None:
        request.incarnation = incarnation
    return request


async def stored(store: Store, pod_id: str) -> datetime | None:
    """The readiness the controller holds for the pod (GET shows it only while the pod runs)."""
    return await PodRepository(store.pool).readiness("qwen", pod_id)


async def observed(internal_stub, pod_id: str) -> int:
    seen = (await incarnations(internal_stub))[pod_id]
    assert seen is not None
    return seen


async def stop(pods_stub) -> None:
    assert (await pods_stub.StopPod(pods_pb2.StopPodRequest(name="qwen"), metadata=OPERATOR, timeout=10)).ok


async def test_a_report_at_the_current_incarnation_is_published(pods_stub, internal_stub, runpod_sim) -> None:
    pod = runpod_sim.add_pod(volume_id=VOLUME, status="RUNNING")
    await internal_stub.ReportReadiness(report(pod, await observed(internal_stub, pod)), timeout=10)
    view = await pods_stub.GetPod(pods_pb2.GetPodRequest(name="qwen"), timeout=10)
    assert view.HasField("ready_since") and view.ready_since == to_timestamp(READY_AT)


async def test_a_report_observed_before_an_accepted_stop_is_refused(
    pods_stub, internal_stub, runpod_sim, db_store: Store
) -> None:
    pod = runpod_sim.add_pod(volume_id=VOLUME, status="RUNNING")
    seen = await observed(internal_stub, pod)
    await stop(pods_stub)
    await internal_stub.ReportReadiness(report(pod, seen), timeout=10)
    assert await stored(db_store, pod) is None


async def test_a_report_observed_before_a_stop_and_a_re_wake_leaves_the_woken_pod_not_ready(
    pods_stub, internal_stub, runpod_sim, db_store: Store
) -> None:
    """The finding: isRunning:true with the old readySince while the new process loads its model."""
    pod = runpod_sim.add_pod(volume_id=VOLUME, status="RUNNING")
    seen = await observed(internal_stub, pod)
    await stop(pods_stub)
    woke = await start(pods_stub)
    assert woke.reply is not None and (woke.reply.outcome, woke.reply.pod_id) == ("Started", pod)
    await internal_stub.ReportReadiness(report(pod, seen), timeout=10)
    view = await pods_stub.GetPod(pods_pb2.GetPodRequest(name="qwen"), timeout=10)
    assert view.is_running and not view.HasField("ready_since")

    await internal_stub.ReportReadiness(report(pod, await observed(internal_stub, pod)), timeout=10)
    assert await stored(db_store, pod) == READY_AT, "the new process's own report is published"


async def test_a_stale_report_does_not_overwrite_the_new_processs_readiness(
    pods_stub, internal_stub, runpod_sim, db_store: Store
) -> None:
    """Two monitor replicas: the new leader published the re-woken process's readiness; the old one's late report
    (an earlier readySince) is refused instead of rolling it back."""
    pod = runpod_sim.add_pod(volume_id=VOLUME, status="RUNNING")
    old = await observed(internal_stub, pod)
    await stop(pods_stub)
    assert (await start(pods_stub)).reply is not None
    newer = pods_pb2.ReportReadinessRequest(name="qwen", pod_id=pod, incarnation=await observed(internal_stub, pod))
    newer.ready_since.FromDatetime(datetime(2026, 9, 9, 10, 0, tzinfo=UTC))
    await internal_stub.ReportReadiness(newer, timeout=10)
    await internal_stub.ReportReadiness(report(pod, old), timeout=10)
    assert await stored(db_store, pod) == datetime(2026, 9, 9, 10, 0, tzinfo=UTC)


async def test_a_report_without_an_incarnation_is_published_unchecked(
    pods_stub, internal_stub, runpod_sim, db_store: Store
) -> None:
    """A monitor that predates the field is taken as before the fence (README: its next tick clears a stale one)."""
    pod = runpod_sim.add_pod(volume_id=VOLUME, status="RUNNING")
    await stop(pods_stub)
    await internal_stub.ReportReadiness(report(pod, None), timeout=10)
    assert await stored(db_store, pod) == READY_AT


async def test_a_stop_whose_action_commits_while_the_report_waits_to_be_checked_wins(
    internal_stub, runpod_sim, db_store: Store
) -> None:
    """The report takes the feed lock before it reads the record, so a Stop being written meanwhile (under that
    lock) is seen: the report waits for it, then is refused. Without the lock it would read the record without
    the uncommitted Stop, and its write could outlive the stop's clear."""
    pod = runpod_sim.add_pod(volume_id=VOLUME, status="RUNNING")
    seen = await observed(internal_stub, pod)
    stop_entry = ActionEntry(pod_name="qwen", action="Stop", pod_id=pod, ok=True, trigger="manual", http_status=200)
    async with db_store.pool.acquire() as conn, conn.transaction():
        await PodRepository._insert_action(conn, stop_entry)  # takes the feed lock, held to our commit
        reporting = asyncio.ensure_future(internal_stub.ReportReadiness(report(pod, seen), timeout=30))
        await waiting_for_the_feed_lock(db_store)
        assert not reporting.done()
    await reporting
    assert await stored(db_store, pod) is None


async def waiting_for_the_feed_lock(store: Store) -> None:
    """Returns once another session waits for an advisory lock (the report, blocked on the feed lock)."""
    async with asyncio.timeout(20):
        while not await store.pool.fetchval(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
        ):
            await asyncio.sleep(0.01)
