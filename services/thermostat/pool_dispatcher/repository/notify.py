"""Notifications of the pool: the job-done channels and the LISTEN connection a dispatcher process holds.

NOTIFY is a hint, never a delivery: every wait re-reads its job anyway (engine/waits.py).
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Callable, Mapping

import asyncpg
from asyncpg.pool import PoolConnectionProxy

JOBS_DONE = "pool_jobs_done"
"""Every process's channel: a job watched by a WaitJob, or failed or cancelled outside its runner, ended."""

CATALOGUE = "pool_catalogue"
"""Every process's channel: the stored catalogue has a new version."""

RELEASED = "pool_machines_released"
"""Every process's channel: a dispatcher shutting down for a deploy released its warm machines (payload: its id)."""


def job_done_channel(instance: str) -> str:
    """The channel of one instance's sync waits (a completion elsewhere notifies only the waiting process). Hashed:
    an instance id may be longer than a channel name (63 bytes) and hold any character."""
    return f"{JOBS_DONE}_{hashlib.blake2b(instance.encode(), digest_size=8).hexdigest()}"


def parse_job_done(payload: str) -> tuple[str, bytes | None]:
    """A job-done notification (either channel): the job id, and the result when it announces a completion with it."""
    job_id, _, announced = payload.partition(" ")
    state, _, encoded = announced.partition(" ")
    if state != "completed":
        return job_id, None
    return job_id, base64.b64decode(encoded)  # PostgreSQL breaks base64 into lines: the decoder skips them


class Subscription:
    """A LISTEN on a connection of its own, held until closed; NOTIFY is a hint (callers re-read anyway)."""

    def __init__(
        self, pool: asyncpg.Pool, connection: PoolConnectionProxy, handlers: Mapping[str, Callable[..., None]]
    ) -> None:
        self._pool = pool
        self._connection = connection
        self._handlers = dict(handlers)

    def is_closed(self) -> bool:
        try:
            return self._connection.is_closed()
        except asyncpg.InterfaceError:  # the pool took the connection back when it was lost (a store outage)
            return True

    async def close(self) -> None:
        try:
            for channel, handler in self._handlers.items():
                await self._connection.remove_listener(channel, handler)
        finally:
            await self._pool.release(self._connection)


async def listen(pool: asyncpg.Pool, handlers: Mapping[str, Callable[[str], None]]) -> Subscription:
    """LISTEN to each channel, calling its handler with the notification's payload."""
    connection = await pool.acquire()
    callbacks: dict[str, Callable[..., None]] = {}
    try:
        for channel, handler in handlers.items():

            def callback(
                _c: object, _pid: int, _channel: str, payload: object, handler: Callable[[str], None] = handler
            ) -> None:
                handler(str(payload))

            await connection.add_listener(channel, callback)
            callbacks[channel] = callback
    except BaseException:
        await pool.release(connection)
        raise
    return Subscription(pool, connection, callbacks)
