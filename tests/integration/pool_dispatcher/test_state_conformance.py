"""Every pool SQL block that writes a job or a machine moves it only as the state tables allow, on real Postgres.

The tables are policy/pool/jobs.py (`JOB_TRANSITIONS`) and policy/pool/machines.py (`MACHINE_TRANSITIONS`). The
blocks are found by reading every `.sql` file of the pool dispatcher: any block whose statement (comments aside)
inserts, updates or deletes `pool_jobs` or `pool_machines` must have a scenario here, or
`test_every_block_that_writes_a_job_or_a_machine_has_a_scenario` fails (a new block, or one renamed or moved, is
never left unchecked).

A scenario runs its block from every consistent world (below: a job in each state, a machine in each state, the
machine holding the job where the pool's invariants put it there, and another job queued for the same tenant and
type or not), with each variant of its parameters, in a transaction rolled back afterwards. A test-only trigger
logs each row's state change (an insert is a change from no row, a machine row's delete is `stopped`); each
logged change must be a row of the table under one of the events the scenario declares for that variant. The
reverse also holds: every row of both tables is made by some block (the tables are no wider than the SQL).

The same scenarios run on the in-memory twin of the jobs and machines repositories (tests/fixtures/pool_twin, through
twin_blocks.py) for every block of jobs.sql and machines.sql: its changes must be table rows too, and, against
Postgres, the very changes the SQL makes from the same world with the same arguments.

Preconditions a block's callers keep, where its statement does not check them, are written beside its scenario:
boot_failed is called for a starting machine only, complete never for a machine a shutdown retired.
"""

from __future__ import annotations

import itertools
import re
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field

import asyncpg
import pytest

from tests.integration.pool_dispatcher.pool_sql import POOL_SQL, owned, pool_blocks, statement, submit_args
from tests.integration.pool_dispatcher.twin_blocks import CALLS, run_on_twin
from thermostat.policy.pool.jobs import JOB_TRANSITIONS, TERMINAL_STATES, JobEvent, JobState
from thermostat.policy.pool.machines import MACHINE_TRANSITIONS, MachineEvent, MachineState
from thermostat.store.sql import load_sql

_WRITES = re.compile(r"\b(UPDATE|INSERT\s+INTO|DELETE\s+FROM)\s+pool_(jobs|machines)\b", re.IGNORECASE)
BLOCKS = pool_blocks()
WRITERS = sorted(name for name, sql in BLOCKS.items() if _WRITES.search(statement(sql)))
TWIN_BLOCKS = sorted(CALLS)

JE, ME_ = JobEvent, MachineEvent
ME = ("me", 3)
OLD_TERM = ("me", 2)
LAPSED = ("gone", 7)
JOB = uuid.UUID(int=1)
MACHINE = uuid.UUID(int=2)
NEXT = uuid.UUID(int=3)
NEW = uuid.UUID(int=4)
NEW_2 = uuid.UUID(int=5)
NEW_MACHINE = uuid.UUID(int=6)
CANCELLED_RUNNING = "cancelled-running"  # cancelled while running: the owner is kept for the usage record

_LOG = """
CREATE TABLE conformance_log (seq bigserial, kind text NOT NULL, id uuid NOT NULL, before text, after text);
CREATE FUNCTION conformance_log() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO conformance_log (kind, id, before, after) VALUES (TG_ARGV[0], NEW.id, NULL, NEW.state);
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO conformance_log (kind, id, before, after) VALUES (TG_ARGV[0], OLD.id, OLD.state, 'stopped');
    ELSIF OLD.state IS DISTINCT FROM NEW.state THEN
        INSERT INTO conformance_log (kind, id, before, after) VALUES (TG_ARGV[0], NEW.id, OLD.state, NEW.state);
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER conformance_jobs AFTER INSERT OR UPDATE OR DELETE ON pool_jobs
    FOR EACH ROW EXECUTE FUNCTION conformance_log('job');
CREATE TRIGGER conformance_machines AFTER INSERT OR UPDATE OR DELETE ON pool_machines
    FOR EACH ROW EXECUTE FUNCTION conformance_log('machine');
"""


