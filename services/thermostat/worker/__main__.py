"""`python -m thermostat.worker` — run the reference worker (configuration: see config.py)."""

from __future__ import annotations

import os
import sys

from aiohttp import web

from .app import create_app
from .config import ConfigError, read_config


def main() -> int:
    try:
        config = read_config(os.environ)
    except ConfigError as error:
        print(f"thermostat.worker: {error}", file=sys.stderr)
        return 2
    print(f"thermostat.worker: {config.handler} handler on http://{config.host}:{config.port}", file=sys.stderr)
    # shutdown_timeout: the pool's stop sends SIGTERM and kills after a short grace; finish within it
    web.run_app(create_app(config), host=config.host, port=config.port, print=None, access_log=None,
                shutdown_timeout=1.0)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
