"""What the stack prints: a service's JSON line short on a terminal and as it is through a pipe, and no event said
twice (issue 35: the embedded Postgres's start was two lines, its own and the stack's)."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import pytest

from tests.fixtures.postgres import embedded_data_dir
from thermostat.dev.stack.supervisor import Stack, StackConfig

# starts an embedded Postgres of its own, with no fixture to say so (tests/fixtures/tiers.py)
pytestmark = pytest.mark.pg

LINE = json.dumps({"time": "2026-12-05T12:55:18.142+00:00", "level": "INFO", "service": "pod-controller",
                   "logger": "thermostat.pod_controller", "message": "pod qwen: wake Created"})  # fmt: skip


async def _relayed(tmp_path: Path, *, human_logs: bool, capsys: pytest.CaptureFixture[str]) -> str:
    stack = Stack(StackConfig(data_dir=tmp_path, human_logs=human_logs))
    child = await stack._spawn("pod-controller", [sys.executable, "-c", f"print({LINE!r})"], {})
    await child.process.wait()
    assert child.relay is not None
    await child.relay
    return capsys.readouterr().out


async def test_a_service_line_on_a_terminal_is_one_short_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = await _relayed(tmp_path, human_logs=True, capsys=capsys)
    assert out == "pod-controller  | 12:55:18 pod qwen: wake Created\n"


async def test_a_service_line_through_a_pipe_stays_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = await _relayed(tmp_path, human_logs=False, capsys=capsys)
    assert out == f"pod-controller  | {LINE}\n"


async def test_the_embedded_postgres_start_is_said_once(caplog: pytest.LogCaptureFixture) -> None:
    """One line names its port (the stack's, with the socket), not two."""
    caplog.set_level(logging.INFO)
    with embedded_data_dir() as root:
        stack = Stack(
            StackConfig(data_dir=root, durable_db=False, relay_logs=False, edge=False, services=(), simulator_port=0)
        )
        await stack.start()
        try:
            assert stack.postgres is not None
            port = f"127.0.0.1:{stack.postgres.port}"
            said = [r.getMessage() for r in caplog.records if port in r.getMessage()]
        finally:
            await stack.stop()
    assert len(said) == 1, said