@dataclass(frozen=True, slots=True)
class World:
    """The rows a block meets: the job (JOB) and machine (MACHINE) it is called for, and maybe a job queued next."""

    job: str | None  # a JobState value, CANCELLED_RUNNING, or None (no row)
    machine: str | None  # a stored MachineState value, or None (no row)
    holds: bool  # the machine's job_id is the job
    queued_next: bool
    owner: tuple[str, int] = ME
    catalogue: tuple[str, ...] | None = None  # the stored catalogue's type names (None: none stored)
    released: bool = False  # the machine was released by a deploy (migration 0019), waiting for adoption
    lease: bool = False  # the owner's instance lease is held and current
    yielding: bool = False  # the machine is marked to give its slot to a tenant waiting at the fleet cap

    def __str__(self) -> str:
        holding = "holding it" if self.holds else "not holding it"
        return (
            f"job {self.job or '(no row)'}, machine {self.machine or '(no row)'} {holding}, "
            f"{'a job queued next' if self.queued_next else 'nothing queued'}, owner {self.owner}"
        )


_LIVE = {"dispatched", "running"}


def consistent_worlds(
    *, owner: tuple[str, int] = ME, machines: tuple[str | None, ...] = ("starting", "warm", "busy", "stopping", None)
) -> Iterator[World]:
    """Every world the pool's invariants allow: a dispatched job is on a starting or busy machine holding it (or
    a stopping one a shutdown retired), a running job on a busy (or stopping) one; a job cancelled before it was
    sent may still be held by its machine; a warm machine holds no job, a busy one always holds one."""
    jobs = [None, *(s.value for s in JobState), CANCELLED_RUNNING]
    for job, machine, holds, queued_next in itertools.product(jobs, machines, (False, True), (False, True)):
        if holds and (job is None or machine is None):
            continue
        if job == "dispatched" and not (holds and machine in ("starting", "busy", "stopping")):
            continue
        if job in ("running", CANCELLED_RUNNING) and not (holds and machine in ("busy", "stopping")):
            continue
        if job == "cancelled" and holds and machine not in ("starting", "busy"):
            continue
        if job in ("queued", "completed", "failed", "timed_out") and holds:
            continue
        if machine == "busy" and not holds:
            continue
        if machine == "warm" and holds:
            continue
        yield World(job=job, machine=machine, holds=holds, queued_next=queued_next, owner=owner)


async def seed(conn: asyncpg.Connection, world: World) -> None:
    instance, term = world.owner
    if world.machine is not None:
        await conn.execute(
            "INSERT INTO pool_machines (id, tenant_id, machine_type, image, backend, token, state, job_id, owner,"
            " owner_term, cool_down_seconds, last_active_at, yield_to, released_at)"
            " VALUES ($1, 't', 'cpu', 'img', 'local', 'tok', $2, $3, $4, $5, 60, now(), $6,"
            " CASE WHEN $7 THEN now() END)",
            MACHINE,
            world.machine,
            JOB if world.holds else None,
            instance,
            term,
            "waiting-tenant" if world.yielding else None,
            world.released,
        )
    if world.job is not None:
        state = "cancelled" if world.job == CANCELLED_RUNNING else world.job
        owned = world.job in _LIVE or world.job == CANCELLED_RUNNING
        started = world.job not in ("queued", "dispatched", "cancelled")
        await conn.execute(
            "INSERT INTO pool_jobs (id, tenant_id, machine_type, state, timeout_seconds, payload, worker_id, owner,"
            " owner_term, started_at) VALUES ($1, 't', 'cpu', $2, 30, 'x', $3, $4, $5, CASE WHEN $6 THEN now() END)",
            JOB,
            state,
            None if world.job == "queued" else MACHINE,
            instance if owned else None,
            term if owned else None,
            started,
        )
    if world.queued_next:
        await conn.execute(
            "INSERT INTO pool_jobs (id, tenant_id, machine_type, state, timeout_seconds, payload)"
            " VALUES ($1, 't', 'cpu', 'queued', 30, 'y')",
            NEXT,
        )
    if world.catalogue is not None:
        types = "[" + ",".join(f'{{"name": "{name}"}}' for name in world.catalogue) + "]"
        await conn.execute("INSERT INTO pool_catalogue (id, version, types) VALUES (1, 1, $1::jsonb)", types)
    if world.lease:
        await conn.execute(
            "INSERT INTO leases (name, holder, term, acquired_at, renewed_at, expires_at)"
            " VALUES ('pool-instance:' || $1::text, $1, $2, now(), now(), now() + interval '1 hour')",
            instance,
            term,
        )


