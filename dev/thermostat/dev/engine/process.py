"""One vLLM process on a loopback port: started in its own session, stopped with its whole process group.

vLLM runs its engine core in a child process of the API server; a stop signals the group, so neither outlives the
stop. Its output goes to a log file, whose last lines say why an engine that died did.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import signal
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path

from thermostat.dev.engine.recipe import DEFAULT_SERVED_MODEL, Installation

STOP_GRACE_SECONDS = 10.0  # SIGTERM, then SIGKILL: a vLLM that drains its requests stops well within it


class EngineProcess:
    """EngineProcess is one running vLLM API server; `ready` once its /health answered 200."""

    def __init__(
        self,
        installation: Installation,
        *,
        port: int,
        log_path: Path,
        served_model_name: str = DEFAULT_SERVED_MODEL,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.port = port
        self.log_path = log_path
        self.started_at = time.monotonic()
        self.ready_after: float | None = None  # seconds from start to the first /health 200
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with log_path.open("ab") as log:
            self._process = subprocess.Popen(
                installation.serve_argv(port=port, served_model_name=served_model_name),
                env=installation.serve_env(os.environ if environ is None else environ),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    @property
    def pid(self) -> int:
        return self._process.pid

    @property
    def returncode(self) -> int | None:
        return self._process.poll()

    @property
    def ready(self) -> bool:
        return self.ready_after is not None and self.returncode is None

    def probe(self, timeout: float = 0.5) -> bool:
        """Ask /health once; True (and `ready_after` recorded) when the engine answers 200."""
        if self.ready_after is not None:
            return self.returncode is None
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            connection.request("GET", "/health")
            healthy = connection.getresponse().status == 200
        except OSError:
            healthy = False
        finally:
            connection.close()
        if healthy:
            self.ready_after = time.monotonic() - self.started_at
        return healthy

    def wait_ready(self, timeout: float) -> float:
        """Block until /health answers 200; the load time. RuntimeError when it exits or the time runs out."""
        deadline = time.monotonic() + timeout
        while not self.probe():
            if self.returncode is not None:
                raise RuntimeError(f"vLLM exited with status {self.returncode} while loading: {self.last_lines()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"vLLM did not answer /health within {timeout:.0f}s: {self.last_lines()}")
            time.sleep(0.2)
        assert self.ready_after is not None
        return self.ready_after

    def last_lines(self, count: int = 15) -> str:
        with contextlib.suppress(OSError):
            lines = self.log_path.read_text(errors="replace").splitlines()
            return "\n".join(lines[-count:])
        return "(no log)"

    def stop(self, grace_seconds: float = STOP_GRACE_SECONDS) -> None:
        """SIGTERM the group, wait up to the grace, then SIGKILL whatever of the group is left."""
        if self._process.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self._process.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._process.wait(grace_seconds)
        # the engine core may outlive the API server that led the group: the group, not the leader
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self._process.pid, signal.SIGKILL)
        self._process.wait()
