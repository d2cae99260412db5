"""A real Prometheus beside the dev stack (`make run PROMETHEUS=1`, tests/e2e/test_prometheus.py): the Debian
`prometheus` binary on a free loopback port, temporary storage, the shipped scrape config
(deploy/prometheus/prometheus.yml) with each target set to the port the stack chose, and the shipped rules."""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import yaml

from thermostat.chassis.ports import free_port, port_from_env

ROOT = Path(__file__).resolve().parents[3]  # dev/thermostat/dev/ → the repository
PROMETHEUS_DIR = ROOT / "deploy" / "prometheus"
RULES = PROMETHEUS_DIR / "rules.yml"
SCRAPE_CONFIG = PROMETHEUS_DIR / "prometheus.yml"
INSTALL_HINT = "apt-get install prometheus (Debian's package: prometheus and promtool)"
DEFAULT_PORT = 9090
_DURATION = re.compile(r"[1-9][0-9]*(ms|s|m)")


@dataclass(frozen=True, slots=True, kw_only=True)
class PrometheusSettings:
    """`make run PROMETHEUS=1`: where the Prometheus beside the stack listens and how often it scrapes."""

    port: int = DEFAULT_PORT  # 0: a free one
    interval: str = "5s"


def prometheus_from_env(environ: Mapping[str, str]) -> PrometheusSettings | None:
    """PROMETHEUS=1 asks for it (unset, empty or 0: none); PROMETHEUS_PORT (default 9090, 0: free) and
    PROMETHEUS_SCRAPE_INTERVAL (default 5s; also the rules' evaluation interval). ValueError names the variable."""
    wanted = environ.get("PROMETHEUS", "").strip().lower()
    if wanted in ("", "0", "false", "no"):
        return None
    if wanted not in ("1", "true", "yes"):
        raise ValueError(f"PROMETHEUS={environ['PROMETHEUS']!r}: set 1 to start Prometheus beside the stack, or 0")
    interval = environ.get("PROMETHEUS_SCRAPE_INTERVAL", "").strip() or "5s"
    if not _DURATION.fullmatch(interval):
        raise ValueError(f"PROMETHEUS_SCRAPE_INTERVAL={interval!r} is not a duration such as 1s, 500ms or 1m")
    return PrometheusSettings(port=port_from_env(environ, "PROMETHEUS_PORT", DEFAULT_PORT), interval=interval)


def stack_targets(metrics_ports: Mapping[str, int], edge_stats_url: str) -> dict[str, str]:
    """The scrape config's job → host:port for a stack: each service's metrics port and the edge's stats."""
    targets = {name: f"127.0.0.1:{port}" for name, port in metrics_ports.items()}
    targets["edge"] = urlsplit(edge_stats_url).netloc
    return targets


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


class PrometheusAPI:
    """The HTTP API of a Prometheus at `url`: instant queries, alerts and scrape targets."""

    def __init__(self, url: str) -> None:
        self.url = url

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


class PrometheusProcess(PrometheusAPI):
    """`prometheus` started on 127.0.0.1:<free port> with `config`, its storage and log under `data_dir`."""

    def __init__(self, binary: str, config: Mapping[str, Any], data_dir: Path, *, port: int = 0) -> None:
        self.port = port or free_port()
        super().__init__(f"http://127.0.0.1:{self.port}")
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
