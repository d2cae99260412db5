"""The store goes away at the exact step of a job's life (a hook cuts the dispatcher's tcp path to Postgres),
either before the write reaches it or after it landed with its answer lost. Each step writes again until the
store takes it, or resumes from what the machine holds: the job runs exactly once (the worker's journal),
its result and its one usage event are kept, and nothing is left dispatched or running under this process.
The dispatcher's wait on its injected clock (a retry's) is what brings the store back, so no test waits on a timer.
The service's loops beside the dispatcher share that clock; they wait as they would."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from urllib.parse import urlsplit

import asyncpg
import grpc
import pytest

from tests.fixtures.polling import eventually
from tests.fixtures.tcp_proxy import FreezableProxy
from tests.integration.pool_dispatcher.conftest import REFERENCE_WORKER, RunningPool, caller, pool_env, start_pool
from tests.integration.pool_dispatcher.seams import SEAMS
from tests.integration.pool_dispatcher.test_fences import HeldStep, journalled_type, machine_idle, reached_worker
from tests.integration.pool_dispatcher.test_removal_and_limits import put_catalogue
from tests.integration.store.test_store import through
from thermostat.pool.v1 import pool_pb2
from thermostat.pool_dispatcher.repository import Owner, StartingMachine
from thermostat.providers.pool.backend import MachineHandle, MachineSpec
from thermostat.store.db import Store

# the service's own loops on the dispatcher's clock: the pruner and its lease, the budget reaper, the orphan sweep
BESIDE_THE_DISPATCHER = frozenset(
    {"pool-retention", "lease-keeper:pool:retention", "pool-budget-reaper", "pool-orphan-sweep"}
)


class Outage:
    """Cuts the store once armed, at the hook it is called from; the dispatcher's next retry wait restores it."""

    def __init__(self, proxy: FreezableProxy, *, lose_answer: bool) -> None:
        self.proxy = proxy
        self.lose_answer = lose_answer
        self.at_commit = False  # with lose_answer: the answer lost is the next COMMIT's, not the next statement's
        self.armed = False
        self.cuts = 0
        self.restored = asyncio.Event()

    async def __call__(self, _key: str = "") -> None:
        if self.armed:
            self.armed = False
            self.cuts += 1
            self.proxy.cut(lose_next_answer=self.lose_answer, at_commit=self.at_commit)

    async def sleep(self, seconds: float) -> None:
        task = asyncio.current_task()
        if task is not None and task.get_name() in BESIDE_THE_DISPATCHER:
            await asyncio.sleep(seconds)
            return
        if self.proxy.is_cut and self.cuts:
            self.proxy.restore()
            self.restored.set()
        await asyncio.sleep(min(seconds, 0.05))


@contextlib.asynccontextmanager
async def proxied(database_url: str) -> AsyncIterator[tuple[Store, FreezableProxy]]:
    target = urlsplit(database_url)
    async with FreezableProxy(target.hostname or "127.0.0.1", target.port or 5432) as proxy:
        # A cut closes every connection, and refuses new ones, at once: no connect waits out its timeout to meet
        # the outage. After the restore a connect makes a few round trips through this process's own proxy to a
        # Postgres forking a backend; on two loaded cores that took over 2 s (GetJob then failed UNKNOWN).
        store = await Store.open(through(proxy, database_url), run_migrations=False, max_size=12, connect_timeout=10)
        try:
            yield store, proxy
        finally:
            await store.close()


@contextlib.asynccontextmanager
async def pool_through_outage(
    database_url: str, tmp_path: Path, *, lose_answer: bool, hook: str, max_workers: int = 1
) -> AsyncIterator[tuple[RunningPool, Outage, Path]]:
    journal = tmp_path / "journal"
    async with proxied(database_url) as (store, proxy):
        outage = Outage(proxy, lose_answer=lose_answer)
        seams = [SEAMS[hook](outage)]  # the cut lands at the named seam (seams.py)
        types = [journalled_type(journal) | {"max_workers": max_workers}]
        async with start_pool(store, pool_env(types), sleep=outage.sleep, seams=seams) as pool:
            yield pool, outage, journal


