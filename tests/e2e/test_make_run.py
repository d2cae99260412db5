"""`make run`'s stack: up with a healthy edge from one command, and Ctrl-C leaves no process behind."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil
import pytest

from tests.fixtures.postgres import embedded_data_dir

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.e2e
def test_the_dev_stack_comes_up_healthy_and_ctrl_c_stops_every_process() -> None:
    """python -m thermostat.dev.stack starts Postgres, the simulator, both services and Envoy; SIGINT ends them all."""
    with embedded_data_dir() as data_dir:
        _run_and_stop(data_dir)


def _run_and_stop(tmp_path: Path) -> None:
    env = {**os.environ, "THERMOSTAT_DATA_DIR": str(tmp_path), "EDGE_PORT": "0", "EDGE_ADMIN_PORT": "0",
           "RUNPOD_SIMULATOR_PORT": "0", "POD_CONTROLLER_PORT": "0", "IDLE_MONITOR_PORT": "0",
           "RIG_OPERATOR_TOKEN": "e2e-operator"}
    for name in ("DATABASE_URL", "RUNPOD_V2_BASE_URL", "RUNPOD_API_KEY"):
        env.pop(name, None)
    proc = subprocess.Popen([sys.executable, "-m", "thermostat.dev.stack"], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    output: list[str] = []
    edge = None
    started = time.monotonic()
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            output.append(line)
            match = re.search(r"edge \(REST \+ gRPC\)\s+(http://127\.0\.0\.1:\d+)", line)
            if match:
                edge = match.group(1)
                break
            if time.monotonic() - started > 60:
                break
        assert edge, "".join(output[-40:])
        children = psutil.Process(proc.pid).children(recursive=True)
        names = {" ".join(c.cmdline()[1:4]) for c in children if c.is_running()}
        assert any("thermostat.pod_controller" in n for n in names)
        assert any("thermostat.idle_monitor" in n for n in names)
        assert any("thermostat.dev.simulators.runpod" in n for n in names)
        assert httpx.get(f"{edge}/health", timeout=5).status_code == 200
        pod = httpx.get(f"{edge}/api/pods/qwen", timeout=10).json()
        assert pod["configured"] is True
        assert pod["datacenter"] == "EU-RO-1"
        # reflection through the edge describes every public service, the monitor's included
        grpcurl = str(Path(sys.executable).parent / "grpcurl")
        described = subprocess.run([grpcurl, "-plaintext", edge.removeprefix("http://"), "describe",
                                    "thermostat.monitor.v1.IdleMonitor"], capture_output=True, text=True, timeout=30,
                                   check=False)
        assert "GetMonitorState" in described.stdout, described.stderr

        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=60)
        output.append(rest)
        assert proc.returncode == 0, "".join(output[-40:])
        assert "no process left behind" in rest
        time.sleep(0.2)
        assert [c.pid for c in children if c.is_running() and c.status() != psutil.STATUS_ZOMBIE] == []
        postgres = [p for p in psutil.process_iter(["cmdline"]) if str(tmp_path) in " ".join(p.info["cmdline"] or [])]
        assert postgres == []
    finally:
        if proc.poll() is None:
            # a failed assertion must not orphan the children (each runs in its own session): stop them first
            proc.send_signal(signal.SIGINT)
            try:
                proc.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
