"""A wake whose replica died between RunPod acting on its create or start and the record (kill -9; the chaos
suite's tests/chaos/test_kill_services.py found it): the next wake, which closes the abandoned one, answers with
the pod and puts the call on record as adopted, so the ledger sees the pod bill. Without an abandoned wake, a
running pod with no call on record (made by hand) stays off the record, as before."""

from __future__ import annotations

import uuid

from tests.fixtures.services import VOLUME
from tests.integration.pod_controller.harness import api_calls, controller, start
from thermostat.policy.wake.adoption import ADOPTED_DETAIL
from thermostat.store.db import Store


async def abandoned_wake(store: Store) -> None:
    """An open wake row of a replica that is gone (no lease names it: it lapsed)."""
    await store.pool.execute(
        "INSERT INTO pod_wakes (attempt_id, pod_name, holder) VALUES ($1, 'qwen', 'dead-host:1:gone')", uuid.uuid4()
    )


async def actions(store: Store) -> list[tuple[str, str, bool, str | None, float | None]]:
    rows = await store.pool.fetch("SELECT action, pod_id, ok, detail, price_per_hour FROM pod_actions ORDER BY at")
    return [(r["action"], r["pod_id"], r["ok"], r["detail"], r["price_per_hour"]) for r in rows]


async def test_a_pod_the_abandoned_wake_created_is_recorded_as_an_adopted_create(runpod_sim, db_store) -> None:
    pod = runpod_sim.add_pod(volume_id=VOLUME, status="RUNNING")
    price = runpod_sim.pod(pod)["cost"]
    await abandoned_wake(db_store)
    async with controller(runpod_sim, db_store) as c:
        answer = await start(c.public)
    assert answer.reply is not None and (answer.reply.outcome, answer.reply.pod_id) == ("AlreadyRunning", pod)
    assert await actions(db_store) == [("Create", pod, True, ADOPTED_DETAIL, price)]
    assert not [call for call in api_calls(runpod_sim) if call[0] != "GET"], "adoption calls RunPod for nothing"


async def test_a_pod_the_record_says_stopped_and_the_abandoned_wake_started_is_recorded_as_an_adopted_start(
    runpod_sim, db_store
) -> None:
    pod = runpod_sim.add_pod(volume_id=VOLUME, status="RUNNING")
    await db_store.pool.execute(
        "INSERT INTO pod_actions (id, pod_name, action, pod_id, ok, trigger, at) VALUES "
        "(gen_random_uuid(), 'qwen', 'Create', $1, true, 'wake', now() - interval '2 hours'), "
        "(gen_random_uuid(), 'qwen', 'Stop', $1, true, 'idle', now() - interval '1 hour')",
        pod,
    )
    await abandoned_wake(db_store)
    async with controller(runpod_sim, db_store) as c:
        answer = await start(c.public)
    assert answer.reply is not None and answer.reply.outcome == "AlreadyRunning"
    assert [(a, p, d) for a, p, _, d, _ in await actions(db_store)][-1] == ("Start", pod, ADOPTED_DETAIL)


async def test_a_pod_already_billing_on_record_gets_no_second_entry(runpod_sim, db_store) -> None:
    pod = runpod_sim.add_pod(volume_id=VOLUME, status="RUNNING")
    await db_store.pool.execute(
        "INSERT INTO pod_actions (id, pod_name, action, pod_id, ok, trigger) "
        "VALUES (gen_random_uuid(), 'qwen', 'Create', $1, true, 'wake')",
        pod,
    )
    await abandoned_wake(db_store)
    async with controller(runpod_sim, db_store) as c:
        await start(c.public)
    assert [a for a, *_ in await actions(db_store)] == ["Create"]


async def test_without_an_abandoned_wake_a_running_pod_off_the_record_stays_off_it(runpod_sim, db_store) -> None:
    runpod_sim.add_pod(volume_id=VOLUME, status="RUNNING")
    async with controller(runpod_sim, db_store) as c:
        answer = await start(c.public)
    assert answer.reply is not None and answer.reply.outcome == "AlreadyRunning"
    assert await actions(db_store) == []
