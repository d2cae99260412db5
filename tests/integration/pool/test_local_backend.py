"""The local-process backend: reference workers as child processes, limits, and nothing left behind."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import textwrap
from pathlib import Path

import pytest

from tests.fixtures.polling import eventually
from tests.integration.pool.conftest import MACHINE_TOKEN, booted, machine, spec, worker_type
from thermostat.policy.pool.job_outcome import ReplyKind
from thermostat.providers.pool import local as local_module
from thermostat.providers.pool.backend import BackendError, MachineHandle
from thermostat.providers.pool.local import LocalBackend
from thermostat.providers.pool.worker_client import WorkerClient


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        with open(f"/proc/{pid}/stat") as stat:  # a zombie is not alive
            return stat.read().split(") ", 1)[1][0] != "Z"
    except (ProcessLookupError, FileNotFoundError):  # gone between the signal and the read
        return False


def proc_file(pid: int, name: str) -> bytes:
    with open(f"/proc/{pid}/{name}", "rb") as file:
        return file.read()


def pid_of(backend: LocalBackend, handle: MachineHandle) -> int:
    pid = backend.pid(handle.provider_id)
    assert pid is not None
    return pid


async def test_started_worker_answers_health_and_executes(backend: LocalBackend, client: WorkerClient) -> None:
    """A local machine runs the reference worker on a loopback port with the machine's token."""
    async with machine(backend) as handle:
        assert handle.endpoint.startswith("http://127.0.0.1:")
        assert handle.provider_id.startswith("local-")
        reply = await client.execute(handle.endpoint, MACHINE_TOKEN, b"\x00payload\xff", deadline_seconds=10)
        assert (reply.kind, reply.status, reply.body) == (ReplyKind.ANSWERED, 200, b"\x00payload\xff")
        wrong = await client.execute(handle.endpoint, "not-the-token", b"x", deadline_seconds=10)
        assert (wrong.kind, wrong.status) == (ReplyKind.ANSWERED, 401)


