"""LocalBackend: machines as child processes on this host, the embedded default (issue 10).

Theory of operation:
- `image` is a command line, split as a shell would (shlex) and never run through a shell. The child gets
  a small allow-list of this process's environment (PATH, locale, TZ, TMPDIR; never the pool's own tokens
  or database URL: tenant code runs there), then the type's `env`, then `STRATA_WORKER_TOKEN`,
  `STRATA_WORKER_PORT` and `PORT` set to a free loopback port chosen here; the endpoint is
  `http://127.0.0.1:{port}`. The port is found by binding port 0 and releasing it, so another process can
  take it in between: the worker then fails to bind, its boot health poll never answers, and the machine
  is retired at the boot timeout like any failed boot.
- Limits (Linux): `memory_mb` becomes RLIMIT_AS, an address-space limit (it also counts mapped but untouched
  memory, so a type needs head-room above its working set: a Python worker maps ~100-300 MB at start);
  `cpus` becomes CPU affinity, ceil(cpus) CPUs, rotated across machines, when fewer than this process may
  use. Elsewhere (no sched_setaffinity, no RLIMIT_AS) the limits are not enforced. `disk_gb`, `gpu_type`
  and `gpu_count` have no local meaning and are ignored.
- Children do not outlive the pool: each asks the kernel for SIGKILL when its parent dies
  (prctl PR_SET_PDEATHSIG, Linux; it fires when the *thread* that started the child ends, which is the
  event loop's thread) and checks that the parent is still there after asking. Each runs in its own
  session and process group, so Ctrl-C in a terminal reaches the pool, which stops its machines in order,
  and `stop` signals the whole group (a worker's own children included).
- `stop` sends SIGTERM, waits `stop_grace_seconds`, then SIGKILL; it is idempotent, and a provider id this
  backend did not start (a child of an earlier pool process, which died with it) is already gone.
- `health` is "the process is alive and its worker answers GET /health with 200".
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import itertools
import math
import os
import resource
import shlex
import signal
import socket
import sys
from collections.abc import Callable, Mapping

from thermostat.providers.pool.backend import Backend, BackendError, MachineHandle, MachineSpec
from thermostat.providers.pool.worker_client import WorkerClient

DEFAULT_STOP_GRACE_SECONDS = 5.0
INHERITED_VARIABLES = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR")
LOOPBACK = "127.0.0.1"
_PR_SET_PDEATHSIG = 1


class LocalBackend:
    """LocalBackend starts machines as child processes listening on loopback ports."""

    def __init__(
        self,
        client: WorkerClient,
        *,
        stop_grace_seconds: float = DEFAULT_STOP_GRACE_SECONDS,
        environ: Mapping[str, str] | None = None,
        output: int | None = asyncio.subprocess.DEVNULL,
    ) -> None:
        self._client = client
        self._grace = stop_grace_seconds
        source = os.environ if environ is None else environ
        self._inherited = {name: source[name] for name in INHERITED_VARIABLES if name in source}
        self._output = output
        self._children: dict[str, asyncio.subprocess.Process] = {}
        self._endpoints: dict[str, str] = {}
        self._cpu_offset = itertools.count()

    async def start(self, spec: MachineSpec) -> MachineHandle:
        try:
            argv = shlex.split(spec.machine_type.image)
        except ValueError as error:
            raise BackendError(f"image is not a command line: {error}") from None
        if not argv:
            raise BackendError("image is an empty command line")
        port = _free_port()
        env = {**self._inherited, **spec.env(), "STRATA_WORKER_PORT": str(port), "PORT": str(port)}
        setup = _child_setup(
            memory_bytes=None if spec.machine_type.memory_mb is None else spec.machine_type.memory_mb * 1024 * 1024,
            cpus=self._cpus(spec.machine_type.cpus),
        )
        try:
            process = await asyncio.create_subprocess_exec(
                *argv,
                env=env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=self._output,
                stderr=self._output,
                start_new_session=True,
                preexec_fn=setup,
            )
        except OSError as error:
            raise BackendError(f"cannot start {argv[0]!r}: {error.strerror or type(error).__name__}") from None
        provider_id = f"local-{process.pid}"
        self._children[provider_id] = process
        self._endpoints[provider_id] = f"http://{LOOPBACK}:{port}"
        return MachineHandle(provider_id=provider_id, endpoint=self._endpoints[provider_id], region=None)

    async def stop(self, provider_id: str) -> None:
        process = self._children.get(provider_id)
        if process is None:
            return
        # shielded: a caller cancelled mid-grace must not leave the child half-stopped
        await asyncio.shield(self._terminate(process))
        self._children.pop(provider_id, None)
        self._endpoints.pop(provider_id, None)

    async def health(self, handle: MachineHandle) -> bool:
        process = self._children.get(handle.provider_id)
        if process is None or process.returncode is not None:
            return False
        return await self._client.health(handle.endpoint)

    async def aclose(self) -> None:
        """Stop every machine this backend started (the service's shutdown)."""
        await asyncio.gather(*(self.stop(provider_id) for provider_id in list(self._children)))

    def pid(self, provider_id: str) -> int | None:
        """The child's process id, for diagnostics and tests."""
        process = self._children.get(provider_id)
        return None if process is None else process.pid

    async def _terminate(self, process: asyncio.subprocess.Process) -> None:
        if process.returncode is None:
            _signal_group(process.pid, signal.SIGTERM)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(process.wait(), self._grace)
        # the group may outlive its leader (a worker's own children): kill whatever is left
        _signal_group(process.pid, signal.SIGKILL)
        await process.wait()

    def _cpus(self, cpus: float | None) -> tuple[int, ...] | None:
        if cpus is None or not hasattr(os, "sched_getaffinity"):
            return None
        available = sorted(os.sched_getaffinity(0))
        wanted = math.ceil(cpus)
        if wanted >= len(available):
            return None
        offset = next(self._cpu_offset) * wanted
        return tuple(available[(offset + i) % len(available)] for i in range(wanted))


def _conforms(backend: LocalBackend) -> Backend:
    """LocalBackend satisfies the Backend protocol (checked by mypy here)."""
    return backend


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((LOOPBACK, 0))
        port: int = probe.getsockname()[1]
        return port


def _signal_group(pid: int, signum: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signum)


def _child_setup(*, memory_bytes: int | None, cpus: tuple[int, ...] | None) -> Callable[[], None]:
    """The function the child runs between fork and exec: parent-death signal, then limits."""
    parent = os.getpid()
    prctl = _prctl()

    def setup() -> None:
        if prctl is not None:
            prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
            if os.getppid() != parent:  # the parent died before the request took effect
                os._exit(1)
        if memory_bytes is not None and hasattr(resource, "RLIMIT_AS"):
            resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
        if cpus is not None:
            os.sched_setaffinity(0, cpus)

    return setup


def _prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None
    function: Callable[..., int] | None = getattr(libc, "prctl", None)
    return function
