"""A child that dies while the stack waits for it is reported with what it last said, even when the stack relays
nothing (a test's stack): "exited with status 1" alone left a CI failure unexplained."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from thermostat.chassis.ports import free_port
from thermostat.chassis.registry import POD_CONTROLLER
from thermostat.dev.stack.supervisor import Stack, StackConfig

DIES = "import sys; print('starting'); sys.exit('OSError: [Errno 98] address already in use')"


async def test_a_child_that_dies_at_start_is_reported_with_its_last_lines(tmp_path: Path) -> None:
    stack = Stack(StackConfig(data_dir=tmp_path, relay_logs=False))
    child = await stack._spawn(
        "pod-controller#2", [sys.executable, "-c", DIES], {**os.environ, "PYTHONUNBUFFERED": "1"}, port=free_port()
    )
    with pytest.raises(RuntimeError) as died:
        await stack.wait_serving(child, POD_CONTROLLER)
    assert str(died.value) == (
        "pod-controller#2 exited with status 1; its last lines:\n"
        "  | starting\n"
        "  | OSError: [Errno 98] address already in use"
    )
