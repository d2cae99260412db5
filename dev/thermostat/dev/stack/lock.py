"""One stack per data directory: a second `make run` in the same clone refuses instead of taking the first one's
database for a crashed leftover (issue 35: it stopped the live Postgres of `.data/pg`, and the first stack answered
503 with no word about Postgres).

The lock is an `flock` on `stack.lock` in the data directory, held for the stack's life: the kernel releases it
when the process exits however it exits, so a crashed run leaves nothing that blocks the next one. The file holds
the owner's pid, for the refusal to name it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

LOCK_NAME = "stack.lock"


class StackAlreadyRunning(RuntimeError):
    """Another stack holds this data directory."""


class DataDirLock:
    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / LOCK_NAME
        self._fd: int | None = None

    def acquire(self) -> None:
        """Hold the data directory for this process, or raise StackAlreadyRunning naming the holder's pid."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 32).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise StackAlreadyRunning(
                f"another `make run` of this clone is running, pid {holder} (data in {self.path.parent}); "
                "stop it, or set THERMOSTAT_DATA_DIR to another directory (and the ports: README) to run a second one"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
            os.close(fd)
