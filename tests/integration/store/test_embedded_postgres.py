"""EmbeddedPostgres: a real server from the wheel that starts, stops without leftovers, and keeps data."""

import asyncio
import os
import signal
from pathlib import Path

import asyncpg
import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from tests.fixtures.polling import eventually
from tests.fixtures.postgres import embedded_data_dir
from thermostat.dev.embedded_postgres import EmbeddedPostgres, EmbeddedPostgresError

# starts an embedded Postgres of its own, with no fixture to say so (tests/fixtures/tiers.py)
pytestmark = pytest.mark.pg


def _stat_fields(pid: int) -> list[str] | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None


def is_running(pid: int) -> bool:
    """Whether `pid` is a live process (a zombie awaiting its parent's wait() is not)."""
    fields = _stat_fields(pid)
    return fields is not None and fields[0] not in ("Z", "X")


def children_of(pid: int) -> list[int]:
    """Live child processes of `pid` (the postmaster's background workers and backends)."""
    pids = (int(entry.name) for entry in Path("/proc").iterdir() if entry.name.isdigit())
    return [
        child for child in pids if (f := _stat_fields(child)) is not None and int(f[1]) == pid and is_running(child)
    ]


async def fetch_one(dsn: str, sql: str) -> object:
    connection = await asyncpg.connect(dsn)
    try:
        return await connection.fetchval(sql)
    finally:
        await connection.close()


@pytest.fixture
def data_dir():
    with embedded_data_dir() as path:
        yield path


async def gone(pids: list[int]) -> None:
    """Wait until none of `pids` is running."""
    await eventually(lambda: asyncio.sleep(0, result=None if any(map(is_running, pids)) else True))


async def test_stop_leaves_no_server_process_behind(data_dir):
    """After stop() neither the postmaster nor any of its children is running."""
    server = EmbeddedPostgres(data_dir, durable=False)
    try:
        dsn = await asyncio.to_thread(server.start)
        pid = server.pid
        assert pid is not None
        connection = await asyncpg.connect(dsn)  # a backend too, not only background workers
        try:
            children = children_of(pid)
            await asyncio.to_thread(server.stop)
        finally:
            connection.terminate()
    finally:
        server.stop()
    assert len(children) >= 3
    assert [p for p in [pid, *children] if is_running(p)] == []
    assert server.pid is None
    assert not (data_dir / "postmaster.pid").exists()


async def test_a_restarted_server_keeps_its_data(data_dir):
    """Stopping and starting over the same data directory reuses it, rows included."""
    with EmbeddedPostgres(data_dir) as server:
        connection = await asyncpg.connect(server.dsn)
        await connection.execute("CREATE TABLE kept (v text); INSERT INTO kept VALUES ('still here')")
        await connection.close()
    with EmbeddedPostgres(data_dir) as server:
        assert await fetch_one(server.dsn, "SELECT v FROM kept") == "still here"


async def test_restart_comes_back_on_the_same_port_with_its_data(data_dir):
    """A restarted server answers at the address its clients already know (a server picked its port freely)."""
    server = EmbeddedPostgres(data_dir, durable=False)
    try:
        dsn = await asyncio.to_thread(server.start)
        await fetch_one(dsn, "CREATE TABLE kept AS SELECT 7 AS n")
        old_pid = server.pid
        assert await asyncio.to_thread(server.restart) == dsn
        assert server.pid != old_pid
        assert await fetch_one(dsn, "SELECT n FROM kept") == 7
    finally:
        await asyncio.to_thread(server.stop)


