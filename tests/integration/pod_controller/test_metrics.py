"""The pod controller's /metrics over HTTP: wakes by outcome and billable calls by action move with real wakes and
stops through the simulator; a wake lease taken from a dead replica is counted; every family is in
docs/operations.md."""

from __future__ import annotations

import pytest

from tests.fixtures.metrics import assert_documented, parse, scrape
from tests.fixtures.services import (
    OPERATOR,
    SIM_API_KEY,
    VOLUME,
    RunningService,
    pod_controller_env,
    start_pod_controller,
)
from tests.integration.pod_controller.harness import start
from tests.integration.pod_controller.test_pod_orphans import seed_pods
from thermostat.dev.simulators.runpod.server import RunPodSimulator
from thermostat.pod_controller.metrics import PodMetrics
from thermostat.pod_controller.orphan_sweep import PodOrphanSweeper
from thermostat.pod_controller.repository import PodRepository
from thermostat.pods.v1 import pods_pb2, pods_pb2_grpc
from thermostat.policy.common.orphan_sweep import OrphanSweep
from thermostat.policy.common.pod_options import PodOptions
from thermostat.providers.runpod.client import RunPodV2Client
from thermostat.store.db import Store


async def test_a_wake_through_the_simulator_counts_its_outcome_and_its_billable_start(
    pod_controller: RunningService, pods_stub, runpod_sim: RunPodSimulator
) -> None:
    """An EXITED pod woken once: one Succeeded/Started wake and one accepted Start with trigger wake; a second
    wake finds it running and counts AlreadyRunning without another billable call."""
    before = await scrape(pod_controller.host.metrics_port)
    assert before["thermostat_wakes_total"].samples == ()
    runpod_sim.add_pod(volume_id=VOLUME, status="EXITED")
    assert (await start(pods_stub)).reply.outcome == "Started"  # type: ignore[union-attr]
    assert (await start(pods_stub)).reply.outcome == "AlreadyRunning"  # type: ignore[union-attr]
    after = await scrape(pod_controller.host.metrics_port)
    wakes = after["thermostat_wakes_total"]
    assert wakes.value(outcome="Succeeded", result="Started") == 1
    assert wakes.value(outcome="Succeeded", result="AlreadyRunning") == 1
    # each wake's duration observed once under its outcome (the histogram's _count)
    assert after["thermostat_wake_seconds"].value(outcome="Succeeded") == 2
    actions = after["thermostat_billable_actions_total"]
    assert actions.value(action="Start", trigger="wake", ok="true") == 1
    assert sum(s.value for s in actions.samples) == 1
    assert_documented(after)


async def test_a_stop_counts_one_billable_stop_per_pod_with_its_trigger_and_answer(
    pod_controller: RunningService, pods_stub, runpod_sim: RunPodSimulator
) -> None:
    """Two pods on the volume, one refusing its stop (500): a manual Stop accepted and one refused."""
    runpod_sim.add_pod(volume_id=VOLUME, status="RUNNING")
    bad = runpod_sim.add_pod(volume_id=VOLUME, status="RUNNING")
    runpod_sim.inject("POST", f"/v2/pods/{bad}/action", status=500)
    await pods_stub.StopPod(pods_pb2.StopPodRequest(name="qwen"), metadata=OPERATOR, timeout=10)
    actions = (await scrape(pod_controller.host.metrics_port))["thermostat_billable_actions_total"]
    assert actions.value(action="Stop", trigger="manual", ok="true") == 1
    assert actions.value(action="Stop", trigger="manual", ok="false") == 1


@pytest.mark.parametrize("released", [False, True], ids=["expired-unreleased", "released"])
async def test_a_wake_lease_left_by_a_dead_replica_is_a_takeover_and_a_released_one_is_not(
    runpod_sim: RunPodSimulator, db_store: Store, released: bool
) -> None:
    """Another replica's wake:qwen lease, expired: taking it counts one takeover of kind wake; the same lease
    released (a graceful hand-over) counts none."""
    await db_store.pool.execute(
        "INSERT INTO leases (name, holder, term, acquired_at, renewed_at, expires_at) "
        "VALUES ('wake:qwen', $1, 1, now() - interval '2 minutes', now() - interval '2 minutes', "
        "now() - interval '1 minute')",
        None if released else "dead-replica",
    )
    runpod_sim.add_pod(volume_id=VOLUME, status="EXITED")
    async with start_pod_controller(pod_controller_env(runpod_sim), db_store) as controller:
        async with controller.channel() as channel:
            assert (await start(pods_pb2_grpc.PodControllerStub(channel))).reply.outcome == "Started"  # type: ignore[union-attr]
        takeovers = (await scrape(controller.host.metrics_port))["thermostat_lease_takeovers_total"]
    assert takeovers.value(lease="wake") == (0 if released else 1)


async def test_an_orphan_terminated_by_the_sweep_counts_as_a_billable_terminate_with_trigger_orphan(
    runpod_sim: RunPodSimulator, db_store: Store
) -> None:
    """The sweep's terminate is a billable call like the wake's: counted once, on the second sighting."""
    pods = seed_pods(runpod_sim)
    metrics = PodMetrics()
    async with RunPodV2Client(SIM_API_KEY, base_url=runpod_sim.base_url, timeout_seconds=2) as client:
        sweep = PodOrphanSweeper(
            client,
            PodRepository(db_store.pool),
            db_store.leases,
            [PodOptions(name="qwen", volume_id=VOLUME)],
            mode=OrphanSweep.TERMINATE,
            every_seconds=60,
            replica="r1",
            metrics=metrics,
        )
        await sweep.sweep()  # the first sighting only reports
        first = parse((await metrics.metrics.exposition())[0].decode())["thermostat_billable_actions_total"]
        assert first.samples == ()
        swept = await sweep.sweep()
    assert swept is not None and [(s.orphan.pod_id, s.terminated) for s in swept] == [(pods["orphan"], True)]
    actions = parse((await metrics.metrics.exposition())[0].decode())["thermostat_billable_actions_total"]
    assert actions.value(action="Terminate", trigger="orphan", ok="true") == 1
    assert sum(s.value for s in actions.samples) == 1
