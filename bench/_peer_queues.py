"""The queues bench/peers.py measures the pool against, pgqueuer and procrastinate, as their users run them.

Each peer is a `Peer`: it installs its schema in a database of its own, enqueues one job or a batch, sees whether a
job is not finished yet, and runs a worker process (`--peer-worker NAME`, its database
in PEER_DSN, where to write what it ran in PEER_OUT; `cli()`, imported rather than run as __main__, as procrastinate
wants its app). A job is trivial, as the pool's echo: the worker notes the
job's number and the wall-clock time it started, and the enqueue time the job carries; at SIGTERM it stops as
its library stops (in-flight jobs finish) and writes its notes, from which peers.py checks that every job ran
exactly once and reads enqueue → start.

Defaults throughout (pgqueuer: a dequeue batch of 10, its buffered status writes; procrastinate: one job at a
time a worker, LISTEN/NOTIFY on), the versions pinned in bench/requirements-peers.txt: the bench measures what
a user who picks one of them gets.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg

ENTRYPOINT = "echo"
ENQUEUE_CONNECTIONS = 16
"""Each peer's enqueuer pool: half the 32 callers, since both peers and the pool share one server's 100 connections."""


def job_body(n: int, enqueued: float) -> bytes:
    return json.dumps({"n": n, "t": enqueued}).encode()


class Notes:
    """What one worker process ran: (job number, enqueued at, started at) in wall-clock seconds."""

    def __init__(self) -> None:
        self.ran: list[tuple[int, float, float]] = []

    def note(self, n: int, enqueued: float) -> None:
        self.ran.append((n, enqueued, time.time()))

    def write(self, path: Path) -> None:
        path.write_text(json.dumps(self.ran), encoding="utf-8")


@dataclass(frozen=True, slots=True, kw_only=True)
class Peer:
    """One queue library: how bench/peers.py installs it, feeds it and sees it drain."""

    name: str
    install: Callable[[str], Awaitable[None]]
    connect: Callable[[str], Awaitable[Any]]  # -> an enqueuer: a handle `enqueue` and `enqueue_batch` take
    enqueue: Callable[[Any, int, float], Awaitable[None]]
    enqueue_batch: Callable[[Any, range, float], Awaitable[None]]
    close: Callable[[Any], Awaitable[None]]
    pending_sql: str  # whether a job is not finished yet


# pgqueuer ---------------------------------------------------------------------------------------------------


async def _pgq_install(dsn: str) -> None:
    from pgqueuer.db import AsyncpgDriver
    from pgqueuer.queries import Queries

    connection = await asyncpg.connect(dsn)
    try:
        await Queries(AsyncpgDriver(connection)).install()
    finally:
        await connection.close()


async def _pgq_connect(dsn: str) -> Any:
    from pgqueuer.db import AsyncpgPoolDriver
    from pgqueuer.queries import Queries

    pool = await asyncpg.create_pool(dsn, min_size=4, max_size=ENQUEUE_CONNECTIONS)
    return Queries(AsyncpgPoolDriver(pool)), pool


async def _pgq_enqueue(handle: Any, n: int, enqueued: float) -> None:
    await handle[0].enqueue(ENTRYPOINT, job_body(n, enqueued))


async def _pgq_enqueue_batch(handle: Any, numbers: range, enqueued: float) -> None:
    await handle[0].enqueue([ENTRYPOINT] * len(numbers), [job_body(n, enqueued) for n in numbers], [0] * len(numbers))


async def _pgq_close(handle: Any) -> None:
    await handle[1].close()


async def _pgq_worker(dsn: str, notes: Notes) -> None:
    from pgqueuer.db import AsyncpgDriver
    from pgqueuer.models import Job
    from pgqueuer.qm import QueueManager
    from pgqueuer.queries import Queries

    connection = await asyncpg.connect(dsn)
    manager = QueueManager(Queries(AsyncpgDriver(connection)))

    @manager.entrypoint(ENTRYPOINT)
    async def echo(job: Job) -> None:
        body = json.loads(job.payload or b"{}")
        notes.note(body["n"], body["t"])

    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, manager.shutdown.set)
    print("ready", flush=True)
    await manager.run()
    await connection.close()


PGQUEUER = Peer(
    name="pgqueuer",
    install=_pgq_install,
    connect=_pgq_connect,
    enqueue=_pgq_enqueue,
    enqueue_batch=_pgq_enqueue_batch,
    close=_pgq_close,
    pending_sql="SELECT EXISTS (SELECT 1 FROM pgqueuer)",  # a finished job's row leaves the queue table
)

# procrastinate ----------------------------------------------------------------------------------------------

_NOTES = Notes()


def _procrastinate_app(dsn: str, *, connections: int = 4) -> Any:
    """The app over a psycopg pool of up to `connections` (psycopg's default 4 for a worker; for the enqueuer
    ENQUEUE_CONNECTIONS, as pgqueuer's asyncpg pool here)."""
    import procrastinate

    connector = procrastinate.PsycopgConnector(conninfo=dsn, min_size=min(4, connections), max_size=connections)
    app = procrastinate.App(connector=connector)

    @app.task(name=ENTRYPOINT)
    async def echo(n: int, t: float) -> None:
        _NOTES.note(n, t)

    return app


async def _pcr_install(dsn: str) -> None:
    app = _procrastinate_app(dsn)
    async with app.open_async():
        await app.schema_manager.apply_schema_async()


async def _pcr_connect(dsn: str) -> Any:
    app = _procrastinate_app(dsn, connections=ENQUEUE_CONNECTIONS)
    await app.open_async()
    return app


async def _pcr_enqueue(app: Any, n: int, enqueued: float) -> None:
    await app.tasks[ENTRYPOINT].defer_async(n=n, t=enqueued)


async def _pcr_enqueue_batch(app: Any, numbers: range, enqueued: float) -> None:
    await app.tasks[ENTRYPOINT].batch_defer_async(*({"n": n, "t": enqueued} for n in numbers))


async def _pcr_close(app: Any) -> None:
    await app.close_async()


async def _pcr_worker(dsn: str, notes: Notes) -> None:
    app = _procrastinate_app(dsn)
    async with app.open_async():
        print("ready", flush=True)
        await app.run_worker_async(install_signal_handlers=True)  # SIGTERM: a graceful stop


PROCRASTINATE = Peer(
    name="procrastinate",
    install=_pcr_install,
    connect=_pcr_connect,
    enqueue=_pcr_enqueue,
    enqueue_batch=_pcr_enqueue_batch,
    close=_pcr_close,
    pending_sql="SELECT EXISTS (SELECT 1 FROM procrastinate_jobs WHERE status IN ('todo', 'doing'))",
)

PEERS = {peer.name: peer for peer in (PGQUEUER, PROCRASTINATE)}
WORKERS = {PGQUEUER.name: _pgq_worker, PROCRASTINATE.name: _pcr_worker}


def worker_main(name: str) -> None:
    notes = _NOTES
    try:
        import uvloop

        uvloop.run(WORKERS[name](os.environ["PEER_DSN"], notes))
    finally:
        notes.write(Path(os.environ["PEER_OUT"]))


def cli() -> None:
    parser = argparse.ArgumentParser(description="a peer queue's worker process (bench/peers.py starts it)")
    parser.add_argument("--peer-worker", choices=sorted(WORKERS), required=True)
    worker_main(parser.parse_args().peer_worker)