@dataclass(frozen=True, slots=True)
class Run:
    """One call of a block: the world it meets, its parameters by name, and the events the call may carry out."""

    world: World
    args: dict[str, object]
    jobs: frozenset[JobEvent] = frozenset()
    machines: frozenset[MachineEvent] = frozenset()
    label: str = ""
    prunes: bool = False  # the call may delete a finished, unowned job (retention): the end of its row, no transition


@dataclass(frozen=True, slots=True)
class Change:
    kind: str
    before: str | None
    after: str


@dataclass
class Outcome:
    """What a block's runs did: the table rows they made, and any change no declared event allows."""

    made: set[tuple[str, object, object]] = field(default_factory=set)
    illegal: list[str] = field(default_factory=list)


Caller = Callable[[str, Run], Awaitable[list["Change"]]]


async def call(conn: asyncpg.Connection, block: str, run: Run) -> list[Change]:
    transaction = conn.transaction()
    await transaction.start()
    try:
        await seed(conn, run.world)
        await conn.execute("DELETE FROM conformance_log")
        await conn.fetch(*BLOCKS.bind(block, **run.args))
        rows = await conn.fetch("SELECT kind, before, after FROM conformance_log ORDER BY seq")
    finally:
        await transaction.rollback()
    return [Change(r["kind"], r["before"], r["after"]) for r in rows]


async def call_twin(block: str, run: Run) -> list[Change]:
    changes = await run_on_twin(block, run.world, run.args, job=JOB, machine=MACHINE, next_job=NEXT)
    return [Change(*change) for change in changes]


def pruned_rightly(run: Run, change: Change) -> bool:
    """A job row retention may delete: finished and unowned (a job cancelled while running keeps its owner until its
    machine answers, and its usage is still to be recorded)."""
    finished = change.before is not None and JobState(change.before) in TERMINAL_STATES
    return run.prunes and change.after == "stopped" and finished and run.world.job != CANCELLED_RUNNING


def judge(block: str, run: Run, changes: list[Change], outcome: Outcome) -> None:
    for change in changes:
        if change.kind == "job" and pruned_rightly(run, change):
            outcome.made.add(("job", JobState(change.before or ""), "pruned"))
            continue
        if change.kind == "job":
            before = None if change.before is None else JobState(change.before)
            rows = [(e, JOB_TRANSITIONS.get((before, e))) for e in run.jobs]
        else:
            before = None if change.before is None else MachineState(change.before)
            rows = [(e, MACHINE_TRANSITIONS.get((before, e))) for e in run.machines]
        matched = [e for e, after in rows if after is not None and after.value == change.after]
        if not matched:
            declared = sorted(e.value for e in (run.jobs if change.kind == "job" else run.machines))
            outcome.illegal.append(
                f"{block}{run.label} from [{run.world}]: {change.kind} {change.before or '(no row)'} → {change.after}"
                f" is no table row for its events {declared}"
            )
        outcome.made.update((change.kind, before, e) for e in matched)


async def conform(store: Caller, block: str) -> Outcome:
    outcome = Outcome()
    for run in SCENARIOS[block]():
        judge(block, run, await store(block, run), outcome)
    return outcome


# The scenarios, one per block: its worlds, its parameter variants and the events each variant may carry out.

_OUTCOMES = {"completed": JE.REPORTED_COMPLETED, "failed": JE.REPORTED_FAILED, "timed_out": JE.REPORTED_TIMED_OUT}


def _submit() -> Iterator[Run]:
    for world, send in itertools.product(consistent_worlds(), (False, True)):
        args = submit_args(job_id=NEW, send_now=send, owner=ME)
        claimed = JE.SUBMIT_AND_SEND if send else JE.SUBMIT_TO_WARM
        yield Run(world, args, frozenset({JE.SUBMIT, claimed}), frozenset({ME_.CLAIM}), f" (send now: {send})")