async def settled(pool: RunningPool, outage: Outage, *job_ids: str) -> list[pool_pb2.Job]:
    await asyncio.wait_for(outage.restored.wait(), 30)
    return [await pool.finished(job_id) for job_id in job_ids]


async def usage_of(pool: RunningPool, job_id: str) -> int:
    return [e.job_id for e in await pool.usage()].count(job_id)


async def next_pass(pool: RunningPool) -> None:
    """The scaler's next pass after a restore, as its loop runs it: a pass that borrows a pooled connection the cut
    closed before this process read the close fails, and the loop runs the pass again (chassis/periodic.py)."""
    for attempt in range(3):
        try:
            await pool.dispatcher.scaler.scaler_pass()
            return
        except (asyncpg.ConnectionDoesNotExistError, asyncpg.InterfaceError, ConnectionError):
            if attempt == 2:
                raise


def cut_before_or_after(test: Callable[..., Awaitable[None]]) -> Callable[..., Awaitable[None]]:
    return pytest.mark.parametrize(
        "lose_answer", [pytest.param(False, id="store-gone-before-the-write"), pytest.param(True, id="answer-lost")]
    )(test)


@cut_before_or_after
async def test_a_send_whose_mark_is_cut_off_runs_the_job_exactly_once(
    database_url: str, tmp_path: Path, lose_answer: bool
) -> None:
    """mark_sent written again after its answer was lost answers sent again: only the step driving the machine marks
    it and it sends only after the answer, so a job running there under this owner and term is its own mark."""
    async with pool_through_outage(database_url, tmp_path, lose_answer=lose_answer, hook="before_send") as (
        pool,
        outage,
        journal,
    ):
        outage.armed = True
        payload = b'{"seconds": 0, "n": "mark_sent cut"}'
        # no machine: the one placement boots is handed the job dispatched, and its mark_sent meets the cut
        job = await pool.submit(payload, machine_type="sleepy")
        (done,) = await settled(pool, outage, job.id)
        assert done.state == "completed"
        assert reached_worker(journal, payload) == 1
        assert await usage_of(pool, job.id) == 1
        assert outage.proxy.answers_lost == int(lose_answer)
        await machine_idle(pool)


@cut_before_or_after
async def test_a_completion_cut_off_keeps_its_result_and_usage_and_feeds_the_next_job_once(
    database_url: str, tmp_path: Path, lose_answer: bool
) -> None:
    async with pool_through_outage(database_url, tmp_path, lose_answer=lose_answer, hook="before_complete") as (
        pool,
        outage,
        journal,
    ):
        await pool.run(b"0", machine_type="sleepy")  # a warm machine, the only one (max_workers 1)
        held = HeldStep()
        pool.dispatcher.runner.before_execute = held
        held.armed = True
        first_payload, next_payload = b'{"seconds": 0, "n": "first"}', b'{"seconds": 0, "n": "next"}'
        first = await pool.submit(first_payload, machine_type="sleepy")
        await held.arrived.wait()  # first holds the machine, about to go out; next queues behind it
        queued = await pool.submit(next_payload, machine_type="sleepy")
        assert (await pool.job(queued.id)).state == "queued"
        outage.armed = True  # first's completion (which hands the machine next) meets the cut
        held.release.set()
        done = await settled(pool, outage, first.id, queued.id)
        assert [job.state for job in done] == ["completed", "completed"]
        assert (await pool.stub.GetJobResult(pool_pb2.GetJobResultRequest(id=first.id), metadata=caller())).data
        assert [reached_worker(journal, p) for p in (first_payload, next_payload)] == [1, 1]
        assert [await usage_of(pool, job_id) for job_id in (first.id, queued.id)] == [1, 1]
        assert outage.proxy.answers_lost == int(lose_answer)
        await machine_idle(pool)


