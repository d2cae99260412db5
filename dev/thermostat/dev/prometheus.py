"""A real Prometheus beside the dev stack (`make run PROMETHEUS=1`, tests/e2e/test_prometheus.py): the Debian
`prometheus` binary on a free loopback port, temporary storage, the shipped scrape config
(deploy/prometheus/prometheus.yml) with each target set to the port the stack chose, and the shipped rules."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx
import yaml

from thermostat.chassis.ports import free_port

ROOT = Path(__file__).resolve().parents[3]  # dev/thermostat/dev/ → the repository
PROMETHEUS_DIR = ROOT / "deploy" / "prometheus"
RULES = PROMETHEUS_DIR / "rules.yml"
SCRAPE_CONFIG = PROMETHEUS_DIR / "prometheus.yml"
INSTALL_HINT = "apt-get install prometheus (Debian's package: prometheus and promtool)"


def scrape_config(targets: Mapping[str, str], *, interval: str = "15s", rule_file: Path = RULES) -> dict[str, Any]:
    """The shipped scrape config with each job's target replaced by `targets[job]` (host:port), scrape and rule
    evaluation every `interval`, and the rules file named by absolute path."""
    config: dict[str, Any] = yaml.safe_load(SCRAPE_CONFIG.read_text())
    config["global"] = {"scrape_interval": interval, "evaluation_interval": interval}
    config["rule_files"] = [str(rule_file)]
    for job in config["scrape_configs"]:
        (static,) = job["static_configs"]
        static["targets"] = [targets[job["job_name"]]]
    return config


class PrometheusProcess:
    """`prometheus` started on 127.0.0.1:<free port> with `config`, its storage and log under `data_dir`."""

    def __init__(self, binary: str, config: Mapping[str, Any], data_dir: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        data_dir.mkdir(parents=True, exist_ok=True)
        config_path = data_dir / "prometheus.yml"
        config_path.write_text(yaml.safe_dump(dict(config), sort_keys=False))
        self.log_path = data_dir / "prometheus.log"
        self._log = self.log_path.open("w")
        self.proc = subprocess.Popen(
            [
                binary,
                f"--config.file={config_path}",
                f"--storage.tsdb.path={data_dir / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    def wait_ready(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"prometheus exited {self.proc.returncode}: {self.log_path.read_text()[-2000:]}")
            try:
                if httpx.get(f"{self.url}/-/ready", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"prometheus not ready within {timeout:.0f}s: {self.log_path}")
            time.sleep(0.2)

    def query(self, expr: str) -> list[dict[str, Any]]:
        """The instant vector `expr` evaluates to now."""
        response = httpx.get(f"{self.url}/api/v1/query", params={"query": expr}, timeout=10)
        body = response.json()
        if response.status_code != 200 or body.get("status") != "success":
            raise RuntimeError(f"query {expr!r}: {body}")
        return list(body["data"]["result"])

    def alerts(self) -> list[dict[str, Any]]:
        return list(httpx.get(f"{self.url}/api/v1/alerts", timeout=10).json()["data"]["alerts"])

    def targets(self) -> list[dict[str, Any]]:
        return list(httpx.get(f"{self.url}/api/v1/targets", timeout=10).json()["data"]["activeTargets"])

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


def prometheus_binary() -> str | None:
    return shutil.which("prometheus")
