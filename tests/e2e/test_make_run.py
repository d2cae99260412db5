"""`make run`'s stack: up with a healthy edge from one command, and Ctrl-C leaves no process behind — also
before the RunPod secret exists, when it comes up unconfigured instead of exiting."""

from __future__ import annotations

import asyncio
import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path

import asyncpg
import grpc
import httpx
import psutil
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.fixtures.metrics import assert_documented, parse
from tests.fixtures.postgres import embedded_data_dir
from thermostat.chassis.registry import SERVICES, public_services
from thermostat.dev.simulators.runpod.server import RunPodSimulator

ROOT = Path(__file__).resolve().parents[2]
OPERATOR = {"X-Rig-Operator-Token": "e2e-operator"}
POOL = {"Authorization": "Bearer e2e-pool", "X-Strata-Tenant": "e2e"}
SIM_KEY = "sim-key-for-the-unconfigured-stack"


class DevStack:
    """`python -m thermostat.dev.stack` as a child process, read up to its "Thermostat is up" summary."""

    def __init__(self, data_dir: Path, env: Mapping[str, str | None]) -> None:
        full = {
            **os.environ,
            "THERMOSTAT_DATA_DIR": str(data_dir),
            "EDGE_PORT": "0",
            "EDGE_ADMIN_PORT": "0",
            "EDGE_STATS_PORT": "0",
            "RUNPOD_SIMULATOR_PORT": "0",
            # every service on a free port: a fixed default collides with another stack on the same machine
            **{service.port_env: "0" for service in SERVICES},
            **{service.metrics_port_env: "0" for service in SERVICES},
            **{service.http_port_env: "0" for service in SERVICES if service.http_port_env},
            "RIG_OPERATOR_TOKEN": OPERATOR["X-Rig-Operator-Token"],
            "STRATA_POOL_TOKEN": POOL["Authorization"].removeprefix("Bearer "),
        }
        for name in (
            "DATABASE_URL",
            "RUNPOD_V2_BASE_URL",
            "RUNPOD_API_KEY",
            "RUNPOD_VOLUME_ID",
            "POOL_MACHINE_TYPES",
            "POOL_DEMO_BACKENDS",
            "STRATA_POOL_ADMIN_TOKEN",
        ):
            full.pop(name, None)
        for name, value in env.items():  # None: unset, as in a shell that never exported it
            if value is None:
                full.pop(name, None)
            else:
                full[name] = value
        self.data_dir = data_dir
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "thermostat.dev.stack"],
            cwd=ROOT,
            env=full,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.output: list[str] = []
        self.ports: dict[str, int] = {}
        self.metrics: dict[str, str] = {}  # each service's /metrics URL, as the summary prints it
        self.edge_stats = ""
        self.edge = ""
        self._reader: threading.Thread | None = None
        self._lines: queue.Queue[str] = queue.Queue()

    def wait_up(self) -> str:
        """The edge URL once the summary is printed (its service lines read as well)."""
        assert self.proc.stdout is not None
        started = time.monotonic()
        for line in self.proc.stdout:
            self.output.append(line)
            service = re.match(r"\s+(pod-controller|idle-monitor|pool-dispatcher)\s+127\.0\.0\.1:(\d+)", line)
            if service:
                self.ports[service.group(1)] = int(service.group(2))
            metrics = re.match(r"\s+([a-z-]+)\s+127\.0\.0\.1:\d+ .*metrics (http://127\.0\.0\.1:\d+/metrics)", line)
            if metrics:
                self.metrics[metrics.group(1)] = metrics.group(2)
            stats = re.search(r"edge stats\s+(http://127\.0\.0\.1:\d+/stats/prometheus)", line)
            if stats:
                self.edge_stats = stats.group(1)
            match = re.search(r"edge \(REST \+ gRPC\)\s+(http://127\.0\.0\.1:\d+)", line)
            if match:
                self.edge = match.group(1)
            if "Ctrl-C stops everything" in line or time.monotonic() - started > 60:
                break
        assert self.edge and len(self.ports) == 3, "".join(self.output[-40:])
        return self.edge

    def follow(self) -> None:
        """Keep reading the output after wait_up, so a test can wait for a line while the stack runs."""

        def read() -> None:
            assert self.proc.stdout is not None
            for line in self.proc.stdout:
                self._lines.put(line)

        self._reader = threading.Thread(target=read, daemon=True)
        self._reader.start()

    def wait_for_line(self, pattern: str, timeout: float = 30) -> str:
        """The first line (read after follow()) matching `pattern`."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(
                    f"no line matching {pattern!r} within {timeout:.0f}s:\n" + "".join(self.output[-40:])
                ) from None
            self.output.append(line)
            if re.search(pattern, line):
                return line

    def interrupt(self) -> str:
        """Ctrl-C, and the rest of the output once the stack has stopped."""
        self.proc.send_signal(signal.SIGINT)
        if self._reader is not None:
            self.proc.wait(timeout=60)
            self._reader.join(timeout=10)
            rest = "".join(self._drain())
            assert self.proc.stdout is not None
            self.proc.stdout.close()
        else:
            rest, _ = self.proc.communicate(timeout=60)
        self.output.append(rest)
        assert self.proc.returncode == 0, "".join(self.output[-40:])
        assert "no process left behind" in rest
        return "".join(self.output)

    def _drain(self) -> list[str]:
        lines = []
        while not self._lines.empty():
            lines.append(self._lines.get_nowait())
        return lines

    def postgres_port(self) -> int:
        """The embedded Postgres's TCP port, as the summary prints it."""
        for line in self.output:
            match = re.match(r"\s+postgres \(embedded\)\s+127\.0\.0\.1:(\d+)", line)
            if match:
                return int(match.group(1))
        raise AssertionError("no postgres line in the summary:\n" + "".join(self.output[-40:]))

    def kill(self) -> None:
        if self.proc.poll() is None:
            # a failed assertion must not orphan the children (each runs in its own session): stop them first
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=60) if self._reader is not None else self.proc.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self._reader is not None:
            self._reader.join(timeout=10)
        if self.proc.stdout is not None:
            # also when the stack exited on its own before wait_up finished: the pipe must not outlive the test
            self.proc.stdout.close()


