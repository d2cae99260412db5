"""`python -m thermostat.<service>`: settings, logging, the store, the service, until SIGTERM."""

from __future__ import annotations

import os
import sys
from collections.abc import Awaitable, Callable, Mapping
from typing import TypeVar

from thermostat.chassis.logs import configure_logging
from thermostat.chassis.server import ServiceHost, serve_until_signalled
from thermostat.chassis.settings import ServiceSettings, load_settings
from thermostat.store.db import Store

S = TypeVar("S", bound=ServiceSettings)


async def run_service(
    settings_class: type[S],
    *,
    name: str,
    port: Callable[[S], int],
    build: Callable[[S, Mapping[str, str], Store], Awaitable[ServiceHost]],
) -> int:
    """Run one service over the store until signalled.

    A service never exits for want of configuration (an orchestrator would restart it in a loop): it comes up,
    serves what it can and says what is missing, like the idle monitor before the RunPod secret exists.
    """
    settings = load_settings(settings_class)
    configure_logging(name, settings.log_level)
    if settings.database_url is None:
        sys.exit("DATABASE_URL is required (`make run` starts an embedded Postgres and sets it)")
    store = await Store.open(settings.database_url.get_secret_value(), application_name=name)
    host = await build(settings, os.environ, store)
    host.spec.on_stop = [*host.spec.on_stop, store.close]
    await serve_until_signalled(host, host=settings.grpc_host, port=port(settings),
                                grace=settings.shutdown_grace_seconds)
    return 0