@cut_before_or_after
async def test_a_take_next_cut_off_after_a_cancelled_send_runs_the_next_job_once(
    database_url: str, tmp_path: Path, lose_answer: bool
) -> None:
    async with pool_through_outage(database_url, tmp_path, lose_answer=lose_answer, hook="before_take_next") as (
        pool,
        outage,
        journal,
    ):
        held = HeldStep()
        pool.dispatcher.runner.before_send = held
        held.armed = True
        cancelled_payload, next_payload = b'{"seconds": 0, "n": "cancelled"}', b'{"seconds": 0, "n": "next"}'
        # no machine: the one placement boots is handed it dispatched, and it is held before its mark_sent
        cancelled = await pool.submit(cancelled_payload, machine_type="sleepy")
        await held.arrived.wait()
        queued = await pool.submit(next_payload, machine_type="sleepy")  # the only machine is busy: it queues
        assert (await pool.job(queued.id)).state == "queued"
        await pool.stub.CancelJob(pool_pb2.CancelJobRequest(id=cancelled.id, build_id="b1"), metadata=caller())
        outage.armed = True  # the unsent job frees the machine, whose take_next meets the cut
        held.release.set()
        (done,) = await settled(pool, outage, queued.id)
        assert done.state == "completed"
        assert [reached_worker(journal, p) for p in (cancelled_payload, next_payload)] == [0, 1]
        assert await usage_of(pool, queued.id) == 1
        assert outage.proxy.answers_lost == int(lose_answer)
        await machine_idle(pool)


@pytest.mark.parametrize("hook", ["before_record_started", "before_machine_ready"])
@cut_before_or_after
async def test_a_boot_whose_row_writes_are_cut_off_runs_its_job_once(
    database_url: str, tmp_path: Path, lose_answer: bool, hook: str
) -> None:
    async with pool_through_outage(database_url, tmp_path, lose_answer=lose_answer, hook=hook) as (
        pool,
        outage,
        journal,
    ):
        outage.armed = True
        payload = b'{"seconds": 0, "n": "cold start"}'
        job = await pool.submit(payload, machine_type="sleepy")  # no machine: placement boots one for it
        (done,) = await settled(pool, outage, job.id)
        assert done.state == "completed"
        assert reached_worker(journal, payload) == 1
        assert await usage_of(pool, job.id) == 1
        assert outage.proxy.answers_lost == int(lose_answer)
        await machine_idle(pool)


async def test_a_claim_whose_answer_was_lost_is_requeued_by_the_next_pass_and_runs_once(
    database_url: str, tmp_path: Path
) -> None:
    """A submit's claim of a warm machine lands (the job running: the claim was its send) but its answer is lost:
    the caller is answered with an error and no task sends the job. The scaler pass finds the busy machine
    nothing drives, holding the job of a submit that did not answer, and requeues it, running as it is (it never
    went out); it then runs once."""
    async with pool_through_outage(database_url, tmp_path, lose_answer=True, hook="before_send") as (
        pool,
        outage,
        journal,
    ):
        await pool.run(b"0", machine_type="sleepy")  # a warm machine
        payload = b'{"seconds": 0, "n": "claim answer lost"}'
        outage.proxy.cut(lose_next_answer=True)
        with pytest.raises(grpc.aio.AioRpcError):
            await pool.submit(payload, machine_type="sleepy")
        outage.proxy.restore()
        assert outage.proxy.answers_lost == 1
        (machine,) = await pool.workers()
        assert (machine.state, bool(machine.job_id)) == ("busy", True)  # claimed, and nothing sends it
        assert (await pool.job(machine.job_id)).state == "running"
        assert reached_worker(journal, payload) == 0
        await next_pass(pool)
        (done,) = [await pool.finished(machine.job_id)]
        assert done.state == "completed"
        assert reached_worker(journal, payload) == 1
        assert await usage_of(pool, machine.job_id) == 1
        await machine_idle(pool)


async def workers_and_jobs(pool: RunningPool) -> list[tuple[str, str]]:
    return [(w.state, w.job_id) for w in await pool.workers()]


