"""`python -m thermostat.dev.stack` (`make run`): the whole stack on embedded defaults until Ctrl-C."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import secrets
import signal
import sys
from pathlib import Path

from thermostat.chassis.ports import port_from_env
from thermostat.chassis.registry import SERVICES
from thermostat.dev.stack.docker_daemon import demo_docker_from
from thermostat.dev.stack.supervisor import ROOT, Stack, StackConfig, demo_backends_from, edge_concurrency_from
from tools.envoy_config import DEFAULT_ADMIN_PORT, DEFAULT_STATS_PORT, listen_port_from_env

DEMO_CATALOGUE = [
    {
        "name": "local",
        "image": f"{sys.executable} -m thermostat.worker",
        "backend": "local",
        "max_workers": 2,
        "cool_down_seconds": 120,
    }
]
"""Without POOL_MACHINE_TYPES, the pool serves one local type running the reference worker (echo), so a newcomer
can submit a job right away."""


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
    generated_token = None
    if not os.environ.get("RIG_OPERATOR_TOKEN"):
        # start/stop refuse everyone without an operator token (fail closed); the demo mints one per run
        generated_token = secrets.token_urlsafe(18)
        os.environ["RIG_OPERATOR_TOKEN"] = generated_token
    generated_pool_token = None
    if not os.environ.get("STRATA_POOL_TOKEN"):
        # the pool refuses every job route without an API token; the demo mints one per run, as above
        generated_pool_token = secrets.token_urlsafe(18)
        os.environ["STRATA_POOL_TOKEN"] = generated_pool_token
    try:
        demo_backends = demo_backends_from(os.environ.get("POOL_DEMO_BACKENDS"))
        demo_docker = demo_docker_from(os.environ.get("POOL_DEMO_DOCKER"))
    except ValueError as error:
        sys.exit(str(error))
    if not os.environ.get("POOL_MACHINE_TYPES"):
        os.environ["POOL_MACHINE_TYPES"] = json.dumps(DEMO_CATALOGUE + demo_types(demo_backends))
    try:
        edge_port = listen_port_from_env(os.environ)
        edge_concurrency = edge_concurrency_from(os.environ.get("EDGE_CONCURRENCY"))
    except ValueError as error:
        sys.exit(str(error))
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
        service_ports={s.name: _port(s.port_env, s.default_port) for s in SERVICES},
        metrics_ports={s.name: _port(s.metrics_port_env, s.default_metrics_port) for s in SERVICES},
        demo_backends=demo_backends,
        demo_docker=demo_docker,
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
    if not stop.is_set():
        print(stack.summary(), flush=True)
        if generated_token:
            print(
                f"  RIG_OPERATOR_TOKEN was unset; this run's operator token (for the commands above):\n"
                f"  export RIG_OPERATOR_TOKEN={generated_token}\n",
                flush=True,
            )
        if generated_pool_token:
            print(
                f"  STRATA_POOL_TOKEN was unset; this run's pool API token (for the commands above):\n"
                f"  export STRATA_POOL_TOKEN={generated_pool_token}\n",
                flush=True,
            )
        await stop.wait()
    else:
        start.cancel()
        # a cancelled start stops what it started itself; waited for, so two stops never run side by side
        await asyncio.wait({start})
    print("devstack       | stopping ...", flush=True)
    await stack.stop()
    print("devstack       | stopped; no process left behind", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
