"""Engine parts on the in-memory twin of the jobs and machines repositories (tests/fixtures/pool_twin), no Postgres.

Each test mirrors assertions an integration test makes through a whole dispatcher on real Postgres
(test_wait_rereads.py, test_hand_back.py): the gathered re-reads of sync waits (engine/rereads.py) and a refused
job's hand-back (engine/hand_back.py) with what the runner carries out after a run that ended so (engine/runner.py),
with the real Writes, Fleet, CatalogueCache, metrics and runner around them; only the instance lease (a held one),
the provider's stop, the worker client (never called) and placement's poke (noted) are stood in for.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

import pytest

from tests.fixtures.clock import FakeClock, RealWaits
from tests.fixtures.pool_twin import MemoryPoolRepository
from thermostat.chassis.metrics import Metrics
from thermostat.policy.pool.hand_back import Refusal
from thermostat.policy.pool.job_outcome import ReplyKind, WorkerReply
from thermostat.policy.pool.machine_type import BackendKind, Catalogue, parse_catalogue
from thermostat.policy.pool.run_end import Ended
from thermostat.policy.pool.submit_batch import BatchLimits
from thermostat.pool_dispatcher.engine.catalogue import Backends, CatalogueCache
from thermostat.pool_dispatcher.engine.drivers import Drivers
from thermostat.pool_dispatcher.engine.fleet import Fleet
from thermostat.pool_dispatcher.engine.hand_back import HandBack, Refused
from thermostat.pool_dispatcher.engine.intake import Intake
from thermostat.pool_dispatcher.engine.local import Local, SubmitKey
from thermostat.pool_dispatcher.engine.machine_run import MachineRun, RunEnded, RunParts, Seams
from thermostat.pool_dispatcher.engine.rereads import Rereads
from thermostat.pool_dispatcher.engine.runner import Runner
from thermostat.pool_dispatcher.engine.tasks import Tasks
from thermostat.pool_dispatcher.engine.waits import Waits
from thermostat.pool_dispatcher.engine.writes import Writes
from thermostat.pool_dispatcher.metrics import PoolMetrics
from thermostat.pool_dispatcher.repository import Assignment, CompletionWrite, JobView, Owner, QueuedSubmit, SubmitWrite

ME = Owner(instance="dispatcher-a", term=3)
REFUSED = "Connection refused"
UNREACHABLE = WorkerReply(kind=ReplyKind.UNREACHABLE, error=REFUSED, cause="refused")


class HeldLease:
    """The instance lease, held and trusted (engine/ownership.py's Ownership over a LeaseStore)."""

    owner = ME

    def trusted_for_call(self) -> bool:
        return True


@dataclass
class StoppingBackend:
    """The local backend's stop, noted."""

    stopped: list[str] = field(default_factory=list)

    async def stop(self, provider_id: str) -> None:
        self.stopped.append(provider_id)


async def no_wait(seconds: float) -> None:
    return None


class Pokes(list[bool]):
    """Placement's poke (engine/local.py's WantsPlacement), each call noted with its at_cap."""

    def __call__(self, *, at_cap: bool = False) -> None:
        self.append(at_cap)


@dataclass
class RunnerHandBack:
    """A refusal as a machine's run meets it (engine/machine_run.py): the hand-back's answer; a run that ended handed
    back, what the runner carries out after it (engine/runner.py: placement poked, the machine stopped, poked again)."""

    runner: Runner

    async def refused(self, job: Assignment, reply: WorkerReply, machine_type: str) -> Refused:
        parts = self.runner.parts
        refused = await parts.hand_back.refused(job, reply, machine_type)
        if refused.handed_back:
            run = MachineRun(parts, Seams(), SubmitKey("t", machine_type, "img"), job, driver=object())
            await self.runner._follow(RunEnded(how=Ended.HANDED_BACK, provider_id=refused.provider_id), run)
        return refused


async def machine_running_a_job(repo: MemoryPoolRepository, n: int = 1) -> Assignment:
    """A warm local machine of tenant t (provider id `provider-<n>`) that a submit claimed and sent a job to."""
    machine_id = f"00000000-0000-0000-0000-00000000000{n}"
    await repo.machines.insert_machine(
        None,
        machine_id=machine_id,
        tenant_id="t",
        machine_type="local",
        image="img",
        backend="local",
        token="tok",
        owner=ME,
        cool_down_seconds=60,
        assign_job=False,
    )
    await repo.machines.record_started(
        machine_id, provider_id=f"provider-{n}", endpoint="http://m", region=None, owner=ME
    )
    await repo.machines.machine_ready(machine_id, ME)
    queued = [j for j in repo.db.jobs.values() if j.state == "queued"]
    if queued:  # a job handed back before: the warm machine takes it next, as placement's take_next hands it over
        taken = await repo.jobs.take_next(machine_id, "img", ME)
        assert taken is not None
        await repo.jobs.mark_sent(taken.job_id, machine_id, ME)
        return taken
    submit = SubmitWrite(
        job_id="10000000-0000-0000-0000-000000000001",
        tenant_id="t",
        machine_type="local",
        image="img",
        priority=0,
        session_id=None,
        timeout_seconds=30,
        payload=b"x",
        owner=ME,
        trace={},
        send_now=True,
    )
    submitted = await repo.jobs.submit(submit)
    assert submitted.assignment is not None and submitted.assignment.sent
    return submitted.assignment


@dataclass
class Engine:
    repo: MemoryPoolRepository
    hand_back: RunnerHandBack
    backend: StoppingBackend
    metrics: PoolMetrics
    placements: Pokes

    def refusals(self, decision: str) -> float:
        labels = {"machine_type": "local", "backend": "local", "cause": "refused", "decision": decision}
        value = self.metrics.metrics.registry.get_sample_value("thermostat_pool_jobs_refused_total", labels)
        return value or 0.0


@pytest.fixture
def engine() -> Engine:
    repo, local, placements, tasks = MemoryPoolRepository(), Local(), Pokes(), Tasks()
    ownership, drivers, metrics = HeldLease(), Drivers(local), PoolMetrics(Metrics())
    clock = RealWaits(FakeClock(), no_wait)
    backend = StoppingBackend()
    backends = Backends({BackendKind.LOCAL: backend})
    configured = parse_catalogue([{"name": "local", "image": "img", "backend": "local"}])
    assert isinstance(configured, Catalogue)
    catalogue = CatalogueCache(repo, backends, configured, metrics, local=local, wants_placement=placements)
    writes = Writes(repo, ownership, drivers, clock)
    waits = Waits(repo, placements, clock)
    intake = Intake(
        repo=repo,
        ownership=ownership,
        catalogue=catalogue,
        drivers=drivers,
        tasks=tasks,
        wants_placement=placements,
        channel="own",
        limits=BatchLimits(),
        local=local,
    )
    fleet = Fleet(
        repo=repo,
        ownership=ownership,
        backends=backends,
        drivers=drivers,
        writes=writes,
        intake=intake,
        waits=waits,
        wants_placement=placements,
        metrics=metrics,
        clock=clock,
        health_poll_seconds=1,
        local=local,
    )
    hand_back = HandBack(repo=repo, ownership=ownership, catalogue=catalogue, writes=writes, metrics=metrics)
    parts = RunParts(
        repo=repo,
        ownership=ownership,
        client=None,
        catalogue=catalogue,
        drivers=drivers,
        writes=writes,
        waits=waits,
        intake=intake,
        hand_back=hand_back,
        metrics=metrics,
        clock=clock,
        local=local,
        channel="own",
    )
    runner = Runner(parts=parts, fleet=fleet, tasks=tasks, wants_placement=placements, capped=False)
    return Engine(repo, RunnerHandBack(runner), backend, metrics, placements)


# the sync waits' gathered re-reads (test_wait_rereads.py)


class CountedReads:
    """The twin's gathered read, each call's ids noted."""

    def __init__(self, repo: MemoryPoolRepository) -> None:
        self.read = repo.jobs.get_jobs
        self.calls: list[list[str]] = []

    async def __call__(self, job_ids: list[str]) -> dict[str, JobView]:
        self.calls.append(list(job_ids))
        return await self.read(job_ids)


async def test_the_re_reads_of_many_sync_waits_share_one_read() -> None:
    """Six waits' re-reads asked within the gathering window are one read naming several of them (not one each),
    each answered with its own job, and placement is asked for once, as one of them is still queued."""
    repo, asked_to_place = MemoryPoolRepository(), Pokes()
    jobs = [
        QueuedSubmit(
            job_id=f"20000000-0000-0000-0000-00000000000{i}",
            priority=0,
            session_id=None,
            timeout_seconds=30,
            payload=b"0",
            trace={},
            done_channel=None,
        )
        for i in range(6)
    ]
    await repo.jobs.submit_queued("t", "sleepy", jobs)
    reads = CountedReads(repo)
    rereads = Rereads(reads, asked_to_place, gather_seconds=0.01)
    views = await asyncio.gather(*(rereads.read(job.job_id) for job in jobs))
    asked = sum(len(ids) for ids in reads.calls)
    assert asked >= len(jobs)
    assert len(reads.calls) < asked
    assert max(len(ids) for ids in reads.calls) >= 2
    assert [(v.id, v.state) for v in views if v is not None] == [(job.job_id, "queued") for job in jobs]
    assert len(asked_to_place) == 1


async def test_a_job_whose_notification_never_came_is_found_by_the_gathered_re_read(engine: Engine) -> None:
    """Completed with no notification reaching its wait, the job is found done by the re-read, and nothing queued
    asks for placement."""
    job = await machine_running_a_job(engine.repo)
    completion = CompletionWrite(
        job_id=job.job_id,
        machine_id=job.machine_id,
        state="completed",
        result=b"slept 0",
        error=None,
        duration_seconds=0.1,
        owner=ME,
        retire=False,
        take_next=True,
        send_next=True,
        tenant_id="t",
        machine_type="local",
        notified_result_bytes=1000,
        channel="own",
    )
    ended = await engine.repo.jobs.complete(completion)
    assert ended.job_state == "completed"
    asked_to_place = Pokes()
    reads = CountedReads(engine.repo)
    view = await Rereads(reads, asked_to_place, gather_seconds=0.01).read(job.job_id)
    assert view is not None and view.state == "completed" and view.has_result
    assert any(job.job_id in ids for ids in reads.calls)
    assert asked_to_place == []


# a refused job's hand-back (test_hand_back.py)


async def test_a_refused_job_is_queued_again_in_its_place_and_its_machine_stopped(
    engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    """The job waits again, handed to one machine so far, with no usage event; the dead machine is stopped at its
    provider and forgotten; placement is asked twice; the metric and a log line name the hand-back."""
    caplog.set_level(logging.INFO, logger="thermostat.pool_dispatcher")
    job = await machine_running_a_job(engine.repo)
    refused = await engine.hand_back.refused(job, UNREACHABLE, "local")
    assert refused.handed_back and refused.outcome is None
    view = await engine.repo.jobs.get_job(job.job_id, "t")
    assert view is not None and view.state == "queued" and view.handed_to_machines == 1 and view.worker_id is None
    assert await engine.repo.jobs.list_usage(None, 0, 10) == []
    assert engine.backend.stopped == ["provider-1"] and await engine.repo.machines.list_workers(None) == []
    assert len(engine.placements) == 2
    assert engine.refusals("hand_back") == 1 and engine.refusals("give_up") == 0
    [line] = [r.getMessage() for r in caplog.records if "handed back" in r.getMessage()]
    assert job.job_id in line and job.machine_id in line and "local" in line and REFUSED in line


async def test_after_two_machines_refused_it_the_job_fails_naming_each_attempt(engine: Engine) -> None:
    """The second refusal gives up: the runner completes the job failed, its error naming both machines and why;
    the second machine is not handed the job back."""
    first = await machine_running_a_job(engine.repo, 1)
    assert (await engine.hand_back.refused(first, UNREACHABLE, "local")).handed_back
    second = await machine_running_a_job(engine.repo, 2)
    assert second.job_id == first.job_id
    refused = await engine.hand_back.refused(second, UNREACHABLE, "local")
    assert not refused.handed_back and refused.outcome is not None
    assert refused.outcome.error == (
        "worker unreachable on 2 machines, none was sent the job: "
        f"machine {first.machine_id}: {REFUSED}; machine {second.machine_id}: {REFUSED}"
    )
    view = await engine.repo.jobs.get_job(second.job_id, "t")
    assert view is not None and view.state == "running" and view.handed_to_machines == 2
    assert engine.refusals("hand_back") == 1 and engine.refusals("give_up") == 1


async def test_a_cancel_landing_before_the_hand_back_stands(engine: Engine) -> None:
    """Cancelled between the refused call and the hand-back: nothing is handed back, the job stays cancelled, and
    its machine is left to the runner's completion (which retires it and meters the cancel once)."""
    job = await machine_running_a_job(engine.repo)
    cancelled = await engine.repo.jobs.cancel(job.job_id, "t", "build-1")
    assert cancelled is not None and cancelled.prior == "running"
    refused = await engine.hand_back.refused(job, UNREACHABLE, "local")
    assert not refused.handed_back and refused.outcome is None
    view = await engine.repo.jobs.get_job(job.job_id, "t")
    assert view is not None and (view.state, view.handed_to_machines, view.has_result) == ("cancelled", 1, False)
    assert engine.backend.stopped == [] and engine.placements == []


async def test_a_hand_back_written_again_answers_the_same(engine: Engine) -> None:
    """Its answer lost, the hand-back is written again while the machine is being stopped: handed back, the same
    provider machine to stop, and the job names the machine once."""
    job = await machine_running_a_job(engine.repo)
    refusal = Refusal(machine_id=job.machine_id, reason=REFUSED)
    first = await engine.repo.jobs.hand_back(job.job_id, job.machine_id, ME, refusal)
    again = await engine.repo.jobs.hand_back(job.job_id, job.machine_id, ME, refusal)
    assert (first.handed_back, first.provider_id) == (again.handed_back, again.provider_id) == (True, "provider-1")
    assert await engine.repo.jobs.refused_by(job.job_id) == (refusal,)
