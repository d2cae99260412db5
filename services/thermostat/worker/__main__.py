"""`python -m thermostat.worker` — run the reference worker (configuration: see config.py).

It runs on uvloop when uvloop is installed (the image and requirements.txt install it: about 40% less CPU
per request than asyncio's own loop here), else on asyncio's loop, silently: both serve the same contract.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Callable

from .app import Worker
from .config import ConfigError, WorkerConfig, read_config
from .server import serve

# the pool's stop sends SIGTERM and kills after a grace (the local backend's is 5 s): finish within it
SHUTDOWN_GRACE_SECONDS = 1.0


def main() -> int:
    try:
        config = read_config(os.environ)
    except ConfigError as error:
        print(f"thermostat.worker: {error}", file=sys.stderr)
        return 2
    with asyncio.Runner(loop_factory=_loop_factory()) as runner:
        try:
            runner.run(_run(config))
        except OSError as error:  # the port is taken, the address is not this host's
            print(f"thermostat.worker: cannot listen on {config.host}:{config.port}: {error.strerror}", file=sys.stderr)
            return 1
    return 0


async def _run(config: WorkerConfig) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    worker = Worker(config)
    await serve(
        worker,
        host=config.host,
        port=config.port,
        max_body=config.max_payload_bytes,
        stop=stop,
        grace=SHUTDOWN_GRACE_SECONDS,
        ready=lambda: print(
            f"thermostat.worker: {config.handler} handler on http://{config.host}:{config.port}", file=sys.stderr
        ),
    )


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    try:
        import uvloop  # optional: the worker runs without it
    except ImportError:
        return None
    return uvloop.new_event_loop


if __name__ == "__main__":
    sys.exit(main())