def _submit_queued() -> Iterator[Run]:
    for world in consistent_worlds():
        none = [None, None]
        args = {
            "tenant_id": "t",
            "machine_type": "cpu",
            "job_ids": [NEW, NEW_2],
            "priorities": [0, 5],
            "session_ids": none,
            "timeouts": [30.0, 30.0],
            "payloads": [b"a", b"b"],
            "traceparents": none,
            "tracestates": none,
            "done_channels": none,
            "count_queued": 10,
        }
        yield Run(world, args, frozenset({JE.SUBMIT}))


def _record_refusal() -> Iterator[Run]:
    for world in consistent_worlds():
        args = {
            "job_id": NEW,
            "tenant_id": "t",
            "machine_type": "cpu",
            "priority": 0,
            "session_id": None,
            "timeout_seconds": 30.0,
            "error": "over budget",
        }
        yield Run(world, args, frozenset({JE.REFUSE}))


def _complete() -> Iterator[Run]:
    # Called by the task running the job, never for a machine a shutdown retired under it: close() cancels the
    # job runners before it retires busy machines. The statement does not check the machine's state (from
    # stopping it would make the machine warm or busy again), so those worlds are left out.
    # (retire, take the next job, send it now): a retired machine takes nothing
    # A machine marked to give its slot up (fair share) is retired and takes nothing, whatever the caller asked.
    variants = [(True, False, False), (False, True, True), (False, True, False), (False, False, False)]
    machines = ("starting", "warm", "busy", None)
    for world, (state, event), (retire, take, send), yielding in itertools.product(
        consistent_worlds(machines=machines), _OUTCOMES.items(), variants, (False, True)
    ):
        world = World(world.job, world.machine, world.holds, world.queued_next, world.owner, yielding=yielding)
        result, error = (b"r", None) if state == "completed" else (None, "it broke")
        args = {
            "job_id": JOB,
            "machine_id": MACHINE,
            "state": state,
            "result": result,
            "error": error,
            "duration_seconds": 1.0,
            "retire": retire,
            "take_next": take,
            "tenant_id": "t",
            "machine_type": "cpu",
            "send_next": send,
            "notified_result_bytes": 1000,
            "channel": "own",
            **owned(ME),
        }
        jobs = {event} | ({JE.CLAIM_AND_SEND if send else JE.CLAIM} if take and not yielding else set())
        machines = {ME_.RETIRE} if retire or yielding else {ME_.FREE}
        label = f" ({state}, retire {retire}, take next {take}, send {send}, yielding {yielding})"
        yield Run(world, args, frozenset(jobs), frozenset(machines), label)


def _take_next() -> Iterator[Run]:
    for world, image in itertools.product(consistent_worlds(), ("img", "new-img")):
        args = {"machine_id": MACHINE, "image": image, **owned(ME)}
        yield Run(world, args, frozenset({JE.CLAIM}), frozenset({ME_.CLAIM}), f" (image {image})")


def _mark_sent() -> Iterator[Run]:
    for world in consistent_worlds():
        args = {"job_id": JOB, "machine_id": MACHINE, **owned(ME)}
        yield Run(world, args, frozenset({JE.MARK_SENT}), frozenset({ME_.FREE}))


def _requeue_unsent() -> Iterator[Run]:
    for world, marked in itertools.product(consistent_worlds(), (False, True)):
        args = {"job_id": JOB, "machine_id": MACHINE, "marked": marked, **owned(ME)}
        yield Run(world, args, frozenset({JE.REQUEUE}), frozenset({ME_.FREE}), f" (marked {marked})")


def _hand_back() -> Iterator[Run]:
    for world in consistent_worlds():
        args = {
            "job_id": JOB,
            "machine_id": MACHINE,
            "reason": "Connection refused",
            "last_error": "worker unreachable",
            **owned(ME),
        }
        yield Run(world, args, frozenset({JE.HAND_BACK}), frozenset({ME_.RETIRE}))