async def client_addresses(port: int) -> set[str | None]:
    """The client address of every other client backend of the server on `port` (None: a Unix socket)."""
    connection = await asyncpg.connect(f"postgresql://postgres@127.0.0.1:{port}/postgres")
    try:
        rows = await connection.fetch(
            "SELECT host(client_addr) AS addr FROM pg_stat_activity"
            " WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()"
        )
    finally:
        await connection.close()
    return {row["addr"] for row in rows}


@pytest.mark.e2e
def test_the_dev_stack_comes_up_healthy_and_ctrl_c_stops_every_process() -> None:
    """python -m thermostat.dev.stack starts Postgres, the simulator, both services and Envoy; SIGINT ends them all."""
    with embedded_data_dir() as data_dir:
        stack = DevStack(data_dir, {})
        try:
            edge = stack.wait_up()
            # the demo catalogue's local type: a job boots a reference worker, which Ctrl-C must stop too
            job = httpx.post(f"{edge}/v1/jobs/sync?machine_type=local", content=b"hello", headers=POOL, timeout=30)
            assert (job.status_code, job.content) == (200, b"hello")
            children = psutil.Process(stack.proc.pid).children(recursive=True)
            names = {" ".join(c.cmdline()[1:4]) for c in children if c.is_running()}
            assert any("thermostat.pod_controller" in n for n in names)
            assert any("thermostat.idle_monitor" in n for n in names)
            assert any("thermostat.pool_dispatcher" in n for n in names)
            assert any("thermostat.worker" in n for n in names)
            assert any("thermostat.dev.simulators.runpod" in n for n in names)
            assert httpx.get(f"{edge}/health", timeout=5).status_code == 200
            # every service reaches the embedded Postgres over its Unix socket (no client address), not TCP
            assert asyncio.run(client_addresses(stack.postgres_port())) == {None}, "".join(stack.output[-40:])
            # make run prints where each service's /metrics is and the edge's stats; each answers
            assert sorted(stack.metrics) == sorted(s.name for s in SERVICES), "".join(stack.output[-40:])
            for name, url in stack.metrics.items():
                families = parse(httpx.get(url, timeout=10).text)
                # every service that takes leases counts their takeovers; the gateway takes none, it counts requests
                expected = (
                    "thermostat_gateway_requests_total" if name == "gateway" else "thermostat_lease_takeovers_total"
                )
                assert expected in families, name
                assert_documented(families)
            pool = parse(httpx.get(stack.metrics["pool-dispatcher"], timeout=10).text)
            assert pool["thermostat_pool_jobs_finished_total"].value(machine_type="local", state="completed") == 1
            assert "envoy_cluster_upstream_rq" in httpx.get(stack.edge_stats, timeout=10).text
            pod = httpx.get(f"{edge}/api/pods/qwen", timeout=10).json()
            assert pod["configured"] is True
            assert pod["datacenter"] == "EU-RO-1"
            # reflection through the edge describes every public service, the monitor's included
            grpcurl = str(Path(sys.executable).parent / "grpcurl")
            described = subprocess.run(
                [grpcurl, "-plaintext", edge.removeprefix("http://"), "describe", "thermostat.monitor.v1.IdleMonitor"],
                capture_output=True,
                text=True,
                timeout=30,
                check=False,
            )
            assert "GetMonitorState" in described.stdout, described.stderr
            # and lists only what the edge routes: the public services, health and reflection, never an internal one
            listed = subprocess.run(
                [grpcurl, "-plaintext", edge.removeprefix("http://"), "list"],
                capture_output=True,
                text=True,
                timeout=30,
                check=False,
            )
            assert sorted(listed.stdout.split()) == sorted(
                [*public_services(), "grpc.health.v1.Health", "grpc.reflection.v1alpha.ServerReflection"]
            ), listed.stdout + listed.stderr

            stack.interrupt()
            assert _left_running(children) == []
            postgres = [
                p for p in psutil.process_iter(["cmdline"]) if str(data_dir) in " ".join(p.info["cmdline"] or [])
            ]
            assert postgres == []
        finally:
            stack.kill()


