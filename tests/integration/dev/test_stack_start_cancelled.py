"""`make run` interrupted while its embedded Postgres is still starting leaves no server behind."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.postgres import embedded_data_dir
from thermostat.dev.embedded_postgres import EmbeddedPostgres
from thermostat.dev.stack.supervisor import Stack, StackConfig

# starts an embedded Postgres of its own, with no fixture to say so (tests/fixtures/tiers.py)
pytestmark = pytest.mark.pg


def _postmaster(data_dir: Path) -> int | None:
    """The pid recorded in the data directory's lock file, if the server it names still runs."""
    try:
        pid = int((data_dir / "postmaster.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None
    return None if state in ("Z", "X") else pid


async def test_ctrl_c_while_postgres_initialises_stops_the_server_the_start_goes_on_to_launch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The start's thread cannot be interrupted: the stop waits for it and stops the server it launched."""
    initialised, proceed, finished = threading.Event(), threading.Event(), threading.Event()
    prepare, start = EmbeddedPostgres._prepare_data_dir, EmbeddedPostgres.start

    def prepare_then_hold(self: EmbeddedPostgres, user: Any) -> None:
        prepare(self, user)  # the real initdb
        initialised.set()
        proceed.wait(60)  # the interrupt lands here, before the server is launched

    def start_then_say(self: EmbeddedPostgres) -> str:
        try:
            return start(self)
        finally:
            finished.set()

    monkeypatch.setattr(EmbeddedPostgres, "_prepare_data_dir", prepare_then_hold)
    monkeypatch.setattr(EmbeddedPostgres, "start", start_then_say)
    with embedded_data_dir() as root:
        config = StackConfig(
            data_dir=root, durable_db=False, relay_logs=False, edge=False, services=(), simulator_port=0
        )
        stack = Stack(config)
        starting = asyncio.create_task(stack.start())
        try:
            assert await asyncio.to_thread(initialised.wait, 60)
            starting.cancel()
            for _ in range(20):  # the cancelled start runs its stop up to where it waits
                await asyncio.sleep(0)
            proceed.set()
            await asyncio.wait({starting}, timeout=60)
            assert starting.cancelled()
            assert await asyncio.to_thread(finished.wait, 60)
            assert _postmaster(root / "pg") is None
        finally:
            proceed.set()
            await asyncio.to_thread(finished.wait, 60)
            leftover = _postmaster(root / "pg")
            if leftover is not None:  # main's leak: end it here, never leave it running
                with contextlib.suppress(ProcessLookupError):
                    os.kill(leftover, signal.SIGKILL)
