"""`python -m thermostat.dev.stack` (`make run`): the whole stack on embedded defaults until Ctrl-C."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import sys
from collections.abc import Mapping
from pathlib import Path

from thermostat.chassis.ports import port_from_env
from thermostat.chassis.registry import SERVICES
from thermostat.dev.engine.install import EngineInstallError, install
from thermostat.dev.engine.recipe import installation
from thermostat.dev.prometheus import (
    INSTALL_HINT,
    PrometheusProcess,
    PrometheusSettings,
    prometheus_binary,
    prometheus_from_env,
    scrape_config,
    stack_targets,
)
from thermostat.dev.stack.docker_daemon import demo_docker_from
from thermostat.dev.stack.ports import STACK_PORT_SHIFT, stack_metrics_port, stack_port
from thermostat.dev.stack.relay import STACK_PREFIX, human_logs, terminal
from thermostat.dev.stack.supervisor import (
    ROOT,
    Stack,
    StackConfig,
    demo_backends_from,
    edge_concurrency_from,
    engine_from,
)
from thermostat.dev.stack.tokens import TOKENS, mint_tokens
from tools.envoy_config import DEFAULT_ADMIN_PORT, DEFAULT_STATS_PORT, listen_port_from_env

WORKER = f"{sys.executable} -m thermostat.worker"
DEMO_CATALOGUE = [
    {"name": "local", "image": WORKER, "backend": "local", "max_workers": 2, "cool_down_seconds": 120},
    {"name": "python", "image": WORKER, "backend": "local", "max_workers": 2, "cool_down_seconds": 120,
     "env": {"STRATA_WORKER_HANDLER": "python"}},
    {"name": "sleep", "image": WORKER, "backend": "local", "max_workers": 2, "cool_down_seconds": 120,
     "env": {"STRATA_WORKER_HANDLER": "sleep", "STRATA_WORKER_SLEEP_SECONDS": "60"}},
]  # fmt: skip
"""Without POOL_MACHINE_TYPES, the pool serves three local types running the reference worker, so a newcomer can
submit a job right away: `local` answers the payload back (echo), `python` runs it as a Python cell (the
notebook quick start), `sleep` sleeps a minute or the payload's `seconds` (something to cancel)."""


def exports(environ: Mapping[str, str], minted: list[str], edge_url: str) -> str:
    """The block of `export` lines to paste into another shell: every quick start (cockpit, bot, notebook,
    operator CLI) runs against this stack with it, in any order, and again after a restart (the tokens are kept in
    the data directory). A token set before `make run` is the caller's own and is named, not printed."""
    lines = ["Paste into another shell for the quick starts (README):"]
    for name in TOKENS:
        lines.append(f"  export {name}={environ[name]}" if name in minted else f"  # {name}: as you set it")
    lines.append("  export STRATA_TENANT=demo")
    lines.append(f"  export THERMOSTAT_ADDR={edge_url.removeprefix('http://')}")
    return "\n".join(lines)


def demo_types(backends: tuple[str, ...]) -> list[dict[str, object]]:
    """One catalogue type per simulated backend (POOL_DEMO_BACKENDS), each running the reference worker."""
    fields: dict[str, dict[str, object]] = {"runpod": {"job_timeout_seconds": 90}}  # RunPod's proxy: 100 s
    return [
        {"name": f"demo-{kind}", "image": "strata-worker:latest", "backend": kind, "max_workers": 2,
         "cool_down_seconds": 120, **fields.get(kind, {})}
        for kind in backends
    ]  # fmt: skip


def _port(name: str, default: int) -> int:
    try:
        return port_from_env(os.environ, name, default)
    except ValueError as error:
        sys.exit(str(error))


def fixed_ports(environ: Mapping[str, str]) -> tuple[dict[str, int], dict[str, int]]:
    """Each service's gRPC and /metrics port under `make run`: its variable's, else the registry's moved below the
    ephemeral range (stack.ports); ValueError naming a variable that holds no port."""
    grpc_ports = {s.name: port_from_env(environ, s.port_env, stack_port(s)) for s in SERVICES}
    # a service's own HTTP API (the gateway's OpenAI API) moves below the ephemeral range the same way
    grpc_ports |= {
        f"{s.name}-http": port_from_env(environ, s.http_port_env, s.default_http_port - STACK_PORT_SHIFT)
        for s in SERVICES
        if s.http_port_env
    }
    metrics = {s.name: port_from_env(environ, s.metrics_port_env, stack_metrics_port(s)) for s in SERVICES}
    return grpc_ports, metrics


def _data_dir() -> Path:
    return Path(os.environ.get("THERMOSTAT_DATA_DIR") or ROOT / ".data").absolute()