async def test_environment_is_the_types_env_plus_worker_variables_only(
    client: WorkerClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The child sees the type's env, its token and port, and none of the pool's own variables."""
    monkeypatch.setenv("STRATA_POOL_TOKEN", "pool-secret-not-for-tenants")
    backend = LocalBackend(client)
    try:
        async with machine(backend, env={"CELL_SETTING": "on", "STRATA_WORKER_TOKEN": "from-catalogue"}) as handle:
            environ = proc_file(pid_of(backend, handle), "environ")
    finally:
        await backend.aclose()
    env = dict(item.split(b"=", 1) for item in environ.split(b"\0") if item)
    port = handle.endpoint.rsplit(":", 1)[1].encode()
    assert env[b"CELL_SETTING"] == b"on"
    assert env[b"STRATA_WORKER_TOKEN"] == MACHINE_TOKEN.encode()  # the minted token wins over the catalogue's
    assert env[b"STRATA_WORKER_PORT"] == env[b"PORT"] == port
    assert b"STRATA_POOL_TOKEN" not in env
    assert set(env) <= {
        b"CELL_SETTING",
        b"STRATA_WORKER_TOKEN",
        b"STRATA_WORKER_PORT",
        b"PORT",
        b"PATH",
        b"LANG",
        b"LC_ALL",
        b"LC_CTYPE",
        b"TZ",
        b"TMPDIR",
    }


async def test_memory_mb_is_an_address_space_limit(backend: LocalBackend) -> None:
    """memory_mb is enforced as RLIMIT_AS, visible in /proc/<pid>/limits."""
    async with machine(backend, memory_mb=2048) as handle:
        limits = proc_file(pid_of(backend, handle), "limits").decode()
    line = next(row for row in limits.splitlines() if row.startswith("Max address space"))
    assert line.split()[3:5] == [str(2048 * 1024 * 1024)] * 2


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs to restrict one")
async def test_cpus_is_a_cpu_affinity(backend: LocalBackend) -> None:
    """cpus 1 pins the worker to one CPU when this host has more."""
    async with machine(backend, cpus=0.5) as handle:
        assert len(os.sched_getaffinity(pid_of(backend, handle))) == 1


async def test_worker_runs_in_its_own_process_group(backend: LocalBackend) -> None:
    """Ctrl-C in a terminal reaches the pool, not its machines; stop signals the machine's whole group."""
    async with machine(backend) as handle:
        pid = pid_of(backend, handle)
        assert os.getpgid(pid) == pid != os.getpgid(0)


async def test_stop_ends_the_process_and_is_idempotent(backend: LocalBackend) -> None:
    """Stop terminates the worker; a second stop, or a stop of an unknown machine, is no error."""
    handle = await booted(backend, spec())
    pid = pid_of(backend, handle)
    await backend.stop(handle.provider_id)
    assert not alive(pid)
    assert not await backend.health(handle)
    await backend.stop(handle.provider_id)
    await backend.stop("local-999999999")


async def test_stop_kills_a_worker_that_ignores_sigterm(client: WorkerClient) -> None:
    """A machine that ignores SIGTERM is killed after the grace."""
    ignore_sigterm = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"
    stubborn = worker_type(image=f"{sys.executable} -c '{ignore_sigterm}'")
    backend = LocalBackend(client, stop_grace_seconds=0.2)
    handle = await backend.start(spec(stubborn))
    pid = pid_of(backend, handle)
    await asyncio.sleep(0.3)  # let the child install its handler; the outcome does not depend on it
    await asyncio.wait_for(backend.stop(handle.provider_id), 5)
    assert not alive(pid)


SLOW_TO_EXIT = (
    "import signal, sys, time; "
    "signal.signal(signal.SIGTERM, lambda *_: (time.sleep(0.5), sys.exit(0))); "
    "print('ready', flush=True); time.sleep(60)"
)


async def test_a_machine_another_process_started_is_gone_when_stop_returns(client: WorkerClient) -> None:
    """A deploy hands machines to the next dispatcher process, which did not start them (no child handle): its
    stop still waits for the worker to end (here half a second after SIGTERM), as a stop of its own child does.
    The stack's Ctrl-C relied on that: a stop that returned at the signal left adopted machines running."""
    starter, adopter = LocalBackend(client), LocalBackend(client, stop_grace_seconds=5)
    handle = await starter.start(spec(worker_type(image=f'{sys.executable} -c "{SLOW_TO_EXIT}"')))
    pid = pid_of(starter, handle)
    await asyncio.sleep(0.3)  # let the child install its handler (without it, SIGTERM ends it at once)
    starter.release()
    await asyncio.wait_for(adopter.stop(handle.provider_id), 10)
    assert not alive(pid)
    await adopter.stop(handle.provider_id)  # idempotent: the group is not signalled again


async def test_a_machine_another_process_started_that_ignores_sigterm_is_killed_after_the_grace(
    client: WorkerClient,
) -> None:
    """The adopter's stop of a foreign machine that ignores SIGTERM ends it with SIGKILL after the grace."""
    ignore_sigterm = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"
    starter, adopter = LocalBackend(client), LocalBackend(client, stop_grace_seconds=0.2)
    handle = await starter.start(spec(worker_type(image=f"{sys.executable} -c '{ignore_sigterm}'")))
    pid = pid_of(starter, handle)
    await asyncio.sleep(0.3)
    starter.release()
    await asyncio.wait_for(adopter.stop(handle.provider_id), 5)

    async def gone() -> bool | None:  # SIGKILL is delivered asynchronously; the stop sent it before returning
        return True if not alive(pid) else None

    assert await eventually(gone, timeout=5)


async def test_killed_worker_reads_unhealthy(backend: LocalBackend) -> None:
    """A worker process that died (kill -9) fails its health check."""
    handle = await booted(backend, spec())
    os.kill(pid_of(backend, handle), signal.SIGKILL)

    async def unhealthy() -> bool | None:
        return True if not await backend.health(handle) else None

    assert await eventually(unhealthy, timeout=5)


DIES_AT_START = (
    f"{sys.executable} -c \"import os, sys; print('loading the handler', os.environ['STRATA_WORKER_TOKEN'], "
    f"os.environ['HF_TOKEN'], flush=True); sys.exit('no handler named nope')\""
)
SECRET = "hf-secret-value-1234"


async def test_a_worker_that_exits_at_start_has_ended_with_its_exit_code_and_last_lines(
    backend: LocalBackend,
) -> None:
    """Issue 35: its output went to /dev/null; now `ended` says how it exited and what it said, secrets scrubbed."""
    machine_spec = spec(worker_type(image=DIES_AT_START, env={"HF_TOKEN": SECRET, "STRATA_WORKER_SLEEP_SECONDS": "0"}))
    handle = await backend.start(machine_spec)
    try:

        async def ended() -> str | None:
            return await backend.ended(handle, machine_spec)

        reason = await eventually(ended, timeout=10, every=0.05)
        assert reason.startswith("the machine exited with code 1 before answering its health check"), reason
        assert reason.endswith("loading the handler <redacted> <redacted> | no handler named nope"), reason
        assert MACHINE_TOKEN not in reason and SECRET not in reason
        assert not await backend.health(handle)
    finally:
        await backend.stop(handle.provider_id)


async def test_a_running_worker_has_not_ended(backend: LocalBackend) -> None:
    """A machine whose process runs (healthy or still booting) reports no end."""
    async with machine(backend) as handle:
        assert await backend.ended(handle, spec()) is None


async def test_a_machines_output_file_is_bounded_by_the_probe_and_removed_by_the_stop(
    client: WorkerClient, tmp_path: Path
) -> None:
    """Past OUTPUT_TRIM_BYTES a health probe keeps the file's tail only; a stop removes it."""
    chatty = (
        f"{sys.executable} -c \"import sys, time; print('x' * 400000); print('last line', flush=True); time.sleep(60)\""
    )
    backend = LocalBackend(client, stop_grace_seconds=0.2, output_dir=tmp_path)
    handle = await backend.start(spec(worker_type(image=chatty)))
    output = tmp_path / f"{handle.provider_id}.out"
    try:

        async def written() -> bool | None:
            return True if output.exists() and output.read_bytes().endswith(b"last line\n") else None

        await eventually(written, timeout=10, every=0.05)
        assert output.stat().st_size > local_module.OUTPUT_TRIM_BYTES
        assert not await backend.health(handle)  # no worker answers: the probe trims all the same
        assert output.stat().st_size <= local_module.OUTPUT_KEEP_BYTES
        assert output.read_bytes().endswith(b"last line\n")
    finally:
        await backend.aclose()
    assert not output.exists()


async def test_an_output_directory_that_is_a_symlink_is_refused(client: WorkerClient, tmp_path: Path) -> None:
    """The default directory is shared under /tmp: one planted as a link elsewhere is not written into."""
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "elsewhere")
    backend = LocalBackend(client, output_dir=tmp_path / "link")
    with pytest.raises(BackendError, match="is not this user's own"):
        await backend.start(spec())
    assert list((tmp_path / "elsewhere").iterdir()) == []