async def test_a_placement_whose_commit_answer_was_lost_is_booted_by_the_next_pass_and_runs_once(
    database_url: str, tmp_path: Path
) -> None:
    """Placement's transaction (the machine row, starting, with the queued job handed to it) commits but the
    COMMIT's answer is lost: no boot was started, and the row holds its job and the tenant's only slot under
    this live owner. The scaler pass finds the starting machine nothing drives and no provider started, and
    boots it on the normal path with its token and job: the job runs once, on the one machine max_workers
    allows."""
    async with pool_through_outage(database_url, tmp_path, lose_answer=True, hook="before_insert_machines") as (
        pool,
        outage,
        journal,
    ):
        outage.at_commit = outage.armed = True
        payload = b'{"seconds": 0, "n": "placement commit answer lost"}'
        job = await pool.submit(payload, machine_type="sleepy")  # no machine: placement inserts one, and commits

        async def answer_lost() -> bool | None:
            return True if outage.proxy.answers_lost == 1 else None

        await eventually(answer_lost, timeout=10)
        outage.proxy.restore()
        assert await workers_and_jobs(pool) == [("starting", job.id)]  # committed, and nothing boots it
        assert (await pool.job(job.id)).state == "dispatched"
        await next_pass(pool)
        assert len(await pool.workers()) == 1  # booted, not placed again beside it (max_workers 1)
        (done,) = [await pool.finished(job.id, timeout=10)]
        assert done.state == "completed"
        assert reached_worker(journal, payload) == 1
        assert await usage_of(pool, job.id) == 1
        await machine_idle(pool)
        await pool.dispatcher.scaler.scaler_pass()  # a booted machine is no longer unbooted: nothing boots it again
        assert await workers_and_jobs(pool) == [("warm", "")]
        assert reached_worker(journal, payload) == 1


@cut_before_or_after
async def test_a_placement_cut_off_before_its_commit_places_again_and_runs_the_job_once(
    database_url: str, tmp_path: Path, lose_answer: bool
) -> None:
    """The store goes away before placement's transaction commits (before its inserts, or with an insert's
    answer lost): nothing of it landed, the job is still queued, and the next pass places it again."""
    async with pool_through_outage(database_url, tmp_path, lose_answer=lose_answer, hook="before_insert_machines") as (
        pool,
        outage,
        journal,
    ):
        outage.armed = True
        payload = b'{"seconds": 0, "n": "placement cut before its commit"}'
        job = await pool.submit(payload, machine_type="sleepy")

        async def cut() -> bool | None:
            return True if outage.proxy.answers_lost == int(lose_answer) and outage.cuts == 1 else None

        await eventually(cut, timeout=10)
        outage.proxy.restore()
        await next_pass(pool)
        assert len(await pool.workers()) == 1
        (done,) = [await pool.finished(job.id, timeout=10)]
        assert done.state == "completed"
        assert reached_worker(journal, payload) == 1
        assert await usage_of(pool, job.id) == 1
        await machine_idle(pool)


async def test_a_hint_whose_commit_answer_was_lost_is_booted_by_the_next_pass(
    database_url: str, tmp_path: Path
) -> None:
    """A hint's start commits with its answer lost: the caller gets an error, and the pass boots the machine
    nothing drives (warm, holding no job), once."""
    async with pool_through_outage(database_url, tmp_path, lose_answer=True, hook="before_send") as (pool, outage, _):
        outage.proxy.cut(lose_next_answer=True, at_commit=True)
        with pytest.raises(grpc.aio.AioRpcError):
            await pool.stub.SendHint(pool_pb2.SendHintRequest(machine_type="sleepy"), metadata=caller())
        outage.proxy.restore()
        assert outage.proxy.answers_lost == 1
        assert await workers_and_jobs(pool) == [("starting", "")]
        await next_pass(pool)
        await machine_idle(pool)
        await pool.dispatcher.scaler.scaler_pass()
        assert await workers_and_jobs(pool) == [("warm", "")]