def _abandon_running() -> Iterator[Run]:
    for world in consistent_worlds():
        args = {"job_id": JOB, "machine_id": MACHINE, "reason": "no task drives it", **owned(ME)}
        yield Run(world, args, frozenset({JE.ABANDON}), frozenset({ME_.RETIRE}))


def _insert_machine() -> Iterator[Run]:
    for world, assign in itertools.product(consistent_worlds(), (False, True)):
        args = {
            "machine_id": NEW_MACHINE,
            "tenant_id": "t",
            "machine_type": "cpu",
            "image": "img",
            "backend": "local",
            "token": "tok",
            "assign_job": assign,
            "cool_down_seconds": 60.0,
            **owned(ME),
        }
        yield Run(world, args, frozenset({JE.CLAIM}), frozenset({ME_.PLACE}), f" (assign {assign})")


def _record_started() -> Iterator[Run]:
    for world in consistent_worlds():
        args = {"machine_id": MACHINE, "provider_id": "provider-1", "endpoint": "http://m", "region": "region"}
        yield Run(world, {**args, **owned(ME)})


def _machine_ready() -> Iterator[Run]:
    for world in consistent_worlds():
        args = {"machine_id": MACHINE, **owned(ME)}
        yield Run(world, args, machines=frozenset({ME_.BOOTED, ME_.BOOTED_WITH_JOB}))


def _boot_failed() -> Iterator[Run]:
    # Called only for a starting machine of this process (a failed start or boot, or an unbooted one the
    # reconcile gives up on): the statement deletes the machine row whatever its state.
    for world, catalogue in itertools.product(consistent_worlds(machines=("starting",)), (None, ("cpu",), ("gpu",))):
        removed = catalogue is not None and "cpu" not in catalogue
        world = World(world.job, world.machine, world.holds, world.queued_next, world.owner, catalogue)
        jobs = frozenset({JE.TYPE_REMOVED if removed else JE.REQUEUE})
        args = {"machine_id": MACHINE, "reason": "boot failed", **owned(ME)}
        yield Run(world, args, jobs, frozenset({ME_.BOOT_FAILED}), f" (catalogue {catalogue})")


def _retire() -> Iterator[Run]:
    for world, states in itertools.product(
        consistent_worlds(), (["warm"], ["warm", "stopping"], ["starting", "warm", "busy", "stopping"])
    ):
        args = {"machine_id": MACHINE, "reason": "retired", "states": states, **owned(ME)}
        yield Run(world, args, machines=frozenset({ME_.RETIRE}), label=f" ({states})")


def _yield_machine() -> Iterator[Run]:
    # Any owner's machine: the planning process takes a warm one over (as reclaim does) and only marks a busy one.
    for world, (to_tenant, mark_busy) in itertools.product(
        itertools.chain(consistent_worlds(), consistent_worlds(owner=LAPSED)), ((None, False), ("waiting", True))
    ):
        args = {
            "machine_id": MACHINE,
            "to_tenant": to_tenant,
            "mark_busy": mark_busy,
            "reason": "fair share",
            **owned(ME),
        }
        yield Run(world, args, machines=frozenset({ME_.RETIRE}), label=f" (to {to_tenant}, mark busy {mark_busy})")


def _unyield() -> Iterator[Run]:
    for world, machine_ids in itertools.product(consistent_worlds(), ([MACHINE], None)):
        world = World(world.job, world.machine, world.holds, world.queued_next, world.owner, yielding=True)
        yield Run(world, {"machine_ids": machine_ids}, label=f" ({machine_ids})")


def _forget_machine() -> Iterator[Run]:
    for world in consistent_worlds():
        yield Run(world, {"machine_id": MACHINE, **owned(ME)}, machines=frozenset({ME_.STOPPED}))


def _record_misses() -> Iterator[Run]:
    for world in consistent_worlds():
        yield Run(world, {"machine_id": MACHINE, "health_misses": 2, **owned(ME)})


def _cancel() -> Iterator[Run]:
    for world in consistent_worlds():
        yield Run(world, {"job_id": JOB, "tenant_id": "t", "build_id": "build-1"}, frozenset({JE.CANCEL}))


def _watch_job() -> Iterator[Run]:
    for world in consistent_worlds():
        yield Run(world, {"job_id": JOB, "tenant_id": "t"})


