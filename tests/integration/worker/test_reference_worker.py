"""The reference worker keeps the worker-pool seed's worker contract, over real sockets, as a real child process."""

from __future__ import annotations

import asyncio
import io
import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from tests.fixtures.polling import eventually
from tests.fixtures.workers import RunningWorker, answers_health, reference_worker, worker_env
from thermostat.chassis.ports import free_port


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as client:
        yield client


async def test_health_answers_without_auth_and_reveals_no_secret(session: aiohttp.ClientSession) -> None:
    """GET /health is 200 without a token and does not contain the token."""
    async with reference_worker() as worker, session.get(f"{worker.url}/health") as response:
        assert response.status == 200
        body = await response.text()
        assert worker.token not in body
        assert (await response.json())["handler"] == "echo"


@pytest.mark.parametrize(
    "headers",
    [
        pytest.param({}, id="no-token"),
        pytest.param({"Authorization": "Bearer wrong"}, id="wrong-token"),
        pytest.param({"Authorization": "worker-token-for-tests"}, id="token-without-bearer"),
        pytest.param({"Authorization": "Basic d29ya2VyLXRva2Vu"}, id="other-scheme"),
    ],
)
async def test_execute_without_the_token_is_401(session: aiohttp.ClientSession, headers: dict[str, str]) -> None:
    """POST /execute and the cancel route demand the bearer token."""
    async with (
        reference_worker() as worker,
        session.post(f"{worker.url}/execute", data=b"x", headers=headers) as response,
    ):
        assert response.status == 401
        async with session.post(f"{worker.url}/v1/executions/b1/cancel", headers=headers) as response:
            assert response.status == 401


async def test_echo_returns_the_payload_verbatim(session: aiohttp.ClientSession) -> None:
    """The echo handler answers 200 with the payload's bytes, binary included."""
    payload = bytes(range(256)) * 64
    async with (
        reference_worker() as worker,
        session.post(f"{worker.url}/execute", data=payload, headers=worker.auth) as response,
    ):
        assert response.status == 200
        assert await response.read() == payload


async def test_a_16_mib_payload_is_accepted(session: aiohttp.ClientSession) -> None:
    """A 16 MiB payload (the pool's minimum limit) goes through, byte for byte."""
    payload = os.urandom(16 * 1024 * 1024)  # sent from a BytesIO: aiohttp warns on large raw bytes
    async with (
        reference_worker() as worker,
        session.post(f"{worker.url}/execute", data=io.BytesIO(payload), headers=worker.auth) as response,
    ):
        assert response.status == 200
        assert await response.read() == payload


async def test_fail_handler_answers_500_with_its_message(session: aiohttp.ClientSession) -> None:
    """The fail handler is a cell whose code raised: 500 with a message."""
    async with (
        reference_worker(STRATA_WORKER_HANDLER="fail", STRATA_WORKER_FAIL_MESSAGE="ZeroDivisionError") as worker,
        session.post(f"{worker.url}/execute", data=b"{}", headers=worker.auth) as response,
    ):
        assert response.status == 500
        assert await response.text() == "ZeroDivisionError"


async def test_sleep_handler_reads_its_duration_from_the_payload(session: aiohttp.ClientSession) -> None:
    """The sleep handler sleeps for the payload's `seconds`."""
    async with (
        reference_worker(STRATA_WORKER_HANDLER="sleep", STRATA_WORKER_SLEEP_SECONDS="60") as worker,
        session.post(f"{worker.url}/execute", data=b'{"seconds": 0.05}', headers=worker.auth) as response,
    ):
        assert (response.status, await response.text()) == (200, "slept 0.05")


async def execute_in_background(
    session: aiohttp.ClientSession, worker: RunningWorker, payload: bytes
) -> asyncio.Task[tuple[int, str]]:
    async def call() -> tuple[int, str]:
        async with session.post(f"{worker.url}/execute", data=payload, headers=worker.auth) as response:
            return response.status, await response.text()

    task = asyncio.create_task(call())

    async def running() -> bool | None:
        async with session.get(f"{worker.url}/health") as response:
            return True if (await response.json())["running"] == 1 else None

    await eventually(running, timeout=5)
    return task


