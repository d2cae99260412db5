"""kill -9 of one of two replicas of each service in the middle of its work (issue 14, chaos): the pod controller
with a wake at RunPod, the idle monitor mid-streak, a pool dispatcher with jobs in flight, metering with a page
read and not yet landed. Every service runs as two real processes over a Postgres server of this module's own
(tests/chaos/kill_stack.py); each scenario kills one, checks that the survivor finishes or fails the work within
about one lease, that nothing ran twice, nothing was lost (every job terminal, every billable call recorded and
ledgered once) and nothing is left billing, records those figures, and starts the killed replica again."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import hashlib
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import grpc
import psutil
import pytest

from tests.chaos.kill_stack import (
    CHECK_SECONDS,
    LEDGER_LEASE_SECONDS,
    MONITOR_LEASE_SECONDS,
    POOL_LEASE_SECONDS,
    POOL_TOKEN,
    WAKE_LEASE_SECONDS,
    ChaosStack,
    chaos_stack,
)
from tests.fixtures.chaos import ChaosFigures, ChaosScale
from tests.fixtures.polling import eventually
from tests.fixtures.services import OPERATOR, VOLUME
from thermostat.chassis.registry import IDLE_MONITOR, METERING, POD_CONTROLLER, POOL_DISPATCHER
from thermostat.dev.stack.supervisor import Child
from thermostat.pods.v1 import pods_pb2, pods_pb2_grpc
from thermostat.policy.idle.monitor_state import MonitorState
from thermostat.pool.v1 import pool_pb2, pool_pb2_grpc

pytestmark = pytest.mark.e2e

IDLE_MINUTES = "0.05"  # 6 ticks of CHECK_SECONDS: long enough to kill mid-streak, short enough to see the stop
IDLE_TICKS = 6
A100 = "NVIDIA A100 80GB PCIe"
TERMINAL = ("completed", "failed", "timed_out", "cancelled")
# How far past one lease a survivor may finish on a loaded machine (two cores shared with other suites): the
# survivor acts at its first attempt after the lease lapses, and one such attempt is a few polls long.
SLACK_SECONDS = 4.0


@pytest.fixture(scope="module")
async def chaos(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ChaosStack]:
    async with chaos_stack(tmp_path_factory.mktemp("kill"), IDLE_MINUTES=IDLE_MINUTES) as running:
        yield running


@pytest.fixture
async def db(chaos: ChaosStack) -> AsyncIterator[asyncpg.Connection]:
    connection = await asyncpg.connect(chaos.database_url)
    yield connection
    await connection.close()


@contextlib.asynccontextmanager
async def channel_to(child: Child) -> AsyncIterator[grpc.aio.Channel]:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{child.port}") as channel:
        yield channel


def billing(chaos: ChaosStack) -> set[str]:
    """Pods the simulated account is billing for right now."""
    return {s.pod_id for s in chaos.sim.world.billed() if s.end is None}


def billable_calls(chaos: ChaosStack) -> collections.Counter[str]:
    """Billable calls RunPod received, by kind (Create, Start, Stop, Terminate), answered or not."""
    calls: collections.Counter[str] = collections.Counter()
    for request in chaos.sim.requests("/v2/pods"):
        if request.method == "POST" and request.path == "/v2/pods":
            calls["Create"] += 1
        elif request.method == "POST" and request.path.endswith("/action") and isinstance(request.json_body, dict):
            calls[str(request.json_body.get("action", "")).capitalize()] += 1
        elif request.method == "DELETE":
            calls["Terminate"] += 1
    return calls


async def recorded_actions(db: asyncpg.Connection, since: float) -> collections.Counter[str]:
    """Billable actions of pod qwen on record since `since` (wall clock), by kind."""
    rows = await db.fetch("SELECT action FROM pod_actions WHERE pod_name = 'qwen' AND at >= to_timestamp($1)", since)
    return collections.Counter(r["action"] for r in rows)


async def ledgered(db: asyncpg.Connection) -> tuple[int, int]:
    """(billable actions not in the ledger, ledger entries beyond one per action), once metering caught up."""

    async def caught_up() -> tuple[int, int] | None:
        missing = await db.fetchval(
            "SELECT count(*) FROM pod_actions a WHERE NOT EXISTS "
            "(SELECT 1 FROM ledger_pod_actions l WHERE l.source_id = a.id::text)"
        )
        extra = await db.fetchval(
            "SELECT count(*) - count(DISTINCT source_id) FROM ledger_pod_actions WHERE source_id IN "
            "(SELECT id::text FROM pod_actions)"
        )
        return (missing, extra) if missing == 0 else None

    try:
        return await eventually(caught_up, timeout=20, every=0.1)
    except AssertionError:
        return await caught_up() or (
            await db.fetchval(
                "SELECT count(*) FROM pod_actions a WHERE NOT EXISTS "
                "(SELECT 1 FROM ledger_pod_actions l WHERE l.source_id = a.id::text)"
            ),
            0,
        )


async def lease_holder_pid(db: asyncpg.Connection, lease: str) -> int | None:
    holder = await db.fetchval("SELECT holder FROM leases WHERE name = $1 AND expires_at > now()", lease)
    return int(holder.split(":")[1]) if holder else None


def the_one(children: list[Child], pid: int) -> tuple[Child, Child]:
    """(the replica with `pid`, the other one)."""
    killed = next(c for c in children if c.process.pid == pid)
    return killed, next(c for c in children if c is not killed)


# ------------------------------------------------------------------------------------------ pod controller


async def test_a_controller_killed_with_its_create_at_runpod_leaves_the_survivor_one_pod_and_the_create_on_record(
    chaos: ChaosStack, db: asyncpg.Connection, figures: ChaosFigures
) -> None:
    """The wake's POST /v2/pods is held at RunPod, the replica that sent it is killed, then RunPod acts on it.
    The chat bot's retries reach the survivor: within one wake lease it answers with that pod (no second create),
    nothing bills that no one owns, and the create is on record (adopted by the survivor) and ledgered once."""
    chaos.sim.reset()
    began = time.time()
    chaos.sim.world.settings.model_ready_seconds = -1  # never model-ready: the monitor leaves this pod alone
    chaos.sim.world.set_catalogue(g for g in chaos.sim.world.catalogue() if g.id == A100)  # the held create places
    first, second = chaos.replicas(POD_CONTROLLER)
    held = chaos.sim.hold("POST", "/v2/pods")
    async with channel_to(first) as a, channel_to(second) as b:
        doomed = asyncio.ensure_future(
            pods_pb2_grpc.PodControllerStub(a).StartPod(pods_pb2.StartPodRequest(name="qwen"), metadata=OPERATOR)
        )
        await held.reached()
        chaos.kill(first)
        killed_at = time.monotonic()
        await first.process.wait()
        held.release()  # RunPod acts on a create whose sender is gone
        with pytest.raises(grpc.aio.AioRpcError):
            await doomed
        survivor = pods_pb2_grpc.PodControllerStub(b)

        async def woken() -> pods_pb2.StartPodResponse | None:
            try:
                reply = await survivor.StartPod(pods_pb2.StartPodRequest(name="qwen"), metadata=OPERATOR, timeout=10)
            except grpc.aio.AioRpcError:
                return None  # a wake still in flight elsewhere answers UNAVAILABLE: the bot asks again
            return None if reply.outcome == "Waiting" else reply

        answer = await eventually(woken, timeout=WAKE_LEASE_SECONDS * 6, every=0.1)
        recovered = time.monotonic() - killed_at
        view = await survivor.GetPod(pods_pb2.GetPodRequest(name="qwen"), timeout=10)

    calls, actions = billable_calls(chaos), await recorded_actions(db, began)
    lost_actions = sum(max(0, calls[k] - actions[k]) for k in calls)
    doubled_actions = sum(max(0, actions[k] - calls[k]) for k in actions)
    in_flight = await db.fetchval("SELECT count(*) FROM pod_wakes WHERE completed_at IS NULL")
    lost_ledger, doubled_ledger = await ledgered(db)
    scenario = "kill -9 pod-controller (create held at RunPod)"
    figures.record(scenario, "time to recover (s)", recovered, f"≤ {WAKE_LEASE_SECONDS:g} s + slack (wake lease)")
    figures.record(scenario, "creates issued", calls["Create"], "1")
    figures.record(
        scenario, "billable calls not recorded / recorded twice", f"{lost_actions} / {doubled_actions}", "0 / 0"
    )
    figures.record(scenario, "ledger entries lost / doubled", f"{lost_ledger} / {doubled_ledger}", "0 / 0")
    figures.record(scenario, "pods billing that no one owns", len(billing(chaos) - {view.pod_id}), "0")

    assert answer.outcome in ("AlreadyRunning", "Started", "Created"), answer
    assert calls["Create"] == 1
    assert billing(chaos) == {answer.pod_id} == {view.pod_id}
    assert in_flight == 0, "a wake of the dead replica is still in flight"
    # the survivor closed the dead replica's wake, so it put the create RunPod acted on on record (adopted)
    assert (lost_actions, doubled_actions) == (0, 0), f"RunPod saw {dict(calls)}, the record says {dict(actions)}"
    assert (lost_ledger, doubled_ledger) == (0, 0)
    assert recovered <= WAKE_LEASE_SECONDS + SLACK_SECONDS

    async with channel_to(second) as b:  # leave nothing billing for the next scenario
        await pods_pb2_grpc.PodControllerStub(b).StopPod(pods_pb2.StopPodRequest(name="qwen"), metadata=OPERATOR)
    assert billing(chaos) == set()
    await chaos.revive(first, POD_CONTROLLER)


# --------------------------------------------------------------------------------------------- idle monitor


async def streak_of(db: asyncpg.Connection) -> tuple[int, int]:
    """The pod's idle streak as the last tick saved it, and the pid of the replica that ticked."""
    row = await db.fetchrow("SELECT state, ticked_by FROM monitor_state WHERE pod_name = 'qwen'")
    if row is None or not row["ticked_by"]:
        return 0, 0
    state = MonitorState.from_dict(json.loads(row["state"]))
    return state.counters.idle_streak, int(row["ticked_by"].split(":")[1])