async def test_missing_command_is_a_backend_error(backend: LocalBackend) -> None:
    """An image naming no executable fails the start with a message naming the command."""
    with pytest.raises(BackendError, match="no-such-worker-binary"):
        await backend.start(spec(worker_type(image="no-such-worker-binary --port 1")))


async def test_worker_without_a_token_never_becomes_healthy(backend: LocalBackend) -> None:
    """A blank token reaches the worker, which refuses to start; health stays false (a failed boot)."""
    handle = await backend.start(spec(token=""))
    pid = pid_of(backend, handle)

    async def exited() -> bool | None:
        return True if not alive(pid) else None

    await eventually(exited, timeout=20)
    assert not await backend.health(handle)


PARENT = textwrap.dedent(
    """
    import asyncio, sys
    from thermostat.policy.pool.machine_type import MachineType
    from thermostat.providers.pool.backend import MachineSpec
    from thermostat.providers.pool.local import LocalBackend
    from thermostat.providers.pool.worker_client import WorkerClient

    async def main():
        backend = LocalBackend(WorkerClient())
        kind = MachineType(name="local", image=sys.argv[1])
        handle = await backend.start(MachineSpec(machine_id="m", tenant_id="t", machine_type=kind, worker_token="x"))
        print(backend.pid(handle.provider_id), flush=True)
        await asyncio.sleep(3600)

    asyncio.run(main())
    """
)


async def test_no_worker_outlives_a_killed_parent() -> None:
    """kill -9 of the pool process takes its machines with it (parent-death signal)."""
    parent = await asyncio.create_subprocess_exec(
        sys.executable, "-c", PARENT, f"{sys.executable} -m thermostat.worker", stdout=asyncio.subprocess.PIPE
    )
    assert parent.stdout is not None
    child = int(await asyncio.wait_for(parent.stdout.readline(), 30))
    assert alive(child)
    parent.kill()
    await parent.wait()

    async def gone() -> bool | None:
        return True if not alive(child) else None

    assert await eventually(gone, timeout=10)


async def test_a_machine_whose_port_another_machines_worker_took_is_not_healthy(
    backend: LocalBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A free port is released before the child binds it: when another machine's worker holds it, that worker
    answers the token-free `GET /health` for ours, but refuses ours's token, so ours is not healthy."""
    async with machine(backend) as first:
        taken = int(first.endpoint.rsplit(":", 1)[1])
        monkeypatch.setattr(local_module, "free_port", lambda _host: taken)
        silent = spec(worker_type(image="sleep 30"), token="another-machines-token")  # alive, binds nothing
        second = await backend.start(silent)
        try:
            assert second.endpoint == first.endpoint
            assert await backend.health(second) is False
            assert await backend.health(first) is True
        finally:
            await backend.stop(second.provider_id)