async def test_cancel_ends_the_running_execution_of_that_build(session: aiohttp.ClientSession) -> None:
    """Cancelling a build ends its execute call at once with 409; the worker stays up for the next job."""
    async with reference_worker(STRATA_WORKER_HANDLER="sleep") as worker:
        execute = await execute_in_background(session, worker, b'{"seconds": 60, "build_id": "build-1"}')
        async with session.post(f"{worker.url}/v1/executions/build-1/cancel", headers=worker.auth) as response:
            assert response.status == 200
        status, text = await asyncio.wait_for(execute, 5)
        assert (status, text) == (409, "execution build-1 cancelled")
        async with session.post(f"{worker.url}/execute", data=b'{"seconds": 0}', headers=worker.auth) as response:
            assert response.status == 200


async def test_cancel_of_another_build_is_404_and_leaves_the_job_running(session: aiohttp.ClientSession) -> None:
    """A cancel names the build; one that is not running answers 404 and touches nothing."""
    async with reference_worker(STRATA_WORKER_HANDLER="sleep") as worker:
        execute = await execute_in_background(session, worker, b'{"seconds": 0.5, "build_id": "build-1"}')
        async with session.post(f"{worker.url}/v1/executions/build-2/cancel", headers=worker.auth) as response:
            assert response.status == 404
        assert await asyncio.wait_for(execute, 5) == (200, "slept 0.5")


async def test_trace_headers_and_content_type_received_are_echoed(session: aiohttp.ClientSession) -> None:
    """traceparent / tracestate received on /execute come back in X-Strata-Received-* headers."""
    traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    headers = {**{"traceparent": traceparent, "tracestate": "congo=t61rcWkgMzE"}}
    async with (
        reference_worker() as worker,
        session.post(
            f"{worker.url}/execute", data=b"x", headers={**worker.auth, **headers}, skip_auto_headers=["Content-Type"]
        ) as response,
    ):
        assert response.headers["X-Strata-Received-Traceparent"] == traceparent
        assert response.headers["X-Strata-Received-Tracestate"] == "congo=t61rcWkgMzE"
        assert "X-Strata-Received-Content-Type" not in response.headers


async def test_refuses_to_start_without_a_token() -> None:
    """No STRATA_WORKER_TOKEN: a clear message and a non-zero exit, nothing listening."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "thermostat.worker",
        env=worker_env(STRATA_WORKER_PORT=str(free_port())),
        stderr=asyncio.subprocess.PIPE,
    )
    _, stderr = await asyncio.wait_for(process.communicate(), 30)
    assert process.returncode == 2
    assert b"STRATA_WORKER_TOKEN is not set" in stderr


LIMIT = "STRATA_WORKER_MAX_PAYLOAD_BYTES"


@pytest.mark.parametrize(
    ("settings", "variable"),
    [
        pytest.param({"STRATA_WORKER_PORT": "http"}, "STRATA_WORKER_PORT", id="port-not-a-number"),
        pytest.param({"PORT": "70000"}, "PORT", id="port-out-of-range"),
        pytest.param({"STRATA_WORKER_PORT": "80²"}, "STRATA_WORKER_PORT", id="port-of-non-ascii-digits"),
        pytest.param(
            {"STRATA_WORKER_MAX_PAYLOAD_BYTES": "1²"}, "STRATA_WORKER_MAX_PAYLOAD_BYTES", id="limit-non-ascii"
        ),
        pytest.param(
            {"STRATA_WORKER_MAX_PAYLOAD_BYTES": "9" * 5000}, "STRATA_WORKER_MAX_PAYLOAD_BYTES", id="limit-huge"
        ),
        pytest.param({"STRATA_WORKER_HANDLER": "shell"}, "STRATA_WORKER_HANDLER", id="unknown-handler"),
    ],
)
async def test_bad_setting_is_refused_naming_the_variable(settings: dict[str, str], variable: str) -> None:
    """A setting the worker cannot use stops it at start, naming the variable."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "thermostat.worker",
        env=worker_env(STRATA_WORKER_TOKEN="t", **settings),
        stderr=asyncio.subprocess.PIPE,
    )
    _, stderr = await asyncio.wait_for(process.communicate(), 30)
    assert process.returncode == 2
    assert variable.encode() in stderr


async def test_port_falls_back_to_port_and_binds_loopback(session: aiohttp.ClientSession) -> None:
    """Without STRATA_WORKER_PORT the worker listens on PORT, on 127.0.0.1."""
    port = free_port()
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "thermostat.worker",
        env=worker_env(STRATA_WORKER_TOKEN="t", PORT=str(port)),
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        assert await eventually(lambda: answers_health(f"http://127.0.0.1:{port}"), timeout=15)
    finally:
        process.terminate()
        await process.wait()