async def test_a_monitor_killed_mid_streak_is_taken_over_within_a_lease_and_the_idle_stop_comes_once_on_time(
    chaos: ChaosStack, db: asyncpg.Connection, figures: ChaosFigures
) -> None:
    """An idle, model-ready pod; the replica ticking it is killed a third of the way into its idle window. The
    other takes the pod's lease once it lapses, counts on from the dead one's streak (never from zero) and stops
    the pod once, when the window is full."""
    chaos.sim.reset()
    began = time.time()
    pod_id = chaos.sim.add_pod(volume_id=VOLUME, status="RUNNING")
    monitors = chaos.replicas(IDLE_MONITOR)

    async def mid_streak() -> tuple[int, int] | None:
        streak, pid = await streak_of(db)
        return (streak, pid) if streak >= IDLE_TICKS // 3 else None

    streak_at_kill, pid = await eventually(mid_streak, timeout=30, every=0.05)
    killed, survivor = the_one(monitors, pid)
    chaos.kill(killed)
    killed_at = time.monotonic()
    await killed.process.wait()
    last_streak, _ = await streak_of(db)

    async def taken_over() -> int | None:
        streak, pid = await streak_of(db)
        return streak if pid == survivor.process.pid else None

    first_streak = await eventually(taken_over, timeout=MONITOR_LEASE_SECONDS * 10, every=0.02)
    recovered = time.monotonic() - killed_at

    async def stopped() -> bool | None:
        return True if await recorded_actions(db, began) == {"Stop": 1} and pod_id not in billing(chaos) else None

    await eventually(stopped, timeout=IDLE_TICKS * CHECK_SECONDS * 4, every=0.05)
    stop = await db.fetchrow("SELECT trigger, ok FROM pod_actions WHERE pod_id = $1", pod_id)
    calls = billable_calls(chaos)
    lost_ledger, doubled_ledger = await ledgered(db)
    scenario = "kill -9 idle-monitor (mid-streak)"
    figures.record(scenario, "time to recover (s)", recovered, f"≤ {MONITOR_LEASE_SECONDS:g} s + slack (monitor lease)")
    figures.record(scenario, "streak at the kill → survivor's first", f"{last_streak} → {first_streak}", "n → n+1")
    figures.record(
        scenario,
        "idle stops issued / recorded",
        f"{calls['Stop']} / {(await recorded_actions(db, began))['Stop']}",
        "1 / 1",
    )
    figures.record(scenario, "ledger entries lost / doubled", f"{lost_ledger} / {doubled_ledger}", "0 / 0")

    assert last_streak >= streak_at_kill
    assert first_streak == last_streak + 1, "the survivor counts on from the dead replica's streak"
    assert (stop["trigger"], stop["ok"]) == ("idle", True)
    assert calls == {"Stop": 1}, "one stop at RunPod, by one replica"
    assert billing(chaos) == set()
    assert (lost_ledger, doubled_ledger) == (0, 0)
    assert recovered <= MONITOR_LEASE_SECONDS + SLACK_SECONDS
    await chaos.revive(killed, IDLE_MONITOR)