def _replace_catalogue() -> Iterator[Run]:
    for world, names in itertools.product(consistent_worlds(), (["cpu"], ["gpu"])):
        types = "[" + ",".join(f'{{"name": "{n}"}}' for n in names) + "]"
        yield Run(world, {"types": types, "names": names}, frozenset({JE.TYPE_REMOVED}), label=f" (keeps {names})")


def _reclaim() -> Iterator[Run]:
    for world, lease in itertools.product(consistent_worlds(owner=LAPSED), (False, True)):
        world = World(world.job, world.machine, world.holds, world.queued_next, world.owner, lease=lease)
        args = {"lapsed_owner": LAPSED[0], "lapsed_term": LAPSED[1], **owned(ME)}
        yield Run(world, args, frozenset({JE.OWNER_LOST}), frozenset({ME_.RETIRE}), f" (lease held {lease})")


def _recover_own() -> Iterator[Run]:
    for owner, any_term in itertools.product((ME, OLD_TERM), (False, True)):
        for world in consistent_worlds(owner=owner):
            label = f" (rows of term {owner[1]}, any term {any_term})"
            args = {"any_term": any_term, **owned(ME)}
            yield Run(world, args, frozenset({JE.OWNER_LOST}), frozenset({ME_.RETIRE}), label)


def _prune_jobs() -> Iterator[Run]:
    # the fence is the retention lease's; the world's instance lease row stands in for it (name, holder, term)
    for world, lease in itertools.product(consistent_worlds(), (False, True)):
        world = World(world.job, world.machine, world.holds, world.queued_next, world.owner, lease=lease)
        args = {"keys": [JOB, NEXT], "lease_name": f"pool-instance:{ME[0]}", "lease_holder": ME[0], "lease_term": ME[1]}
        yield Run(world, args, label=f" (fence held {lease})", prunes=True)


def _release_own() -> Iterator[Run]:
    for world in consistent_worlds():
        args = {"running_error": "the dispatcher shut down and its grace ran out", **owned(ME)}
        yield Run(world, args, frozenset({JE.REQUEUE, JE.OWNER_LOST}), frozenset({ME_.FREE, ME_.RETIRE}))


def _adopt_released() -> Iterator[Run]:
    """Called for a released machine (released_at set); another's adoption first leaves nothing to take."""
    for released, healthy in itertools.product((False, True), (False, True)):
        for world in consistent_worlds(owner=LAPSED):
            world = World(world.job, world.machine, world.holds, world.queued_next, world.owner, released=released)
            args = {"machine_id": MACHINE, "healthy": healthy, "owner": "me", "owner_term": 3}
            yield Run(world, args, machines=frozenset({ME_.RETIRE}), label=f" ({healthy})")


SCENARIOS: dict[str, Callable[[], Iterator[Run]]] = {
    "submit": _submit,
    "submit_queued": _submit_queued,
    "record_refusal": _record_refusal,
    "complete": _complete,
    "take_next": _take_next,
    "mark_sent": _mark_sent,
    "requeue_unsent": _requeue_unsent,
    "hand_back": _hand_back,
    "abandon_running": _abandon_running,
    "insert_machine": _insert_machine,
    "record_started": _record_started,
    "machine_ready": _machine_ready,
    "boot_failed": _boot_failed,
    "retire": _retire,
    "yield_machine": _yield_machine,
    "unyield": _unyield,
    "forget_machine": _forget_machine,
    "record_misses": _record_misses,
    "cancel": _cancel,
    "watch_job": _watch_job,
    "replace_catalogue": _replace_catalogue,
    "reclaim": _reclaim,
    "recover_own": _recover_own,
    "prune_jobs": _prune_jobs,
    "release_own": _release_own,
    "adopt_released": _adopt_released,
}


@pytest.fixture
async def logged(db_pool: asyncpg.Pool) -> asyncpg.pool.PoolConnectionProxy:
    async with db_pool.acquire() as conn:
        await conn.execute(_LOG)
        yield conn