async def test_restarts_while_grpc_calls_run_in_this_process_all_come_up(data_dir):
    """Started as another user, the server is forked rather than vforked, and gRPC's fork handlers (disabled in
    tests/conftest.py) crashed about one such child in four while calls were in flight."""
    server = grpc.aio.server()
    health_pb2_grpc.add_HealthServicer_to_server(health.aio.HealthServicer(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    calling = True

    async def keep_calling() -> None:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            while calling:
                await stub.Check(health_pb2.HealthCheckRequest())

    callers = [asyncio.create_task(keep_calling()) for _ in range(4)]
    postgres = EmbeddedPostgres(data_dir, durable=False)
    try:
        dsn = await asyncio.to_thread(postgres.start)
        for _ in range(8):
            assert await asyncio.to_thread(postgres.restart) == dsn
        assert await fetch_one(dsn, "SELECT 1") == 1
    finally:
        calling = False
        await asyncio.gather(*callers)
        await server.stop(0)
        await asyncio.to_thread(postgres.stop)


async def test_a_server_left_running_on_the_data_dir_is_stopped_and_replaced(data_dir):
    """A second start over a live server's directory stops that server and serves itself."""
    first = EmbeddedPostgres(data_dir, durable=False)
    second = EmbeddedPostgres(data_dir, durable=False)
    try:
        await asyncio.to_thread(first.start)
        old_pid = first.pid
        assert old_pid is not None
        old_children = children_of(old_pid)
        dsn = await asyncio.to_thread(second.start)
        assert [p for p in [old_pid, *old_children] if is_running(p)] == []
        await asyncio.to_thread(first.stop)  # reaps its exited child, touches nothing else
        assert await fetch_one(dsn, "SELECT 1") == 1
    finally:
        first.stop()
        second.stop()


async def test_a_server_killed_hard_restarts_over_its_stale_pid_file(data_dir):
    """After SIGKILL the pid file is stale (its pid a zombie); the next start recovers the committed rows."""
    killed = EmbeddedPostgres(data_dir)
    try:
        dsn = await asyncio.to_thread(killed.start)
        connection = await asyncpg.connect(dsn)
        await connection.execute("CREATE TABLE kept (v int); INSERT INTO kept VALUES (7)")
        await connection.close()
        pid = killed.pid
        assert pid is not None
        children = children_of(pid)
        os.kill(pid, signal.SIGKILL)
        await gone([pid, *children])  # orphaned workers notice the postmaster's death and exit
        assert (data_dir / "postmaster.pid").exists()
        with EmbeddedPostgres(data_dir) as restarted:
            assert await fetch_one(restarted.dsn, "SELECT v FROM kept") == 7
    finally:
        killed.stop()


def test_a_directory_holding_something_else_is_refused(data_dir):
    """A non-empty directory that is not a cluster is never initialised over."""
    data_dir.mkdir()
    (data_dir / "notes.txt").write_text("mine")
    with pytest.raises(EmbeddedPostgresError, match="neither empty nor a PostgreSQL data directory"):
        EmbeddedPostgres(data_dir).start()
    assert (data_dir / "notes.txt").read_text() == "mine"


async def test_the_local_dsn_reaches_the_server_over_its_unix_socket_and_again_after_a_restart(data_dir):
    """A client on this host gets the socket in the data directory (no server address: not TCP)."""
    server = EmbeddedPostgres(data_dir, durable=False)
    try:
        await asyncio.to_thread(server.start)
        assert server.socket_dir == data_dir
        assert await fetch_one(server.local_dsn, "SELECT inet_server_addr() IS NULL") is True
        assert await fetch_one(server.dsn, "SELECT host(inet_server_addr())") == "127.0.0.1"
        local_dsn = server.local_dsn
        await asyncio.to_thread(server.restart)
        assert server.local_dsn == local_dsn
        assert await fetch_one(local_dsn, "SELECT 1") == 1
    finally:
        await asyncio.to_thread(server.stop)


async def test_a_data_directory_too_long_for_a_socket_path_gets_the_tcp_dsn(data_dir):
    """A socket path is limited to 107 bytes: past that the server listens on TCP only, and local_dsn is TCP."""
    deep = data_dir.parent / ("long-" * 16) / "data"
    assert len(str(deep)) > 90
    server = EmbeddedPostgres(deep, durable=False)
    try:
        await asyncio.to_thread(server.start)
        assert server.socket_dir is None
        assert server.local_dsn == server.dsn
        assert await fetch_one(server.local_dsn, "SELECT host(inet_server_addr())") == "127.0.0.1"
        assert list(deep.glob(".s.PGSQL.*")) == []
    finally:
        await asyncio.to_thread(server.stop)