# ------------------------------------------------------------------------------------------ pool dispatcher


def pool_caller() -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {POOL_TOKEN}"), ("x-strata-tenant", "acme"))


def journalled(journal: Path) -> collections.Counter[str]:
    return collections.Counter(journal.read_text().split() if journal.exists() else [])


def owner_pid(provider_id: str) -> int | None:
    """The dispatcher process a local machine (a child of it) belongs to."""
    with contextlib.suppress(psutil.NoSuchProcess, ValueError):
        return psutil.Process(int(provider_id.removeprefix("local-"))).ppid()
    return None


async def test_a_dispatcher_killed_with_jobs_in_flight_leaves_every_job_terminal_once_and_its_machines_stopped(
    chaos: ChaosStack, db: asyncpg.Connection, figures: ChaosFigures, chaos_scale: ChaosScale
) -> None:
    """Jobs submitted through both replicas; one is killed while its machines run some of them. Within one pool
    lease the survivor fails the dead one's running jobs (no usage: they bill nothing), runs the queued ones,
    and stops the dead one's machines; no payload reaches a worker twice and every usage event is ledgered once."""
    jobs_total = chaos_scale.pick(12, 100)
    dispatchers = chaos.replicas(POOL_DISPATCHER)
    before = journalled(chaos.journal)
    payloads = [json.dumps({"seconds": 0.2, "n": n, "run": time.time()}).encode() for n in range(jobs_total)]
    async with channel_to(dispatchers[0]) as a, channel_to(dispatchers[1]) as b:
        stubs = (pool_pb2_grpc.PoolDispatcherStub(a), pool_pb2_grpc.PoolDispatcherStub(b))

        async def submit(n: int) -> str:
            request = pool_pb2.SubmitJobRequest(machine_type="echo")
            request.payload.data = payloads[n]
            job = await stubs[n % 2].SubmitJob(request, metadata=pool_caller(), timeout=30)
            return str(job.id)

        jobs = list(await asyncio.gather(*(submit(n) for n in range(jobs_total))))

    async def running_on_one() -> int | None:
        rows = await db.fetch(
            "SELECT m.provider_id FROM pool_jobs j JOIN pool_machines m ON m.id = j.worker_id WHERE j.state = 'running'"
        )
        pids = [owner_pid(r["provider_id"]) for r in rows]
        return next((p for p in pids if p in {d.process.pid for d in dispatchers}), None)

    pid = await eventually(running_on_one, timeout=60, every=0.01)
    killed, _ = the_one(dispatchers, pid)
    in_flight = await db.fetchval(
        "SELECT count(*) FROM pool_jobs WHERE id = ANY($1::uuid[]) AND state NOT IN ('completed', 'failed', "
        "'timed_out', 'cancelled')",
        jobs,
    )
    machines = await db.fetch("SELECT provider_id, owner FROM pool_machines WHERE provider_id LIKE 'local-%'")
    theirs = [m for m in machines if owner_pid(m["provider_id"]) == pid]
    dead_machines, owner = [int(m["provider_id"].removeprefix("local-")) for m in theirs], theirs[0]["owner"]
    chaos.kill(killed)
    killed_at = time.monotonic()
    await killed.process.wait()

    async def dead_ones_reclaimed() -> bool | None:
        jobs_left = await db.fetchval(
            "SELECT count(*) FROM pool_jobs WHERE state IN ('dispatched', 'running') AND owner = $1", owner
        )
        machines_left = await db.fetchval("SELECT count(*) FROM pool_machines WHERE owner = $1", owner)
        return True if jobs_left == 0 and machines_left == 0 else None

    await eventually(dead_ones_reclaimed, timeout=POOL_LEASE_SECONDS * 15, every=0.02)
    recovered = time.monotonic() - killed_at

    async def all_terminal() -> list[asyncpg.Record] | None:
        rows = await db.fetch("SELECT id, state, error FROM pool_jobs WHERE id = ANY($1::uuid[])", jobs)
        return rows if all(r["state"] in TERMINAL for r in rows) else None

    rows = await eventually(all_terminal, timeout=120, every=0.1)
    finished = time.monotonic() - killed_at
    states = collections.Counter(r["state"] for r in rows)
    ran = journalled(chaos.journal) - before
    twice = sum(1 for count in ran.values() if count > 1)
    usage = await db.fetch("SELECT job_id, terminal_state FROM pool_usage WHERE job_id = ANY($1::uuid[])", jobs)
    usage_ids = [str(u["job_id"]) for u in usage]

    async def usage_ledgered() -> int | None:
        landed = await usage_in_ledger(db, usage_ids)
        return landed if landed == len(usage) else None

    with contextlib.suppress(AssertionError):
        await eventually(usage_ledgered, timeout=30, every=0.1)
    landed = await usage_in_ledger(db, usage_ids)
    leftovers = [p for p in dead_machines if still_running(p)]
    scenario = f"kill -9 pool-dispatcher ({in_flight} of {jobs_total} jobs in flight)"
    figures.record(scenario, "time to recover (s)", recovered, f"≤ {POOL_LEASE_SECONDS:g} s + slack (pool lease)")
    figures.record(scenario, "time until every job is terminal (s)", finished)
    figures.record(scenario, "jobs completed / failed (killed mid-run)", f"{states['completed']} / {states['failed']}")
    figures.record(scenario, "jobs lost / run twice", f"{jobs_total - sum(states.values())} / {twice}", "0 / 0")
    figures.record(scenario, "usage events ledgered / recorded", f"{landed} / {len(usage)}", "equal")
    figures.record(scenario, "dead replica's machines still running", len(leftovers), "0")

    assert sum(states.values()) == jobs_total and set(states) <= {"completed", "failed"}, states
    assert twice == 0, "a payload reached a worker twice"
    assert {str(u["job_id"]) for u in usage} == {str(r["id"]) for r in rows if r["state"] == "completed"}, (
        "one usage event per completed job; a job failed with its replica bills nothing"
    )
    by_job = {job: payloads[n] for n, job in enumerate(jobs)}
    assert all(ran[digest(by_job[str(r["id"])])] == 1 for r in rows if r["state"] == "completed")
    assert landed == len(usage)
    assert leftovers == []
    assert recovered <= POOL_LEASE_SECONDS + SLACK_SECONDS
    await chaos.revive(killed, POOL_DISPATCHER)


