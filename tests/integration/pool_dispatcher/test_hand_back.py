"""Issue 29: a job sent to a warm machine that died while idle is handed to another machine, not failed.

Machines are real reference workers (local backend), killed behind the pool's back the way the issue found it
(a container killed, a job submitted seconds later). Each ordering the issue lists is driven by a hook at the
point two actors meet: the machine dies between claim and send; a cancel lands before the hand-back and while the
job waits again; the tenant at its cap; another process's placement takes the job; the fleet cap.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

import pytest

from tests.fixtures.metrics import assert_documented, scrape
from tests.fixtures.polling import eventually
from tests.fixtures.postgres import open_store
from tests.integration.pool_dispatcher.conftest import (
    RunningPool,
    caller,
    local_type,
    pool_env,
    sleepy_type,
    start_pool,
)
from tests.integration.pool_dispatcher.seams import (
    Seam,
    before_execute,
    before_hand_back,
    before_place,
    before_provider_stop,
)
from thermostat.policy.pool.hand_back import Refusal
from thermostat.pool.v1 import pool_pb2
from thermostat.store.db import Store

REFUSED = "Connection refused"


async def kill(pool: RunningPool, store: Store, machine_id: str) -> None:
    """Kill the machine's worker process behind the pool's back (its row stays warm)."""
    provider = await store.pool.fetchval("SELECT provider_id FROM pool_machines WHERE id = $1::uuid", machine_id)
    process = pool.backend._children[provider]
    process.kill()
    await process.wait()


async def warm_machine(pool: RunningPool) -> str:
    """Run one job so the tenant has a warm machine; its id."""
    _, metadata = await pool.run(b"warm up")
    machine: str = (await pool.job(metadata["x-pool-job-id"])).worker_id
    return machine


async def machines(store: Store) -> list[tuple[str, str]]:
    rows = await store.pool.fetch("SELECT id::text, state FROM pool_machines ORDER BY created_at")
    return [(r["id"], r["state"]) for r in rows]


async def usage_of(pool: RunningPool, job_id: str) -> list[pool_pb2.UsageEvent]:
    return [e for e in await pool.usage() if e.job_id == job_id]


async def no_machine_but(store: Store, kept: set[str]) -> None:
    async def gone() -> bool | None:
        return True if {m for m, _ in await machines(store)} <= kept else None

    await eventually(gone, timeout=20, every=0.05)


def killing(
    pool_box: list[RunningPool], store: Store, *, times: int
) -> tuple[Callable[[str], Awaitable[None]], list[str]]:
    """A before_execute hook killing the machine each job is about to be sent to, `times` times (once armed)."""
    killed: list[str] = []

    async def hook(job_id: str) -> None:
        if not pool_box or len(killed) >= times:
            return
        machine = await store.pool.fetchval("SELECT worker_id::text FROM pool_jobs WHERE id = $1::uuid", job_id)
        killed.append(machine)
        await kill(pool_box[0], store, machine)

    return hook, killed


async def cancel(pool: RunningPool, job_id: str) -> pool_pb2.Job:
    request = pool_pb2.CancelJobRequest(id=job_id, build_id="build-1")
    job: pool_pb2.Job = await pool.stub.CancelJob(request, metadata=caller())
    return job


class Gate:
    """A hook that holds whoever reaches it, once armed, until opened."""

    def __init__(self) -> None:
        self.armed = False
        self.reached = asyncio.Event()
        self.opened = asyncio.Event()

    async def __call__(self, *_: object) -> None:
        if self.armed:
            self.reached.set()
            await self.opened.wait()


# the case


async def test_a_job_sent_to_a_warm_machine_that_died_runs_on_a_new_machine(
    pool_store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    """The issue, as found: the warm machine killed, a job submitted at once comes back completed from a new
    machine; the dead one is retired; one usage event; the metric and a log line name the hand-back."""
    caplog.set_level(logging.INFO, logger="thermostat.pool_dispatcher")
    async with start_pool(pool_store, pool_env()) as pool:
        dead = await warm_machine(pool)
        await kill(pool, pool_store, dead)
        body, metadata = await pool.run(b"after the death")
        assert (body, metadata["x-pool-job-state"]) == (b"after the death", "completed")
        assert metadata.get("x-http-code", "200") == "200"
        job = await pool.job(metadata["x-pool-job-id"])
        assert job.worker_id != dead and job.handed_to_machines == 2 and not job.HasField("error")
        [event] = await usage_of(pool, job.id)
        assert (event.worker_id, event.terminal_state) == (job.worker_id, "completed")
        await no_machine_but(pool_store, {job.worker_id})
        families = await scrape(pool.metrics_port)
        assert_documented(families)
        refused = families["thermostat_pool_jobs_refused_total"]
        labels = {"machine_type": "local", "backend": "local", "cause": "refused"}
        assert refused.value(**labels, decision="hand_back") == 1
        assert refused.value(**labels, decision="give_up") == 0
        [line] = [r.getMessage() for r in caplog.records if "handed back" in r.getMessage()]
        assert job.id in line and dead in line and "local" in line and REFUSED in line


async def test_a_job_that_ran_on_its_first_machine_says_it_was_handed_to_one(pool_store: Store) -> None:
    async with start_pool(pool_store, pool_env()) as pool:
        _, metadata = await pool.run(b"x")
        assert (await pool.job(metadata["x-pool-job-id"])).handed_to_machines == 1


async def test_a_machine_dying_mid_job_fails_it_and_is_not_handed_back(pool_store: Store) -> None:
    """After the payload went out the job may have run: a connection lost mid-call stays a failure, as before."""
    async with start_pool(pool_store, pool_env([sleepy_type()])) as pool:
        job = await pool.submit(b'{"seconds": 30}', machine_type="sleepy")

        async def running() -> str | None:
            current = await pool.job(job.id)
            return current.worker_id if current.state == "running" else None

        machine = await eventually(running, timeout=30, every=0.02)
        await kill(pool, pool_store, machine)
        ended = await pool.finished(job.id)
        assert (ended.state, ended.worker_id, ended.handed_to_machines) == ("failed", machine, 1)
        assert ended.error.startswith("worker call failed")
        [event] = await usage_of(pool, job.id)
        assert event.terminal_state == "failed"
        await no_machine_but(pool_store, set())
        await pool.dispatcher.placement.place()
        assert await machines(pool_store) == []


# orderings


async def test_the_machine_dying_between_claim_and_send_hands_the_job_back(pool_store: Store) -> None:
    """A submit claims the warm machine, which dies before the payload goes out: a new machine runs the job."""
    box: list[RunningPool] = []
    hook, killed = killing(box, pool_store, times=1)
    async with start_pool(pool_store, pool_env(), seams=[before_execute(hook)]) as pool:
        first = await warm_machine(pool)
        box.append(pool)
        body, metadata = await pool.run(b"claimed, then dead")
        assert (body, metadata["x-pool-job-state"]) == (b"claimed, then dead", "completed")
        job = await pool.job(metadata["x-pool-job-id"])
        assert killed == [first] and job.worker_id != first and job.handed_to_machines == 2
        assert len(await usage_of(pool, job.id)) == 1


async def test_after_two_machines_refused_it_the_job_fails_naming_each_attempt(pool_store: Store) -> None:
    """A broken image or network does not loop: the second refusal fails the job, its error naming both machines
    and why, with one usage event; no third machine is started for it."""
    box: list[RunningPool] = []
    hook, killed = killing(box, pool_store, times=2)
    async with start_pool(pool_store, pool_env(), seams=[before_execute(hook)]) as pool:
        await warm_machine(pool)
        box.append(pool)
        body, metadata = await pool.run(b"nowhere to go")
        assert (metadata["x-pool-job-state"], metadata["x-http-code"]) == ("failed", "502")
        job = await pool.job(metadata["x-pool-job-id"])
        assert len(killed) == 2 and job.worker_id == killed[1] and job.handed_to_machines == 2
        assert job.error == (
            "worker unreachable on 2 machines, none was sent the job: "
            f"machine {killed[0]}: {REFUSED}; machine {killed[1]}: {REFUSED}"
        )
        assert job.error.encode() in body
        [event] = await usage_of(pool, job.id)
        assert event.terminal_state == "failed"
        await no_machine_but(pool_store, set())
        await pool.dispatcher.placement.place()
        assert await machines(pool_store) == []
        families = await scrape(pool.metrics_port)
        refused = families["thermostat_pool_jobs_refused_total"]
        assert refused.value(decision="hand_back") == 1 and refused.value(decision="give_up") == 1


async def test_a_cancel_landing_before_the_hand_back_stands_and_no_machine_is_started(pool_store: Store) -> None:
    """The cancel lands between the refused call and the hand-back: the job stays cancelled (metered once, as a
    running job's cancel is), its machine is retired, and nothing is placed for it."""
    box: list[RunningPool] = []

    async def cancel_first(job_id: str) -> None:
        assert (await cancel(box[0], job_id)).state == "cancelled"

    async with start_pool(pool_store, pool_env(), seams=[before_hand_back(cancel_first)]) as pool:
        box.append(pool)
        dead = await warm_machine(pool)
        await kill(pool, pool_store, dead)
        job = await pool.finished((await pool.submit(b"cancelled meanwhile")).id)
        assert (job.state, job.handed_to_machines, job.has_result) == ("cancelled", 1, False)

        async def metered() -> list[pool_pb2.UsageEvent] | None:  # the cancel is at once, its usage at the runner's end
            return await usage_of(pool, job.id) or None

        [event] = await eventually(metered, timeout=20, every=0.05)
        assert event.terminal_state == "cancelled"
        await no_machine_but(pool_store, set())
        await pool.dispatcher.placement.place()
        assert await machines(pool_store) == []


async def test_a_cancel_landing_while_the_job_waits_again_stands_and_it_never_runs(pool_store: Store) -> None:
    """Handed back and waiting for placement, the job is cancelled as any queued job: never sent again, no usage."""
    gate = Gate()
    async with start_pool(pool_store, pool_env(), seams=[before_place(gate)]) as pool:
        dead = await warm_machine(pool)
        await kill(pool, pool_store, dead)
        gate.armed = True
        submitted = await pool.submit(b"cancelled while queued")
        await gate.reached.wait()  # the hand-back poked placement, held here

        async def handed_back() -> pool_pb2.Job | None:
            job = await pool.job(submitted.id)
            return job if job.state == "queued" and job.handed_to_machines == 1 else None

        await eventually(handed_back, timeout=10, every=0.02)
        assert (await cancel(pool, submitted.id)).state == "cancelled"
        gate.opened.set()
        await pool.dispatcher.placement.place()
        job = await pool.job(submitted.id)
        assert job.state == "cancelled" and not job.HasField("started_at") and not job.HasField("worker_id")
        assert await usage_of(pool, job.id) == []
        await no_machine_but(pool_store, set())
        assert await machines(pool_store) == []


async def test_a_tenant_at_its_cap_gets_a_new_machine_as_the_dead_one_retires(pool_store: Store) -> None:
    """max_workers 1: the retired machine no longer holds the tenant's slot, so placement starts the new one
    while the dead one is still being stopped; a hand-back written again (its answer lost) answers the same."""
    seen: list[list[tuple[str, str]]] = []
    again: list[tuple[bool, str | None]] = []
    box: list[RunningPool] = []
    dead: list[str] = []

    async def while_stopping(machine_id: str) -> None:
        if not box or machine_id not in dead:
            return
        pool = box[0]
        await pool.dispatcher.placement.place()
        seen.append(await machines(pool_store))
        job_id = await pool_store.pool.fetchval("SELECT id::text FROM pool_jobs WHERE handed_back_from IS NOT NULL")
        refusal = Refusal(machine_id=machine_id, reason=REFUSED)
        handed = await pool.dispatcher.repo.jobs.hand_back(job_id, machine_id, pool.dispatcher.ownership.owner, refusal)
        again.append((handed.handed_back, handed.provider_id))

    types = [local_type(max_workers=1)]
    async with start_pool(pool_store, pool_env(types), seams=[before_provider_stop(while_stopping)]) as pool:
        dead.append(await warm_machine(pool))
        provider = await pool_store.pool.fetchval("SELECT provider_id FROM pool_machines")
        box.append(pool)
        await kill(pool, pool_store, dead[0])
        body, metadata = await pool.run(b"under the cap")
        assert (body, metadata["x-pool-job-state"]) == (b"under the cap", "completed")
        [fleet] = seen
        assert (dead[0], "stopping") in fleet and len(fleet) == 2  # the new one placed beside the stopping one
        assert again == [(True, provider)]
        job = await pool.job(metadata["x-pool-job-id"])
        assert job.handed_to_machines == 2  # the second write appended nothing


async def test_under_the_fleet_cap_the_job_waits_until_the_dead_machine_is_gone(pool_store: Store) -> None:
    """POOL_MAX_WORKERS_TOTAL 1: a stopping machine still counts, so placement holds the job until the dead one is
    stopped and forgotten, and the stop's end places it."""
    box: list[RunningPool] = []
    dead: list[str] = []
    while_stopping: list[tuple[list[tuple[str, str]], str]] = []

    async def hold(machine_id: str) -> None:
        if not box or machine_id not in dead:
            return
        pool = box[0]
        await pool.dispatcher.placement.place()
        state = await pool_store.pool.fetchval("SELECT state FROM pool_jobs WHERE handed_back_from IS NOT NULL")
        while_stopping.append((await machines(pool_store), state))

    env = pool_env(POOL_MAX_WORKERS_TOTAL="1")
    async with start_pool(pool_store, env, seams=[before_provider_stop(hold)]) as pool:
        dead.append(await warm_machine(pool))
        box.append(pool)
        await kill(pool, pool_store, dead[0])
        body, metadata = await pool.run(b"under the fleet cap")
        assert (body, metadata["x-pool-job-state"]) == (b"under the fleet cap", "completed")
        assert while_stopping == [([(dead[0], "stopping")], "queued")]
        job = await pool.job(metadata["x-pool-job-id"])
        assert job.worker_id != dead[0] and job.handed_to_machines == 2


@contextlib.asynccontextmanager
async def instance(database_url: str, instance_id: str, seams: Sequence[Seam] = ()) -> AsyncIterator[RunningPool]:
    store = await open_store(database_url, max_size=12, application_name=f"pool-{instance_id}")
    try:
        async with start_pool(store, pool_env(POOL_INSTANCE_ID=instance_id), seams=seams) as pool:
            yield pool
    finally:
        await store.close()


async def test_another_processs_placement_takes_a_handed_back_job_and_the_callers_wait_goes_on(
    database_url: str, pool_store: Store
) -> None:
    """alpha's machine dies; alpha's own placement is held, beta's places the job on a machine of its own, and the
    sync submit waiting in alpha answers with the result."""
    gate = Gate()
    async with (
        instance(database_url, "alpha", [before_place(gate)]) as alpha,
        instance(database_url, "beta") as beta,
    ):
        dead = await warm_machine(alpha)
        await kill(alpha, pool_store, dead)
        gate.armed = True
        waiting = asyncio.ensure_future(alpha.run(b"taken by beta"))
        try:
            await gate.reached.wait()

            async def handed_back() -> str | None:
                return await pool_store.pool.fetchval(
                    "SELECT id::text FROM pool_jobs WHERE state = 'queued' AND handed_back_from IS NOT NULL"
                )

            job_id = await eventually(handed_back, timeout=10, every=0.02)
            await beta.dispatcher.placement.place()
            body, metadata = await asyncio.wait_for(waiting, timeout=60)
        finally:
            gate.opened.set()
            if not waiting.done():
                waiting.cancel()
        assert (body, metadata["x-pool-job-state"], metadata["x-pool-job-id"]) == (
            b"taken by beta",
            "completed",
            job_id,
        )
        job = await alpha.job(job_id)
        owner = await pool_store.pool.fetchval("SELECT owner FROM pool_machines WHERE id = $1::uuid", job.worker_id)
        assert owner == "beta" and job.handed_to_machines == 2
        assert len(await usage_of(alpha, job_id)) == 1
