"""LocalBackend: machines as child processes on this host, the embedded default (issue 10).

Theory of operation:
- `image` is a command line, split as a shell would (shlex) and never run through a shell. The child gets
  a small allow-list of this process's environment (PATH, locale, TZ, TMPDIR; never the pool's own tokens
  or database URL: tenant code runs there), then the type's `env`, then `STRATA_WORKER_TOKEN`,
  `STRATA_WORKER_PORT` and `PORT` set to a free loopback port chosen here; the endpoint is
  `http://127.0.0.1:{port}`. The port is found by binding port 0 and releasing it, so another process can
  take it in between: the worker then fails to bind, and the machine is retired at the boot timeout like any
  failed boot. The taker may be another machine's worker, whose `GET /health` (no token) would answer for
  this one: so until a child of ours has first been found healthy, health also asks the worker to cancel a
  build that does not exist with this machine's token, and a 401/403 (another machine's worker) or no
  answer is not healthy.
- Limits (Linux): `memory_mb` becomes RLIMIT_AS, an address-space limit (it also counts mapped but untouched
  memory, so a type needs head-room above its working set: a Python worker maps ~100-300 MB at start);
  `cpus` becomes CPU affinity, ceil(cpus) CPUs, rotated across machines, when fewer than this process may
  use. Elsewhere (no sched_setaffinity, no RLIMIT_AS) the limits are not enforced. `disk_gb`, `gpu_type`
  and `gpu_count` have no local meaning and are ignored.
- Children do not outlive the pool: each asks the kernel for SIGKILL when its parent dies
  (prctl PR_SET_PDEATHSIG, Linux; it fires when the *thread* that started the child ends, which is the
  event loop's thread) and checks that the parent is still there after asking. A small launcher
  interpreter applies that and the limits, then execs the command (no Python runs between fork and exec).
  Each runs in its own session and process group, so Ctrl-C in a terminal reaches the pool, which stops its
  machines in order, and `stop` signals the whole group (a worker's own children included). A provider id
  another dispatcher process on this host started (rows move between processes) is stopped by signalling
  its group, and its health is asked of its worker.
- `outlive_process` (POOL_LOCAL_MACHINES_OUTLIVE_PROCESS, issue 23): no parent-death signal, so a deploy's
  SIGTERM, which releases the warm machines for the next dispatcher process to adopt, leaves them running (the dev
  stack sets it: a dispatcher it restarts keeps its fleet; its Ctrl-C sends SIGINT, which stops them in order). A
  crashed dispatcher's children then live on until a live process reclaims the rows and stops them by group.
- `stop` sends SIGTERM, waits `stop_grace_seconds`, then SIGKILL; it is idempotent, and a provider id this
  backend did not start is signalled by group (see above) and its leader polled until it is gone (it is not
  our child, so no wait() reports it): `stop` returns once the machine has ended, whoever started it.
- `health` is "the process is alive and its worker answers GET /health with 200".
- Output: a machine's stdout and stderr go to `{output_dir}/{provider id}.out` (a directory of this user's under
  the system's temporary one unless given; the same for every dispatcher process on the host, so one that adopted
  a machine finds its file by its provider id), never to the pool's own terminal. `ended` reads its last lines
  once the process has exited: a worker that dies at start fails its boot at once, saying why (issue 35: the
  output went to /dev/null and the pool waited the whole boot timeout). The file is kept bounded: each health
  probe cuts one past OUTPUT_TRIM_BYTES down to its last OUTPUT_KEEP_BYTES (the child appends, so its writes go
  on at the new end; a line written during the cut may be lost, which a diagnostic tail can afford), and a stop
  removes it.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import math
import os
import shlex
import shutil
import signal
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

from thermostat.chassis.ports import free_port
from thermostat.providers.pool.backend import Backend, BackendError, MachineHandle, MachineSpec, ReportsEnd
from thermostat.providers.pool.provider_errors import ended_reason, machine_secrets, output_tail
from thermostat.providers.pool.worker_client import WorkerClient

DEFAULT_STOP_GRACE_SECONDS = 5.0
FOREIGN_POLL_SECONDS = 0.02
INHERITED_VARIABLES = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR")
LOOPBACK = "127.0.0.1"
OUTPUT_KEEP_BYTES = 16 * 1024
OUTPUT_TRIM_BYTES = 256 * 1024


def default_output_dir() -> Path:
    """Where machines' output files go unless a backend is given a directory: this user's, under the system's
    temporary directory (shared by the host's dispatcher processes: see the module)."""
    return Path(tempfile.gettempdir()) / f"thermostat-machines-{os.getuid()}"


_RELEASED: list[asyncio.subprocess.Process] = []
"""Handles of machines a deploy released (LocalBackend.release), kept until this process ends."""

IDENTITY_PROBE_BUILD = "thermostat-port-check"
"""The build a boot's health asks to cancel: none runs under it, so the machine's own worker answers 404."""


class LocalBackend:
    """LocalBackend starts machines as child processes listening on loopback ports."""

    def __init__(
        self,
        client: WorkerClient,
        *,
        stop_grace_seconds: float = DEFAULT_STOP_GRACE_SECONDS,
        environ: Mapping[str, str] | None = None,
        output_dir: Path | None = None,
        outlive_process: bool = False,
    ) -> None:
        self._client = client
        self._grace = stop_grace_seconds
        source = os.environ if environ is None else environ
        self._inherited = {name: source[name] for name in INHERITED_VARIABLES if name in source}
        self._output_dir = output_dir or default_output_dir()
        self._outlive = outlive_process  # POOL_LOCAL_MACHINES_OUTLIVE_PROCESS: no parent-death signal (module doc)
        self._children: dict[str, asyncio.subprocess.Process] = {}
        self._endpoints: dict[str, str] = {}
        self._unproven: dict[str, str] = {}  # provider id -> token, until its worker proves it holds the port
        self._stopped: set[str] = set()
        self._cpu_offset = itertools.count()

    async def start(self, spec: MachineSpec) -> MachineHandle:
        try:
            argv = shlex.split(spec.machine_type.image)
        except ValueError as error:
            raise BackendError(f"image is not a command line: {error}") from None
        if not argv:
            raise BackendError("image is an empty command line")
        port = free_port(LOOPBACK)
        env = {**self._inherited, **spec.env(), "STRATA_WORKER_PORT": str(port), "PORT": str(port)}
        if shutil.which(argv[0], path=env.get("PATH")) is None:  # the launcher would only learn it after exec
            raise BackendError(f"cannot start {argv[0]!r}: no such executable")
        memory = None if spec.machine_type.memory_mb is None else spec.machine_type.memory_mb * 1024 * 1024
        launch = _launcher(memory_bytes=memory, cpus=self._cpus(spec.machine_type.cpus), bound=not self._outlive)
        starting = self._output_dir / f"{spec.machine_id}.out"
        try:
            self._output_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
            if self._output_dir.is_symlink() or self._output_dir.stat().st_uid != os.getuid():
                # a shared temporary directory: one another user made could read the machines' output
                raise BackendError(f"machine output directory {self._output_dir} is not this user's own")
            output = os.open(starting, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o600)
            try:
                process = await asyncio.create_subprocess_exec(
                    *launch,
                    *argv,
                    env=env,
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=output,
                    stderr=output,
                    start_new_session=True,
                )
            finally:
                os.close(output)
        except OSError as error:
            starting.unlink(missing_ok=True)
            raise BackendError(f"cannot start {argv[0]!r}: {error.strerror or type(error).__name__}") from None
        provider_id = f"local-{process.pid}"
        with contextlib.suppress(OSError):  # named by the provider id, which an adopting process knows it by
            starting.replace(self._output_path(provider_id))
        self._children[provider_id] = process
        self._endpoints[provider_id] = f"http://{LOOPBACK}:{port}"
        self._unproven[provider_id] = spec.worker_token
        return MachineHandle(provider_id=provider_id, endpoint=self._endpoints[provider_id], region=None)

    async def stop(self, provider_id: str) -> None:
        process = self._children.get(provider_id)
        if process is None:
            # Started by another dispatcher process on this host (rows move between processes: a claim, a
            # reclaim): its worker leads its own process group, so the group is signalled by id.
            pid = _foreign_pid(provider_id)
            if pid is not None and provider_id not in self._stopped:
                self._stopped.add(provider_id)
                # shielded, as below; and awaited like one of ours: a stop that returned while the worker
                # was still running let the stack's Ctrl-C end before the machines a deploy handed over did
                await asyncio.shield(self._terminate_foreign(pid))
                self._output_path(provider_id).unlink(missing_ok=True)
            return
        # shielded: a caller cancelled mid-grace must not leave the child half-stopped
        await asyncio.shield(self._terminate(process))
        self._output_path(provider_id).unlink(missing_ok=True)
        self._children.pop(provider_id, None)
        self._endpoints.pop(provider_id, None)
        self._unproven.pop(provider_id, None)
        self._stopped.add(provider_id)  # a second stop must not signal a group that reused the pid

    async def health(self, handle: MachineHandle) -> bool:
        process = self._children.get(handle.provider_id)
        if process is not None and process.returncode is not None:
            return False
        _trim(self._output_path(handle.provider_id))
        # one of ours that runs, or one another dispatcher process on this host started: ask its worker
        if not await self._client.health(handle.endpoint):
            return False
        token = self._unproven.get(handle.provider_id)
        if token is None:
            return True
        reply = await self._client.cancel(handle.endpoint, token, IDENTITY_PROBE_BUILD)
        if reply.status is None or reply.status in (401, 403):
            return False  # no answer, or the worker of another machine that took the port ours was given
        self._unproven.pop(handle.provider_id, None)
        return True

    async def ended(self, handle: MachineHandle, spec: MachineSpec) -> str | None:
        """Why one of ours is gone: its exit code and its last lines of output; None while it runs (or for a
        machine another process started: no wait() of ours reports its end)."""
        process = self._children.get(handle.provider_id)
        if process is None or process.returncode is None:
            return None
        output = await asyncio.to_thread(_tail_bytes, self._output_path(handle.provider_id))
        tail = output_tail(output, secrets=machine_secrets(spec.worker_token, spec.machine_type.env))
        return ended_reason(process.returncode, tail)

    def _output_path(self, provider_id: str) -> Path:
        return self._output_dir / f"{provider_id}.out"

    async def aclose(self) -> None:
        """Stop every machine this backend started (the service's shutdown)."""
        await asyncio.gather(*(self.stop(provider_id) for provider_id in list(self._children)))

    def release(self) -> None:
        """Let go of every machine without stopping it (a deploy's shutdown: the next dispatcher process adopts
        them). Their handles stay referenced for the life of this process: a collected handle of a running child
        warns, and closing it would kill the machine."""
        _RELEASED.extend(self._children.values())
        self._children.clear()
        self._endpoints.clear()
        self._unproven.clear()

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

    async def _terminate_foreign(self, pid: int) -> None:
        """SIGTERM, the grace, then SIGKILL for a group another process started: not our child, so no wait()
        reports its end; a pidfd does (Linux), or else polling the leader (a zombie counts as gone)."""
        _signal_group(pid, signal.SIGTERM)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(_ended(pid), self._grace)
        _signal_group(pid, signal.SIGKILL)

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


def _reports_end(backend: LocalBackend) -> ReportsEnd:
    return backend


def _tail_bytes(path: Path) -> bytes:
    """The last OUTPUT_KEEP_BYTES of the file (empty when it cannot be read)."""
    try:
        with path.open("rb") as output:
            output.seek(max(0, output.seek(0, os.SEEK_END) - OUTPUT_KEEP_BYTES))
            return output.read()
    except OSError:
        return b""


def _trim(path: Path) -> None:
    """Cut the file to its last OUTPUT_KEEP_BYTES once it is past OUTPUT_TRIM_BYTES (see the module)."""
    try:
        if path.stat().st_size <= OUTPUT_TRIM_BYTES:
            return
        tail = _tail_bytes(path)
        with path.open("r+b") as output:
            output.truncate(0)
            output.write(tail)
    except OSError:
        return


def _foreign_pid(provider_id: str) -> int | None:
    prefix, _, number = provider_id.partition("-")
    if prefix != "local" or not (number.isascii() and number.isdigit() and len(number) <= 10) or int(number) <= 1:
        return None
    return int(number)


async def _ended(pid: int) -> None:
    """Return once the process `pid` (any process, not only a child) has ended."""
    try:
        descriptor = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    except (AttributeError, OSError):  # no pidfd (not Linux, or a kernel before 5.3): poll
        while _running(pid):  # noqa: ASYNC110 - nothing signals a foreign process's end without a pidfd
            await asyncio.sleep(FOREIGN_POLL_SECONDS)
        return
    loop = asyncio.get_running_loop()
    ended = loop.create_future()

    def readable() -> None:  # a pidfd turns readable once its process exits
        if not ended.done():
            ended.set_result(None)

    loop.add_reader(descriptor, readable)
    try:
        await ended
    finally:
        loop.remove_reader(descriptor)
        os.close(descriptor)


def _running(pid: int) -> bool:
    """Whether the process exists and is not a zombie (Linux reads its state; elsewhere existence is all)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rpartition(b")")[2].split()[0] != b"Z"
    except FileNotFoundError:
        return False
    except OSError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _signal_group(pid: int, signum: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signum)


_LAUNCH = """
import ctypes, os, resource, sys
parent, memory, cpus, *command = sys.argv[1:]
if parent != "-" and sys.platform.startswith("linux"):
    ctypes.CDLL(None, use_errno=True).prctl(1, 9, 0, 0, 0)  # PR_SET_PDEATHSIG, SIGKILL
    if os.getppid() != int(parent):  # the pool died before the request took effect
        os._exit(1)
if memory != "-" and hasattr(resource, "RLIMIT_AS"):
    resource.setrlimit(resource.RLIMIT_AS, (int(memory), int(memory)))
if cpus != "-":
    os.sched_setaffinity(0, [int(cpu) for cpu in cpus.split(",")])
try:
    os.execvpe(command[0], command, os.environ)
except OSError as error:
    print(f"cannot start {command[0]!r}: {error.strerror}", file=sys.stderr)
    os._exit(127)
"""


def _launcher(*, memory_bytes: int | None, cpus: tuple[int, ...] | None, bound: bool = True) -> list[str]:
    """The argv prefix that applies the parent-death signal and the limits, then execs the command.

    A small interpreter (`-I -S`: no site, no user paths) does it rather than a `preexec_fn`: Python code run
    between fork and exec in a process with gRPC's threads can crash the child (seen: a segfault in
    threading's after-fork hook), whereas the C fork path runs none.
    """
    return [
        sys.executable,
        "-I",
        "-S",
        "-c",
        _LAUNCH,
        str(os.getpid()) if bound else "-",
        "-" if memory_bytes is None else str(memory_bytes),
        "-" if not cpus else ",".join(str(cpu) for cpu in cpus),
    ]