async def usage_in_ledger(db: asyncpg.Connection, job_ids: list[str]) -> int:
    return int(await db.fetchval("SELECT count(*) FROM ledger_pool_usage WHERE source_id = ANY($1::text[])", job_ids))


def still_running(pid: int) -> bool:
    with contextlib.suppress(psutil.NoSuchProcess):
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    return False


def digest(payload: bytes) -> str:
    return hashlib.sha256(payload).hexdigest()


# ----------------------------------------------------------------------------------------------- metering


async def test_metering_killed_mid_page_loses_no_ledger_entry_and_doubles_none(
    chaos: ChaosStack, db: asyncpg.Connection, figures: ChaosFigures, chaos_scale: ChaosScale
) -> None:
    """Billable actions in the controller's feed; the replica ingesting it is killed with a page read and its
    landing transaction not committed (held on a lock the test takes on the ledger). The survivor takes the
    ingest lease once it lapses and reads the page again: every action lands once."""
    count = chaos_scale.pick(2_000, 20_000)
    await db.execute(
        """
        INSERT INTO pod_actions (id, pod_name, action, pod_id, gpu_id, price_per_hour, http_status, ok, trigger, at)
        SELECT gen_random_uuid(), 'ledger-chaos', CASE WHEN g % 2 = 1 THEN 'Create' ELSE 'Stop' END,
               'pod-' || ((g + 1) / 2), 'NVIDIA A100 80GB PCIe', CASE WHEN g % 2 = 1 THEN 1.5 END, 200, true,
               CASE WHEN g % 2 = 1 THEN 'wake' ELSE 'idle' END, now() + make_interval(secs => g)
        FROM generate_series(1, $1) AS g""",
        count,
    )
    meterings = chaos.replicas(METERING)
    pid = await eventually(lambda: lease_holder_pid(db, "metering:ingest"), timeout=20, every=0.05)
    killed, survivor = the_one(meterings, pid)
    async with db.transaction():
        await db.execute("LOCK TABLE ledger_pod_actions IN EXCLUSIVE MODE")

        async def landing_blocked() -> bool | None:
            waiting = await db.fetchval(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE wait_event_type = 'Lock' AND application_name LIKE 'metering%'"
            )
            return True if waiting else None

        await eventually(landing_blocked, timeout=20, every=0.02)
        position_at_kill = await db.fetchval("SELECT position FROM ledger_feeds WHERE source LIKE 'pod-controller%'")
        chaos.kill(killed)
        killed_at = time.monotonic()
        await killed.process.wait()
    head = await db.fetchval("SELECT max(position) FROM pod_actions")

    async def survivor_landed() -> bool | None:
        position = await db.fetchval("SELECT position FROM ledger_feeds WHERE source LIKE 'pod-controller%'")
        holder = await lease_holder_pid(db, "metering:ingest")
        return True if holder == survivor.process.pid and position > position_at_kill else None

    await eventually(survivor_landed, timeout=LEDGER_LEASE_SECONDS * 15, every=0.02)
    recovered = time.monotonic() - killed_at
    lost, doubled = await ledgered(db)
    caught_up = time.monotonic() - killed_at
    position = await db.fetchval("SELECT position FROM ledger_feeds WHERE source LIKE 'pod-controller%'")
    scenario = f"kill -9 metering (mid-page, {count} actions)"
    figures.record(scenario, "time to recover (s)", recovered, f"≤ {LEDGER_LEASE_SECONDS:g} s + slack (ingest lease)")
    figures.record(scenario, "time until caught up (s)", caught_up)
    figures.record(scenario, "ledger entries lost / doubled", f"{lost} / {doubled}", "0 / 0")

    assert position == head
    assert (lost, doubled) == (0, 0)
    assert recovered <= LEDGER_LEASE_SECONDS + SLACK_SECONDS
    await chaos.revive(killed, METERING)
