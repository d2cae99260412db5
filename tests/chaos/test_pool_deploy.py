"""A rolling deploy of the pool dispatcher under steady load (issue 23 item 1, chaos): two replicas, each restarted in
turn the way a Deployment rolls them (SIGTERM, the process drains, releases its warm machines and exits; a new
process starts and serves), while clients keep submitting. Goals: jobs lost 0, jobs run twice 0, warm machines
stopped by the deploy 0; the figure is p99 submit→result during the roll beside before it.

The stack is the chaos suite's (tests/chaos/kill_stack.py) with only the pool dispatcher, two replicas, local
machines that outlive their dispatcher (as in the dev stack: POOL_LOCAL_MACHINES_OUTLIVE_PROCESS) and a cool-down
far longer than the scenario, so any machine that goes away was stopped by the deploy. A client submits to one
replica (SubmitJob), retries on the other when it is refused (UNAVAILABLE: draining, or gone; nothing was queued),
and follows its job with WaitJob wherever it is answered; submit→result is from the first attempt to the terminal
answer. The worker journals every payload it executes, so a job run twice shows as a payload journalled twice.
`--chaos-scale=full` runs longer phases with more clients (`make chaos`).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import hashlib
import json
import signal
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import asyncpg
import grpc
import psutil
import pytest

from tests.chaos.kill_stack import POOL_TOKEN, ChaosStack, chaos_stack
from tests.fixtures.chaos import ChaosFigures, ChaosScale
from thermostat.chassis.registry import POOL_DISPATCHER
from thermostat.pool.v1 import pool_pb2, pool_pb2_grpc

pytestmark = pytest.mark.e2e

TERMINAL = ("completed", "failed", "timed_out", "cancelled")
JOB_SECONDS = 0.1
CALLER = (("authorization", f"Bearer {POOL_TOKEN}"), ("x-strata-tenant", "acme"))


@pytest.fixture(scope="module")
async def deploy_stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ChaosStack]:
    async with chaos_stack(
        tmp_path_factory.mktemp("deploy"),
        services=(POOL_DISPATCHER,),
        pool_workers=4,
        POOL_LOCAL_MACHINES_OUTLIVE_PROCESS="true",
        POOL_SHUTDOWN_GRACE_SECONDS="20",
        POOL_LEASE_SECONDS="30",  # a lease never lapses here: what moves, moves by release and adoption
    ) as running:
        yield running


@dataclass
class Load:
    """Clients submitting jobs back to back, each through one replica and, when refused, through the other."""

    stubs: list[pool_pb2_grpc.PoolDispatcherStub]
    latencies: dict[str, list[float]] = field(default_factory=lambda: collections.defaultdict(list))
    outcomes: collections.Counter[str] = field(default_factory=collections.Counter)
    payloads: dict[str, bytes] = field(default_factory=dict)  # job id → payload
    refusals: int = 0
    cancelled_at_stop: int = 0
    phase: str = "warm-up"
    stopping: bool = False
    sent: int = 0

    async def client(self, n: int) -> None:
        k = 0
        while not self.stopping:
            payload = json.dumps({"seconds": JOB_SECONDS, "client": n, "k": k}).encode()
            k += 1
            self.sent += 1
            phase, started = self.phase, time.monotonic()
            job_id = await self.submit(payload, first=n % 2)
            state = await self.follow(job_id, first=n % 2)
            self.latencies[phase].append(time.monotonic() - started)
            self.outcomes[state] += 1
            self.payloads[job_id] = payload

    async def submit(self, payload: bytes, *, first: int) -> str:
        for attempt in range(400):
            stub = self.stubs[(first + attempt) % 2]
            request = pool_pb2.SubmitJobRequest(machine_type="echo")
            request.payload.data = payload
            try:
                job = await stub.SubmitJob(request, metadata=CALLER, timeout=10)
                return str(job.id)
            except grpc.aio.AioRpcError as error:
                if error.code() is grpc.StatusCode.CANCELLED:
                    # Not by us: gRPC's server, stopping, cancels a call that reached it before any handler took
                    # it (grpc/grpc#41785; UNAVAILABLE would be the right word), so nothing was queued. Sent again;
                    # were it queued after all, its payload would run twice and the journal would say so.
                    self.cancelled_at_stop += 1
                elif error.code() is grpc.StatusCode.UNAVAILABLE:
                    self.refusals += 1  # refused, nothing queued: the other replica takes it
                else:
                    raise
                await asyncio.sleep(0.01 if attempt % 2 == 0 else 0.05)
        raise AssertionError("no replica took the submit")

    async def follow(self, job_id: str, *, first: int) -> str:
        for attempt in range(400):
            stub = self.stubs[(first + attempt) % 2]
            try:
                async for job in stub.WaitJob(pool_pb2.WaitJobRequest(id=job_id), metadata=CALLER, timeout=60):
                    if job.state in TERMINAL:
                        return str(job.state)
            except grpc.aio.AioRpcError as error:
                if error.code() not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED):
                    raise
            await asyncio.sleep(0.01)
        raise AssertionError(f"job {job_id} never answered terminal")


SYNC_PAYLOAD = json.dumps({"seconds": 1, "sync": True}).encode()


async def sync_job(stub: pool_pb2_grpc.PoolDispatcherStub) -> bytes:
    request = pool_pb2.SubmitJobSyncRequest(machine_type="echo", wait_seconds="60")
    request.payload.data = SYNC_PAYLOAD
    reply = await stub.SubmitJobSync(request, metadata=CALLER, timeout=60)
    return bytes(reply.data)


async def running_sync(db: asyncpg.Connection) -> None:
    """Until the sync job runs on its machine (its payload is the only one with "sync" in it)."""
    for _ in range(3000):
        if await db.fetchval("SELECT count(*) FROM pool_jobs WHERE state = 'running' AND payload = $1", SYNC_PAYLOAD):
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the sync job never ran")


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] if ordered else float("nan")


def journalled(journal: Path) -> collections.Counter[str]:
    return collections.Counter(journal.read_text().split() if journal.exists() else [])


async def machine_ids(db: asyncpg.Connection) -> set[str]:
    return {r["id"] for r in await db.fetch("SELECT id::text FROM pool_machines")}


@contextlib.asynccontextmanager
async def stubs_for(chaos: ChaosStack) -> AsyncIterator[list[pool_pb2_grpc.PoolDispatcherStub]]:
    options = [("grpc.initial_reconnect_backoff_ms", 50), ("grpc.max_reconnect_backoff_ms", 200)]
    channels = [
        grpc.aio.insecure_channel(f"127.0.0.1:{c.port}", options=options) for c in chaos.replicas(POOL_DISPATCHER)
    ]
    try:
        yield [pool_pb2_grpc.PoolDispatcherStub(c) for c in channels]
    finally:
        for channel in channels:
            await channel.close()


async def test_a_rolling_deploy_of_both_dispatchers_under_load_loses_no_job_runs_none_twice_and_keeps_the_fleet(
    deploy_stack: ChaosStack, figures: ChaosFigures, chaos_scale: ChaosScale
) -> None:
    chaos = deploy_stack
    clients = chaos_scale.pick(4, 8)
    steady_seconds = chaos_scale.pick(2.5, 30.0)
    db = await asyncpg.connect(chaos.database_url)
    before_journal = journalled(chaos.journal)
    try:
        async with stubs_for(chaos) as stubs:
            load = Load(stubs=stubs)
            load.phase = "warm-up"  # the first jobs boot the fleet: not the steady state the roll is compared with
            running = [asyncio.ensure_future(load.client(n)) for n in range(clients)]
            await asyncio.sleep(chaos_scale.pick(1.5, 5.0))
            load.phase = "before"
            await asyncio.sleep(steady_seconds)  # the load's own pace: the latency before the roll
            fleet_before = await machine_ids(db)
            load.phase = "roll"
            rolled_at = time.monotonic()
            # a sync call in flight on the first replica when its SIGTERM comes: its result must reach the caller
            sync = asyncio.ensure_future(sync_job(stubs[0]))
            await running_sync(db)
            exits, starts = [], []
            for child in chaos.replicas(POOL_DISPATCHER):  # one after the other, as a Deployment rolls
                signalled = time.monotonic()
                child.process.send_signal(signal.SIGTERM)
                assert await child.process.wait() == 0
                exited = time.monotonic()
                exits.append(exited - signalled)
                await chaos.stack.respawn(child)
                await chaos.stack.wait_serving(child, POOL_DISPATCHER, timeout=120)
                starts.append(time.monotonic() - exited)
            roll_seconds = time.monotonic() - rolled_at
            sync_result = await sync
            fleet_after_roll = await machine_ids(db)
            load.phase = "after"
            await asyncio.sleep(chaos_scale.pick(0.5, 10.0))
            load.stopping = True
            await asyncio.gather(*running)
    finally:
        await db.close()
    ran = journalled(chaos.journal) - before_journal
    by_digest = {hashlib.sha256(p).hexdigest(): job for job, p in load.payloads.items()}
    twice = sum(1 for d, count in ran.items() if count > 1 and d in by_digest)
    answered = sum(load.outcomes.values())
    stopped_by_deploy = len(fleet_before - fleet_after_roll)
    booted_during_roll = len(fleet_after_roll - fleet_before)
    scenario = f"rolling deploy of 2 pool dispatchers ({clients} clients, {JOB_SECONDS:g} s jobs)"
    figures.record(scenario, "jobs answered / completed", f"{answered} / {load.outcomes['completed']}", "equal")
    figures.record(scenario, "jobs lost / run twice", f"{load.sent - answered} / {twice}", "0 / 0")
    figures.record(scenario, "warm machines stopped by the deploy", stopped_by_deploy, "0")
    figures.record(scenario, "machines booted during the roll", booted_during_roll, "0 (each moved, warm)")
    figures.record(scenario, "submits refused (retried on the other replica)", load.refusals)
    figures.record(scenario, "submits cancelled by gRPC's stop before a handler (retried)", load.cancelled_at_stop)
    figures.record(scenario, "roll time, both replicas (s)", roll_seconds)
    figures.record(scenario, "SIGTERM → exit, each replica (s)", " / ".join(f"{x:.2g}" for x in exits))
    figures.record(scenario, "start → serving, each replica (s)", " / ".join(f"{x:.2g}" for x in starts))
    figures.record(scenario, "p99 submit→result before the roll (s)", p99(load.latencies["before"]))
    figures.record(scenario, "p99 submit→result during the roll (s)", p99(load.latencies["roll"]), "≈ before")
    figures.record(scenario, "p99 submit→result after the roll (s)", p99(load.latencies["after"]))
    counts = " / ".join(str(len(load.latencies[phase])) for phase in ("before", "roll", "after"))
    figures.record(scenario, "jobs before / during / after the roll", counts)

    figures.record(scenario, "sync job in flight at the first SIGTERM", sync_result.decode(), "its result")

    assert sync_result == b"slept 1", "the job in flight at SIGTERM finished and its result reached its caller"
    assert load.sent == answered, "every submitted job answered terminal"
    assert load.outcomes == collections.Counter({"completed": answered}), load.outcomes
    assert twice == 0, "a payload reached a worker twice"
    assert all(ran[hashlib.sha256(p).hexdigest()] == 1 for p in load.payloads.values())
    assert fleet_before and stopped_by_deploy == 0, (fleet_before, fleet_after_roll)
    assert len(load.latencies["roll"]) > 0


async def test_only_the_stacks_own_stop_ends_the_machines_a_deploy_kept(deploy_stack: ChaosStack) -> None:
    """The stack going away (make run's Ctrl-C) sends the dispatchers SIGINT: every machine stops, none is left."""
    chaos = deploy_stack
    db = await asyncpg.connect(chaos.database_url)
    try:
        async with stubs_for(chaos) as stubs:
            request = pool_pb2.SubmitJobSyncRequest(machine_type="echo", wait_seconds="60")
            request.payload.data = json.dumps({"seconds": 0}).encode()
            await stubs[0].SubmitJobSync(request, metadata=CALLER, timeout=60)
        pids = [
            int(r["provider_id"].removeprefix("local-"))
            for r in await db.fetch("SELECT provider_id FROM pool_machines")
        ]
    finally:
        await db.close()
    assert pids and all(alive(pid) for pid in pids)
    await chaos.stack.stop()
    assert [pid for pid in pids if alive(pid)] == []


def alive(pid: int) -> bool:
    with contextlib.suppress(psutil.NoSuchProcess):
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    return False
