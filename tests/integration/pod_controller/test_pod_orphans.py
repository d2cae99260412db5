"""The pod controller's orphan sweep (issue 12) over the RunPod simulator: a pod named as the controller names
its creates that no configured pod manages is reported (GET /api/orphans, a log line), and terminated on its
second sighting, recorded as a billable action with trigger `orphan`, when ORPHAN_SWEEP=terminate. Pods on
the configured volume, hand-made pods and pool machines are never touched; an unreadable listing judges
nothing; only the replica holding the sweep lease sweeps."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import grpc
import pytest

from tests.fixtures.services import OPERATOR, SIM_API_KEY, VOLUME
from tests.integration.pod_controller.harness import history
from thermostat.dev.simulators.runpod.server import RunPodSimulator
from thermostat.pod_controller.orphan_sweep import PodOrphanSweeper
from thermostat.pod_controller.repository import ActionEntry, PodRepository
from thermostat.pods.v1 import pods_pb2
from thermostat.policy.common.orphan_sweep import OrphanSweep
from thermostat.policy.common.pod_options import PodOptions
from thermostat.providers.runpod.client import RunPodV2Client
from thermostat.store.db import Store

STAMP = "20261130T154501Z"


@pytest.fixture
async def runpod_client(runpod_sim: RunPodSimulator) -> AsyncIterator[RunPodV2Client]:
    async with RunPodV2Client(SIM_API_KEY, base_url=runpod_sim.base_url, timeout_seconds=2) as client:
        yield client


def sweeper(
    client: RunPodV2Client, store: Store, *, mode: OrphanSweep = OrphanSweep.REPORT, replica: str = "r1"
) -> PodOrphanSweeper:
    return PodOrphanSweeper(
        client,
        PodRepository(store.pool),
        store.leases,
        [PodOptions(name="qwen", volume_id=VOLUME)],
        mode=mode,
        every_seconds=60,
        replica=replica,
    )


def seed_pods(runpod_sim: RunPodSimulator) -> dict[str, str]:
    return {
        "orphan": runpod_sim.add_pod(name=f"qwen-{STAMP}", status="RUNNING"),  # mounts no volume
        "managed": runpod_sim.add_pod(name=f"qwen-{STAMP}", volume_id=VOLUME, status="RUNNING"),
        "hand-made": runpod_sim.add_pod(name="my-notebook", status="RUNNING"),
        "original": runpod_sim.add_pod(name="qwen", status="RUNNING"),
    }


def live(runpod_sim: RunPodSimulator) -> set[str]:
    return {str(p["v2"]["id"]) for p in runpod_sim.pods() if p["v2"]["status"] != "TERMINATED"}


async def test_get_orphans_lists_only_the_controllers_pod_no_configured_pod_manages(
    pods_stub, runpod_sim: RunPodSimulator
) -> None:
    pods = seed_pods(runpod_sim)
    answer = await pods_stub.ListPodOrphans(pods_pb2.ListPodOrphansRequest(), metadata=OPERATOR, timeout=10)
    assert [(o.pod_id, o.pod_name, o.owner, o.status) for o in answer.orphans] == [
        (pods["orphan"], f"qwen-{STAMP}", "qwen", "RUNNING")
    ]
    assert answer.orphans[0].reason == f"mounts no volume, not qwen's volume {VOLUME}"
    assert (answer.sweep, answer.sweep_every_seconds) == ("report", 300.0)
    assert live(runpod_sim) == set(pods.values())  # judging terminates nothing


async def test_get_orphans_needs_the_operator_token(pods_stub, runpod_sim: RunPodSimulator) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await pods_stub.ListPodOrphans(pods_pb2.ListPodOrphansRequest(), timeout=10)
    assert refused.value.code() is grpc.StatusCode.UNAUTHENTICATED
    assert runpod_sim.requests("/v2/pods") == []


async def test_an_unreadable_listing_is_503_never_no_orphans(pods_stub, runpod_sim: RunPodSimulator) -> None:
    seed_pods(runpod_sim)
    runpod_sim.inject("GET", "/v2/pods", status=502)
    with pytest.raises(grpc.aio.AioRpcError) as unreadable:
        await pods_stub.ListPodOrphans(pods_pb2.ListPodOrphansRequest(), metadata=OPERATOR, timeout=10)
    assert unreadable.value.code() is grpc.StatusCode.UNAVAILABLE
    assert "could not be read" in (unreadable.value.details() or "")


async def test_by_default_an_orphan_is_reported_and_left_running(
    db_store: Store, runpod_client: RunPodV2Client, runpod_sim: RunPodSimulator, caplog: pytest.LogCaptureFixture
) -> None:
    pods = seed_pods(runpod_sim)
    sweep = sweeper(runpod_client, db_store)
    with caplog.at_level(logging.WARNING, logger="thermostat.pod_controller.orphans"):
        for _ in range(3):
            swept = await sweep.sweep()
            assert swept is not None
            assert [(s.orphan.pod_id, s.terminated) for s in swept] == [(pods["orphan"], False)]
    assert f"orphan pod: {pods['orphan']} named qwen-{STAMP}" in caplog.text
    assert "reported (ORPHAN_SWEEP=report)" in caplog.text
    assert live(runpod_sim) == set(pods.values())
    assert {r.method for r in runpod_sim.requests("/v2/pods")} == {"GET"}


async def test_with_terminate_an_orphan_is_ended_on_its_second_sighting_and_recorded_with_trigger_orphan(
    db_store: Store, runpod_client: RunPodV2Client, runpod_sim: RunPodSimulator, pods_stub
) -> None:
    pods = seed_pods(runpod_sim)
    sweep = sweeper(runpod_client, db_store, mode=OrphanSweep.TERMINATE)
    first = await sweep.sweep()
    assert first is not None and [s.terminated for s in first] == [False]
    assert pods["orphan"] in live(runpod_sim)
    second = await sweep.sweep()
    assert second is not None and [(s.orphan.pod_id, s.terminated) for s in second] == [(pods["orphan"], True)]
    assert live(runpod_sim) == set(pods.values()) - {pods["orphan"]}
    entries = await history(pods_stub)
    (action,) = [e.action for e in entries if e.WhichOneof("entry") == "action"]
    assert (action.action, action.pod_id, action.trigger, action.ok) == ("Terminate", pods["orphan"], "orphan", True)
    third = await sweep.sweep()
    assert third == ()  # gone: nothing left to judge


async def test_a_pod_named_after_a_pod_no_longer_configured_is_an_orphan_through_the_stores_names(
    db_store: Store, runpod_client: RunPodV2Client, runpod_sim: RunPodSimulator
) -> None:
    stray = runpod_sim.add_pod(name=f"llama-{STAMP}", volume_id=VOLUME, status="EXITED")
    assert await sweeper(runpod_client, db_store).scan() == ()  # "llama" is nobody the controller knows
    await PodRepository(db_store.pool).record_action(
        ActionEntry(pod_name="llama", action="Create", pod_id="long-gone", ok=True, trigger="wake")
    )
    (orphan,) = await sweeper(runpod_client, db_store).scan()
    assert (orphan.pod_id, orphan.owner, orphan.reason) == (stray, "llama", "pod llama is no longer configured")


async def test_only_the_replica_holding_the_sweep_lease_sweeps(
    db_store: Store, runpod_client: RunPodV2Client, runpod_sim: RunPodSimulator
) -> None:
    pods = seed_pods(runpod_sim)
    one = sweeper(runpod_client, db_store, mode=OrphanSweep.TERMINATE, replica="r1")
    two = sweeper(runpod_client, db_store, mode=OrphanSweep.TERMINATE, replica="r2")
    assert await one.sweep() is not None
    for _ in range(2):
        assert await two.sweep() is None  # r1 holds the lease past its pass
    assert pods["orphan"] in live(runpod_sim)
    swept = await one.sweep()
    assert swept is not None and [s.terminated for s in swept] == [True]


async def test_a_refused_terminate_is_recorded_and_retried_on_the_next_pass(
    db_store: Store, runpod_client: RunPodV2Client, runpod_sim: RunPodSimulator, pods_stub
) -> None:
    pods = seed_pods(runpod_sim)
    sweep = sweeper(runpod_client, db_store, mode=OrphanSweep.TERMINATE)
    await sweep.sweep()
    runpod_sim.inject("DELETE", f"/v2/pods/{pods['orphan']}", status=500)
    refused = await sweep.sweep()
    assert refused is not None and [s.terminated for s in refused] == [False]
    retried = await sweep.sweep()
    assert retried is not None and [s.terminated for s in retried] == [True]
    actions = [e.action for e in await history(pods_stub) if e.WhichOneof("entry") == "action"]
    assert [(a.ok, a.trigger) for a in reversed(actions)] == [(False, "orphan"), (True, "orphan")]
