"""The data directory's lock: held by one stack at a time, and free again once its holder exits however it exits."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from thermostat.dev.stack.lock import DataDirLock, StackAlreadyRunning


def test_a_second_holder_is_refused_with_the_first_ones_pid(tmp_path: Path) -> None:
    """The refusal says what runs and how to run a second one."""
    first = DataDirLock(tmp_path)
    first.acquire()
    try:
        holder = subprocess.run(
            [sys.executable, "-c", "import sys, pathlib\nfrom thermostat.dev.stack.lock import DataDirLock\n"
             "DataDirLock(pathlib.Path(sys.argv[1])).acquire()", str(tmp_path)],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        assert holder.returncode != 0
        assert "StackAlreadyRunning" in holder.stderr
        import os

        assert f"pid {os.getpid()}" in holder.stderr and "THERMOSTAT_DATA_DIR" in holder.stderr
        with pytest.raises(StackAlreadyRunning):
            DataDirLock(tmp_path).acquire()
    finally:
        first.release()


def test_a_lock_whose_holder_died_is_free(tmp_path: Path) -> None:
    """A holder killed without a word leaves nothing that blocks the next run."""
    subprocess.run(
        [sys.executable, "-c", "import os, sys, pathlib\nfrom thermostat.dev.stack.lock import DataDirLock\n"
         "DataDirLock(pathlib.Path(sys.argv[1])).acquire()\nos._exit(9)", str(tmp_path)],
        check=False,
    )  # fmt: skip
    lock = DataDirLock(tmp_path)
    lock.acquire()
    lock.release()
