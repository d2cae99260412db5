"""A pod on the record that no longer exists (issue 35): restarting `make run` while a pod ran, the simulator forgot
it, and metering's interval stayed open for ever. A pod the record bills that a readable volume lookup does not
list and whose id RunPod answers NotFound is recorded Gone once, which closes its billing; a failed read, or a pod
still listed or still answered by id, is never judged gone (policy/wake/pod_gone.py)."""

from __future__ import annotations

import asyncio

from tests.fixtures.services import VOLUME
from tests.integration.pod_controller.harness import controller, start
from thermostat.dev.simulators.runpod.server import RunPodSimulator
from thermostat.pods.v1 import pods_pb2
from thermostat.policy.metering.pod_spend import BillableEvent, billed_intervals
from thermostat.store.db import Store

QWEN = pods_pb2.GetPodRequest(name="qwen")


async def actions(store: Store) -> list[tuple[str, str, bool, str]]:
    rows = await store.pool.fetch("SELECT action, pod_id, ok, trigger FROM pod_actions ORDER BY position")
    return [(r["action"], r["pod_id"], r["ok"], r["trigger"]) for r in rows]


async def events(store: Store) -> list[BillableEvent]:
    rows = await store.pool.fetch(
        "SELECT position, at, action, pod_id, ok, http_status, gpu_id, price_per_hour FROM pod_actions "
        "ORDER BY position"
    )
    return [BillableEvent(**dict(r)) for r in rows]


async def woken(sim: RunPodSimulator, store: Store) -> str:
    async with controller(sim, store) as c:
        answer = await start(c.public)
    assert answer.reply is not None and answer.reply.outcome == "Created", answer
    return answer.reply.pod_id


async def test_a_pod_the_simulator_forgot_is_recorded_gone_once_and_its_billing_closes(
    runpod_sim: RunPodSimulator, db_store: Store
) -> None:
    """The restart case: every reading after it finds the pod gone; one Gone record, and the interval is closed."""
    pod = await woken(runpod_sim, db_store)
    runpod_sim.reset()  # `make run` restarted: the simulator knows no pod
    async with controller(runpod_sim, db_store) as c:
        views = await asyncio.gather(*(c.public.GetPod(QWEN, timeout=10) for _ in range(3)))
        observed = await c.internal.ObserveVolume(pods_pb2.ObserveVolumeRequest(name="qwen"), timeout=10)
    assert {v.lookup for v in views} == {"NOT_FOUND"} and observed.lookup == "NOT_FOUND"
    assert await actions(db_store) == [("Create", pod, True, "wake"), ("Gone", pod, True, "observe")]
    (interval,) = billed_intervals(await events(db_store))
    assert interval.pod_id == pod and interval.end is not None


async def test_a_pod_terminated_behind_our_back_beside_a_listed_one_is_gone_and_the_listed_one_still_bills(
    runpod_sim: RunPodSimulator, db_store: Store
) -> None:
    """RunPod's console terminated the pod: the lookup lists another pod on the volume, not it (FOUND without it)."""
    pod = await woken(runpod_sim, db_store)
    runpod_sim.reset()
    other = runpod_sim.add_pod(volume_id=VOLUME, status="EXITED")
    await db_store.pool.execute(
        "INSERT INTO pod_actions (id, pod_name, action, pod_id, ok, trigger) "
        "VALUES (gen_random_uuid(), 'qwen', 'Start', $1, true, 'wake')",
        other,
    )
    async with controller(runpod_sim, db_store) as c:
        await c.public.GetPod(QWEN, timeout=10)
    assert [(a, p) for a, p, _, _ in await actions(db_store)][-1] == ("Gone", pod)
    assert [i.end is None for i in billed_intervals(await events(db_store))] == [False, True]


async def test_a_failed_list_or_a_listed_pod_or_an_unconfirmed_404_is_never_judged_gone(
    runpod_sim: RunPodSimulator, db_store: Store
) -> None:
    """A 502 on the list says nothing; a pod still listed is not asked; a bare 404 by id is not NotFound."""
    pod = await woken(runpod_sim, db_store)
    async with controller(runpod_sim, db_store) as c:
        runpod_sim.inject("GET", "/v2/pods", status=502)
        assert (await c.public.GetPod(QWEN, timeout=10)).lookup == "UNREADABLE"
        assert (await c.public.GetPod(QWEN, timeout=10)).lookup == "FOUND"
        runpod_sim.reset()
        runpod_sim.inject("GET", f"/v2/pods/{pod}", status=404, body="text")  # a proxy page, not RunPod's answer
        assert (await c.public.GetPod(QWEN, timeout=10)).lookup == "NOT_FOUND"
        assert [a for a, *_ in await actions(db_store)] == ["Create"]
        await c.public.GetPod(QWEN, timeout=10)  # now RunPod's own problem-details 404
    assert [a for a, *_ in await actions(db_store)] == ["Create", "Gone"]