@pytest.fixture
async def sql(logged: asyncpg.Connection) -> Caller:
    """The blocks on Postgres."""

    async def on_postgres(block: str, run: Run) -> list[Change]:
        return await call(logged, block, run)

    return on_postgres


@pytest.fixture
def memory() -> Caller:
    """The blocks on the in-memory twin (jobs.sql and machines.sql only)."""
    return call_twin


@pytest.fixture
def store(request: pytest.FixtureRequest) -> Caller:
    """The store a parametrized test runs the blocks on (`sql` or `memory`)."""
    caller: Caller = request.getfixturevalue(request.param)
    return caller


# The twin stands in for jobs.sql and machines.sql only; a store the fixtures cannot see is marked by hand (pg)
BLOCKS_BY_STORE = [pytest.param("sql", block, id=f"sql-{block}", marks=pytest.mark.pg) for block in WRITERS] + [
    pytest.param("memory", block, id=f"memory-{block}") for block in TWIN_BLOCKS
]


def test_every_block_that_writes_a_job_or_a_machine_has_a_scenario() -> None:
    """A block that inserts, updates or deletes pool_jobs or pool_machines is checked here (and nothing else is)."""
    assert "complete" in WRITERS and "reclaim" in WRITERS  # the scan reads the files it should
    assert sorted(SCENARIOS) == WRITERS


def test_the_twin_runs_every_block_of_the_jobs_and_machines_repositories() -> None:
    """Each block of jobs.sql and machines.sql that writes a job or a machine has a twin method (and only those)."""
    files = {name for path in ("jobs.sql", "machines.sql") for name in load_sql(POOL_SQL / "repository" / path)}
    assert sorted(files & set(WRITERS)) == TWIN_BLOCKS


@pytest.mark.parametrize(("store", "block"), BLOCKS_BY_STORE, indirect=["store"])
async def test_a_block_makes_only_transitions_the_tables_allow(store: Caller, block: str) -> None:
    """From every consistent world, each state change the block makes is a table row under one of its events."""
    outcome = await conform(store, block)
    assert outcome.illegal == [], "\n".join(outcome.illegal[:20])


async def test_retention_deletes_each_finished_state_and_nothing_else(sql: Caller) -> None:
    """prune_jobs removes a completed, failed, timed-out or cancelled unowned job under its fence, and only those."""
    outcome = await conform(sql, "prune_jobs")
    assert outcome.illegal == []
    assert {before for kind, before, event in outcome.made if event == "pruned"} == set(TERMINAL_STATES)


async def test_every_table_row_is_made_by_some_block(sql: Caller) -> None:
    """The tables are no wider than the SQL: each (state, event) row is a change some block made."""
    made: set[tuple[str, object, object]] = set()
    for block in SCENARIOS:
        made |= (await conform(sql, block)).made
    rows = {("job", s, e) for s, e in JOB_TRANSITIONS} | {("machine", s, e) for s, e in MACHINE_TRANSITIONS}
    assert sorted(map(str, rows - made)) == []


async def test_the_twin_makes_every_table_row_the_sql_of_its_blocks_makes(sql: Caller) -> None:
    """The twin is no narrower than the SQL it stands in for: each row jobs.sql and machines.sql make, it makes."""
    on_postgres: set[tuple[str, object, object]] = set()
    on_twin: set[tuple[str, object, object]] = set()
    for block in TWIN_BLOCKS:
        on_postgres |= (await conform(sql, block)).made
        on_twin |= (await conform(call_twin, block)).made
    assert sorted(map(str, on_postgres - on_twin)) == []


@pytest.mark.parametrize("block", TWIN_BLOCKS)
async def test_the_twin_makes_the_changes_the_sql_makes(sql: Caller, block: str) -> None:
    """From every world of the block's scenarios, with each variant of its arguments, the twin changes the same
    rows from the same states to the same states as the SQL."""
    differ = []
    for run in SCENARIOS[block]():
        on_postgres, on_twin = sorted(map(str, await sql(block, run))), sorted(map(str, await call_twin(block, run)))
        if on_postgres != on_twin:
            differ.append(f"{block}{run.label} from [{run.world}]: SQL {on_postgres}, twin {on_twin}")
    assert differ == [], "\n".join(differ[:20])
