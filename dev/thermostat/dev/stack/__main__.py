"""`python -m thermostat.dev.stack` (`make run`): the whole stack on embedded defaults until Ctrl-C."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import secrets
import signal
import sys
from collections.abc import Mapping, MutableMapping
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
from thermostat.dev.stack.supervisor import (
    ROOT,
    Stack,
    StackConfig,
    demo_backends_from,
    edge_concurrency_from,
    engine_from,
)
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

TOKENS = {
    "RIG_OPERATOR_TOKEN": "pod start/stop and budget writes refuse everyone without it (fail closed)",
    "STRATA_POOL_TOKEN": "every pool job route answers 401 without it",
    "STRATA_POOL_ADMIN_TOKEN": "the catalogue and tenant budgets are written with it",
    "THERMOSTAT_INFERENCE_TOKEN": "the OpenAI endpoint (/openai/v1) answers 401 without it",
}
"""The tokens the quick starts use, each minted for the run when unset (why each is needed)."""


def mint_tokens(environ: MutableMapping[str, str]) -> list[str]:
    """Set each unset token of TOKENS in `environ` to a fresh one; the names minted."""
    minted = []
    for name in TOKENS:
        if not environ.get(name):
            environ[name] = secrets.token_urlsafe(18)
            minted.append(name)
    return minted


def exports(environ: Mapping[str, str], minted: list[str], edge_url: str) -> str:
    """The block of `export` lines to paste into another shell: every quick start (cockpit, bot, notebook,
    operator CLI) runs against this stack with it, in any order. A token set before `make run` is the caller's
    own and is named, not printed."""
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


def _data_dir() -> Path:
    return Path(os.environ.get("THERMOSTAT_DATA_DIR") or ROOT / ".data").absolute()


async def main() -> int:
    logging.basicConfig(level=logging.INFO, format="devstack       | %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    minted = mint_tokens(os.environ)
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
        service_ports={
            **{s.name: _port(s.port_env, s.default_port) for s in SERVICES},
            **{f"{s.name}-http": _port(s.http_port_env, s.default_http_port) for s in SERVICES if s.http_port_env},
        },
        metrics_ports={s.name: _port(s.metrics_port_env, s.default_metrics_port) for s in SERVICES},
        demo_backends=demo_backends,
        demo_docker=demo_docker,
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
        print(f"devstack       | failed to start: {start.exception()}", file=sys.stderr)
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
    print("devstack       | stopping ...", flush=True)
    if watcher is not None:
        await asyncio.to_thread(watcher.stop)
    await stack.stop()
    print("devstack       | stopped; no process left behind", flush=True)
    return 1 if failed else 0


async def _start_prometheus(binary: str, settings: PrometheusSettings, stack: Stack) -> PrometheusProcess | None:
    """The shipped scrape config and rules over this stack's ports, storage under the data directory."""
    config = scrape_config(stack_targets(stack.metrics_ports, stack.edge_stats_url), interval=settings.interval)
    process = PrometheusProcess(binary, config, stack.config.data_dir / "prometheus", port=settings.port)
    try:
        await asyncio.to_thread(process.wait_ready)
    except RuntimeError as error:
        print(f"devstack       | prometheus failed to start: {error}", file=sys.stderr, flush=True)
        await asyncio.to_thread(process.stop)
        return None
    return process


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