@pytest.mark.e2e
def test_the_demo_backends_serve_a_type_each_through_the_edge_and_ctrl_c_stops_their_machines() -> None:
    """POOL_DEMO_BACKENDS=docker,fly,runpod: the Docker and Fly simulators run beside the RunPod one, the demo
    catalogue has demo-docker, demo-fly and demo-runpod, a job on each boots a reference worker behind its
    simulated provider, and Ctrl-C leaves none of them running."""
    with embedded_data_dir() as data_dir:
        stack = DevStack(data_dir, {"POOL_DEMO_BACKENDS": "docker,fly,runpod"})
        try:
            edge = stack.wait_up()
            summary = "".join(stack.output)
            for kind in ("docker", "fly", "runpod"):
                assert f"machine type demo-{kind}" in summary
                job = httpx.post(
                    f"{edge}/v1/jobs/sync?machine_type=demo-{kind}", content=kind.encode(), headers=POOL, timeout=60
                )
                assert (job.status_code, job.content) == (200, kind.encode()), job.text
            children = psutil.Process(stack.proc.pid).children(recursive=True)
            names = [" ".join(c.cmdline()[1:4]) for c in children if c.is_running()]
            assert any("thermostat.dev.simulators.docker" in n for n in names)
            assert any("thermostat.dev.simulators.fly" in n for n in names)
            assert sum("thermostat.worker" in n for n in names) == 3
            stack.interrupt()
            assert _left_running(children) == []
        finally:
            stack.kill()


@pytest.mark.e2e
@pytest.mark.parametrize(
    "blank",
    [
        pytest.param({"RUNPOD_API_KEY": None}, id="api-key-unset"),
        pytest.param({"RUNPOD_API_KEY": SIM_KEY, "RUNPOD_VOLUME_ID": ""}, id="volume-id-blank"),
    ],
)
def test_the_dev_stack_comes_up_unconfigured_before_the_secret_and_calls_runpod_never(
    database_url: str, tmp_path: Path, blank: Mapping[str, str | None]
) -> None:
    """RUNPOD_V2_BASE_URL at a RunPod API (a recording simulator, not make run's own): every process stays up,
    GET answers configured false, start and stop 503, the monitor is SERVING and disabled until configured (said
    once and in GET …/monitor), and no request reaches RunPod."""
    with RunPodSimulator(api_key=SIM_KEY) as sim:
        sim.add_pod(pod_id="bootpod0000001", status="RUNNING", volume_id="bjn7d94ej9")
        stack = DevStack(tmp_path, {"RUNPOD_V2_BASE_URL": sim.base_url, "DATABASE_URL": database_url, **blank})
        try:
            edge = stack.wait_up()
            with httpx.Client(base_url=edge, timeout=10) as http:
                assert http.get("/health").status_code == 200
                pod = http.get("/api/pods/qwen")
                assert (pod.status_code, pod.json()["configured"]) == (200, False)
                for action in ("start", "stop"):
                    answer = http.post(f"/api/pods/qwen/{action}", headers=OPERATOR)
                    assert answer.status_code == 503, answer.text
                    assert "not configured" in answer.json()["detail"]
                monitor = _until_disabled(http)
            assert monitor["watchReason"].startswith("disabled until configured")
            with grpc.insecure_channel(f"127.0.0.1:{stack.ports['idle-monitor']}") as channel:
                health = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
            assert health.status == health_pb2.HealthCheckResponse.SERVING
            assert stack.proc.poll() is None
            output = stack.interrupt()
        finally:
            stack.kill()
    assert "no simulator started" in output, "the stack used the given RunPod API"
    said = [line for line in output.splitlines() if line.startswith("idle-monitor") and "disabled until" in line]
    assert len(said) == 1 and "pod qwen: disabled until configured" in said[0], output[-4000:]
    assert sim.requests() == [], "no call reached RunPod"