async def test_sigterm_stops_the_worker_promptly() -> None:
    """SIGTERM (the pool's stop) ends the worker within its grace, even mid-job."""
    async with reference_worker(STRATA_WORKER_HANDLER="sleep") as worker, aiohttp.ClientSession() as session:
        execute = await execute_in_background(session, worker, b'{"seconds": 60}')
        worker.process.terminate()
        assert await asyncio.wait_for(worker.process.wait(), 5) is not None
        with pytest.raises(aiohttp.ClientError):
            await execute


async def _pid_gone(pid: int) -> bool | None:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return None


async def test_the_python_handler_runs_the_cell_and_answers_its_output(session: aiohttp.ClientSession) -> None:
    """A notebook cell: its stdout is the result; a cell that raises is a 500 naming the exception."""
    cell = json.dumps({"build_id": "cell-1", "source": "print(1 + 1)"}).encode()
    async with reference_worker(STRATA_WORKER_HANDLER="python") as worker:
        async with session.post(f"{worker.url}/execute", data=cell, headers=worker.auth) as response:
            assert (response.status, await response.read()) == (200, b"2\n")
        async with session.post(f"{worker.url}/execute", data=b"print(6 * 7)", headers=worker.auth) as response:
            assert (response.status, await response.read()) == (200, b"42\n")  # the code as plain text
        async with session.post(f"{worker.url}/execute", data=b"1 / 0", headers=worker.auth) as response:
            body = await response.text()
            assert response.status == 500 and body.endswith("ZeroDivisionError: division by zero"), body


async def test_the_cell_does_not_see_the_workers_token(session: aiohttp.ClientSession) -> None:
    source = b"import os; print(sorted(k for k in os.environ if k.startswith('STRATA')))"
    async with (
        reference_worker(STRATA_WORKER_HANDLER="python") as worker,
        session.post(f"{worker.url}/execute", data=source, headers=worker.auth) as response,
    ):
        assert (response.status, await response.read()) == (200, b"[]\n")


async def test_the_cell_is_given_the_workers_egress_proxy_and_nothing_else(session: aiohttp.ClientSession) -> None:
    """A machine whose type opts into egress has HTTP(S)_PROXY: its cells get them (their only way out), still no
    STRATA variable."""
    source = b"import os; print(sorted(k for k in os.environ if k not in ('PATH', 'LANG', 'LC_CTYPE')))"
    proxy = {"HTTP_PROXY": "http://172.18.0.3:8888", "https_proxy": "http://172.18.0.3:8888", "NO_PROXY": "localhost"}
    async with (
        reference_worker(STRATA_WORKER_HANDLER="python", **proxy) as worker,
        session.post(f"{worker.url}/execute", data=source, headers=worker.auth) as response,
    ):
        assert (response.status, await response.read()) == (200, b"['HTTP_PROXY', 'NO_PROXY', 'https_proxy']\n")


@pytest.mark.parametrize(
    "ended_by", [pytest.param("cancel", id="build-cancel"), pytest.param("deadline", id="deadline")]
)
async def test_a_cell_cancelled_or_past_the_jobs_deadline_is_killed(
    session: aiohttp.ClientSession, tmp_path: Path, ended_by: str
) -> None:
    """The kernel interrupt (a cancel of the cell's build) and the job's timeout (the pool's call gives up and
    drops the connection) both end the cell's process, and what it started: nothing of it keeps running."""
    pid_file = tmp_path / "pid"
    source = (
        "import os, subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
        f"open({str(pid_file)!r}, 'w').write(f'{{os.getpid()}} {{child.pid}}')\n"
        "time.sleep(120)\n"
    )
    cell = json.dumps({"build_id": "cell-9", "source": source}).encode()
    async with reference_worker(STRATA_WORKER_HANDLER="python") as worker:
        timeout = aiohttp.ClientTimeout(total=None if ended_by == "cancel" else 2.0)
        running = asyncio.create_task(
            session.post(f"{worker.url}/execute", data=cell, headers=worker.auth, timeout=timeout)
        )

        async def started() -> bool | None:
            return True if pid_file.exists() and pid_file.read_text().count(" ") == 1 else None

        await eventually(started, timeout=15)
        pids = [int(p) for p in pid_file.read_text().split()]
        if ended_by == "cancel":
            async with session.post(f"{worker.url}/v1/executions/cell-9/cancel", headers=worker.auth) as cancel:
                assert cancel.status == 200
            answer = await running
            assert (answer.status, await answer.text()) == (409, "execution cell-9 cancelled")
        else:
            with pytest.raises(TimeoutError):
                await running
        for pid in pids:
            await eventually(lambda pid=pid: _pid_gone(pid), timeout=10)