async def main() -> int:
    logging.basicConfig(level=logging.INFO, format=f"{STACK_PREFIX}%(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    minted = mint_tokens(os.environ, _data_dir())
    try:
        demo_backends = demo_backends_from(os.environ.get("POOL_DEMO_BACKENDS"))
        demo_docker = demo_docker_from(os.environ.get("POOL_DEMO_DOCKER"))
        engine = engine_from(os.environ.get("ENGINE"))
    except ValueError as error:
        sys.exit(str(error))
    if engine == "vllm" and not installation().ready:
        try:  # on first use, with its progress (make run ENGINE=vllm runs `make engine` first anyway)
            await asyncio.to_thread(install)
        except EngineInstallError as error:
            sys.exit(f"ENGINE=vllm: the engine did not install: {error}")
    if not os.environ.get("POOL_MACHINE_TYPES"):
        os.environ["POOL_MACHINE_TYPES"] = json.dumps(DEMO_CATALOGUE + demo_types(demo_backends))
    try:
        edge_port = listen_port_from_env(os.environ)
        edge_concurrency = edge_concurrency_from(os.environ.get("EDGE_CONCURRENCY"))
        prometheus = prometheus_from_env(os.environ)
        service_ports, metrics_ports = fixed_ports(os.environ)
        short_lines = human_logs(os.environ, terminal=terminal())
    except ValueError as error:
        sys.exit(str(error))
    prometheus_path = prometheus_binary() if prometheus else None
    if prometheus and not prometheus_path:
        sys.exit(f"PROMETHEUS=1 needs the prometheus binary on PATH: {INSTALL_HINT}")
    config = StackConfig(
        data_dir=_data_dir(),
        database_url=os.environ.get("DATABASE_URL") or None,
        runpod_base_url=os.environ.get("RUNPOD_V2_BASE_URL") or None,
        runpod_api_key=os.environ.get("RUNPOD_API_KEY") or None,
        edge_port=edge_port,
        edge_concurrency=edge_concurrency,
        admin_port=_port("EDGE_ADMIN_PORT", DEFAULT_ADMIN_PORT),
        stats_port=_port("EDGE_STATS_PORT", DEFAULT_STATS_PORT),
        simulator_port=_port("RUNPOD_SIMULATOR_PORT", 9100),
        service_ports=service_ports,
        metrics_ports=metrics_ports,
        demo_backends=demo_backends,
        demo_docker=demo_docker,
        human_logs=short_lines,
        engine=engine,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    stack = Stack(config)
    start = asyncio.create_task(stack.start())
    waiter = asyncio.create_task(stop.wait())
    await asyncio.wait({start, waiter}, return_when=asyncio.FIRST_COMPLETED)
    if start.done() and start.exception() is not None:
        waiter.cancel()
        print(f"{STACK_PREFIX}failed to start: {start.exception()}", file=sys.stderr)
        return 1
    watcher: PrometheusProcess | None = None
    failed = False
    if not stop.is_set():
        summary = stack.summary(exports(os.environ, minted, stack.edge_url))
        if prometheus and prometheus_path:
            watcher = await _start_prometheus(prometheus_path, prometheus, stack)
            if watcher is None:
                failed = True
                stop.set()
            else:
                where = f"  prometheus           {watcher.url}   alerts {watcher.url}/alerts, graphs /graph"
                summary = summary.replace("\n\nCtrl-C stops", f"\n{where}\n\nCtrl-C stops")
        if watcher is not None or not prometheus:
            print(summary, flush=True)
        await stop.wait()
    else:
        start.cancel()
        # a cancelled start stops what it started itself; waited for, so two stops never run side by side
        await asyncio.wait({start})
    print(f"{STACK_PREFIX}stopping ...", flush=True)
    if watcher is not None:
        await asyncio.to_thread(watcher.stop)
    await stack.stop()
    print(f"{STACK_PREFIX}stopped; no process left behind", flush=True)
    return 1 if failed else 0


async def _start_prometheus(binary: str, settings: PrometheusSettings, stack: Stack) -> PrometheusProcess | None:
    """The shipped scrape config and rules over this stack's ports, storage under the data directory."""
    config = scrape_config(stack_targets(stack.metrics_ports, stack.edge_stats_url), interval=settings.interval)
    process = PrometheusProcess(binary, config, stack.config.data_dir / "prometheus", port=settings.port)
    try:
        await asyncio.to_thread(process.wait_ready)
    except RuntimeError as error:
        print(f"{STACK_PREFIX}prometheus failed to start: {error}", file=sys.stderr, flush=True)
        await asyncio.to_thread(process.stop)
        return None
    return process


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