def count_starts(pool: RunningPool, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The machine ids the provider is asked to start, in order."""
    starts: list[str] = []
    backend = pool.dispatcher.backends["local"]
    start = backend.start

    async def counted(spec: MachineSpec) -> MachineHandle:
        starts.append(spec.machine_id)
        return await start(spec)

    monkeypatch.setattr(backend, "start", counted)
    return starts


async def test_a_pass_while_a_placements_commit_answer_is_on_its_way_leaves_its_machine_to_its_boot(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Placement's commit landed and its answer is still on its way when the pass looks for unbooted machines:
    the pass waits for the placement (the placement lock), whose boot registers on the answer, so the machine
    is started once."""
    async with pool_through_outage(database_url, tmp_path, lose_answer=False, hook="before_send") as (
        pool,
        outage,
        journal,
    ):
        starts = count_starts(pool, monkeypatch)
        reads = []
        read = pool.dispatcher.repo.machines.starting_machines

        async def counted_read(owner: Owner) -> list[StartingMachine]:
            reads.append(owner)
            return await read(owner)

        monkeypatch.setattr(pool.dispatcher.repo.machines, "starting_machines", counted_read)
        release = outage.proxy.hold_next_commit_answer()
        payload = b'{"seconds": 0, "n": "placement answer on its way"}'
        job = await pool.submit(payload, machine_type="sleepy")  # no machine: placement inserts one and commits
        await asyncio.wait_for(outage.proxy.answer_held.wait(), 10)
        assert await workers_and_jobs(pool) == [("starting", job.id)]  # committed, its boot not started yet
        unbooted = asyncio.create_task(pool.dispatcher.placement.recover_unbooted())
        await asyncio.sleep(0)  # the pass runs to its first wait: the placement lock, which placement holds
        assert (unbooted.done(), reads) == (False, [])  # a read now could find the machine undriven
        release.set()
        await unbooted
        (done,) = [await pool.finished(job.id, timeout=10)]
        assert done.state == "completed"
        assert len(starts) == 1
        assert reached_worker(journal, payload) == 1
        await machine_idle(pool)


async def test_a_pass_while_a_hints_commit_answer_is_on_its_way_leaves_its_machine_to_its_boot(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hint's commit landed and its answer is on its way when the pass looks: the hint registered its
    machine as driven before its insert, so the pass leaves it alone and the hint's boot starts it, once."""
    async with pool_through_outage(database_url, tmp_path, lose_answer=False, hook="before_send") as (pool, outage, _):
        starts = count_starts(pool, monkeypatch)
        release = outage.proxy.hold_next_commit_answer()
        hint = asyncio.ensure_future(
            pool.stub.SendHint(pool_pb2.SendHintRequest(machine_type="sleepy"), metadata=caller())
        )
        await asyncio.wait_for(outage.proxy.answer_held.wait(), 10)
        assert await workers_and_jobs(pool) == [("starting", "")]
        # reads the committed row while the hint waits for its answer
        await pool.dispatcher.placement.recover_unbooted()
        assert starts == []
        release.set()
        assert (await hint).started
        await machine_idle(pool)
        assert len(starts) == 1


async def test_an_unbooted_machine_whose_type_changed_image_is_released_and_its_job_runs_once_elsewhere(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Placement's commit answer is lost, then the type's image changes: booting the row would start a machine
    that takes no work, so the pass releases it (its job back in the queue in its place) and placement starts
    one on the current image, within max_workers."""
    async with pool_through_outage(database_url, tmp_path, lose_answer=True, hook="before_insert_machines") as (
        pool,
        outage,
        journal,
    ):
        starts = count_starts(pool, monkeypatch)
        outage.at_commit = outage.armed = True
        payload = b'{"seconds": 0, "n": "unbooted, then re-imaged"}'
        job = await pool.submit(payload, machine_type="sleepy")

        async def answer_lost() -> bool | None:
            return True if outage.proxy.answers_lost == 1 else None

        await eventually(answer_lost, timeout=10)
        outage.proxy.restore()
        ((_, unbooted),) = [(w.state, w.id) for w in await pool.workers()]
        reimaged = journalled_type(journal) | {"image": REFERENCE_WORKER.replace(" -m ", " -u -m ")}
        await put_catalogue(pool, [reimaged])
        await next_pass(pool)
        (done,) = [await pool.finished(job.id, timeout=10)]
        assert done.state == "completed"
        assert unbooted not in starts and len(starts) == 1  # the released row never started; its successor did
        assert [w.id for w in await pool.workers()] == starts
        assert reached_worker(journal, payload) == 1
        assert await usage_of(pool, job.id) == 1
        await machine_idle(pool)