def _running(process: psutil.Process) -> bool:
    """Alive: a zombie only waits for its reaper, and a process may be reaped between two questions about it."""
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _left_running(processes: list[psutil.Process], within: float = 10.0) -> list[int]:
    """The pids of `processes` still running `within` seconds after the stack stopped (none as soon as all are
    gone): one killed a moment before the stack's exit is still tearing down, longer on a loaded machine; one
    left behind is running for good."""
    deadline = time.monotonic() + within
    while (left := [p.pid for p in processes if _running(p)]) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def _until_disabled(http: httpx.Client) -> dict[str, object]:
    """GET …/monitor until the monitor has had its first answer from the controller (asked right at start)."""
    deadline = time.monotonic() + 20
    while True:
        reply = http.get("/api/pods/qwen/monitor")
        assert reply.status_code == 200, reply.text
        body: dict[str, object] = reply.json()
        if body["watch"] == "DisabledUntilConfigured" or time.monotonic() > deadline:
            assert body["watch"] == "DisabledUntilConfigured", body
            return body
        time.sleep(0.05)


@pytest.mark.e2e
def test_a_service_killed_under_the_dev_stack_is_reported_and_restarted_and_ctrl_c_still_stops_everything() -> None:
    """kill -9 of the idle monitor: the stack says so, starts it again, /health is 200 again; SIGINT leaves nothing."""
    with embedded_data_dir() as data_dir:
        stack = DevStack(data_dir, {})
        try:
            edge = stack.wait_up()
            stack.follow()
            (monitor,) = [
                c
                for c in psutil.Process(stack.proc.pid).children(recursive=True)
                if "thermostat.idle_monitor" in " ".join(c.cmdline())
            ]
            monitor.kill()
            reported = stack.wait_for_line(r"idle-monitor killed by SIGKILL .* restarting it in")
            assert "restart 1 in a row" in reported
            stack.wait_for_line(r"idle-monitor restarted \(pid \d+\)")
            _until_health(edge, 200)
            (again,) = [
                c
                for c in psutil.Process(stack.proc.pid).children(recursive=True)
                if "thermostat.idle_monitor" in " ".join(c.cmdline())
            ]
            assert again.pid != monitor.pid
            children = psutil.Process(stack.proc.pid).children(recursive=True)

            stack.interrupt()
            assert _left_running(children) == []
            assert [
                p for p in psutil.process_iter(["cmdline"]) if str(data_dir) in " ".join(p.info["cmdline"] or [])
            ] == []
        finally:
            stack.kill()


def _until_health(edge: str, status: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while True:
        code = httpx.get(f"{edge}/health", timeout=5).status_code
        if code == status:
            return
        assert time.monotonic() < deadline, f"/health stayed {code}"
        time.sleep(0.1)


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("setting", "part"),
    [
        pytest.param("RUNPOD_SIMULATOR_PORT", "the RunPod simulator", id="simulator"),
        pytest.param("EDGE_ADMIN_PORT", "Envoy's admin interface", id="envoy-admin"),
        pytest.param("POOL_DISPATCHER_METRICS_PORT", "pool-dispatcher's metrics", id="a-service-metrics-port"),
    ],
)
def test_a_port_in_use_stops_make_run_at_once_naming_the_port_the_part_and_the_setting(
    tmp_path: Path, setting: str, part: str
) -> None:
    """A fixed port another process holds: one line before anything starts — the port, the part that wanted it,
    who holds it and the variable that moves it — not the part's traceback after the rest came up."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        stack = DevStack(tmp_path, {setting: str(port)})
        try:
            output, _ = stack.proc.communicate(timeout=60)
        finally:
            stack.kill()
    assert stack.proc.returncode == 1, output[-3000:]
    expected = (
        f"port {port} ({part}) is in use by pid {os.getpid()} ({psutil.Process().name()}): "
        f"set {setting} to another port (0: any free one)"
    )
    assert expected in output, output[-3000:]
    assert "Traceback" not in output and "store ready" not in output, output[-3000:]  # nothing was started
