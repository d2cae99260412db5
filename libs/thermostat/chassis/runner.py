"""`python -m thermostat.<service>`: settings, logging, the store, the service, until SIGTERM.

A service that stopped cleanly ends its process at once (`exit_without_teardown`): its stop hooks have run (the
store closed, traces flushed), then every atexit handler (logging's flush among them) and the standard streams'
flush; what is skipped is only the interpreter's own teardown, which with grpc's core loaded takes 0.5-1 s of
an idle process (2 s on a loaded host) for nothing anyone reads. Every stop pays it: a rolling deploy's, `make
run`'s Ctrl-C (services stopped one after another), each test stack's.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import sys
from collections.abc import Awaitable, Callable, Mapping
from typing import NoReturn, TypeVar

from thermostat.chassis.event_loop import choose_loop, run, running_loop_name
from thermostat.chassis.logs import configure_logging
from thermostat.chassis.ports import port_from_env
from thermostat.chassis.registry import ServiceDef
from thermostat.chassis.server import ServiceHost, serve_until_signalled
from thermostat.chassis.settings import ServiceSettings, load_settings
from thermostat.chassis.tracing import configure_from_environment
from thermostat.store.db import Store

S = TypeVar("S", bound=ServiceSettings)
Build = Callable[[S, Mapping[str, str], Store], Awaitable[ServiceHost]]

log = logging.getLogger("thermostat.chassis.runner")


def service_main(settings_class: type[S], service: ServiceDef, *, build: Build[S]) -> NoReturn:
    """A service's `__main__`: its settings, then `run_service` on the event loop they name (EVENT_LOOP), then the
    process ends with its code (a failure raises as before, through the interpreter's ordinary exit)."""
    settings = load_settings(settings_class)
    choice = choose_loop(settings.event_loop)
    code = run(run_service(settings_class, service, build=build, settings=settings, fallback=choice.fallback), choice)
    exit_without_teardown(code)


def exit_without_teardown(code: int) -> NoReturn:
    """End the process now, after what an ordinary exit runs that anyone sees: the atexit handlers (logging's
    flush, any library's own) and the standard streams' flush; the interpreter's teardown is skipped (see above)."""
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe (the reader gone) or stream: nothing to write
            stream.flush()
    os._exit(code)


async def run_service(
    settings_class: type[S],
    service: ServiceDef,
    *,
    build: Build[S],
    settings: S | None = None,
    fallback: str | None = None,
) -> int:
    """Run one service over the store until signalled.

    A service never exits for want of configuration (an orchestrator would restart it in a loop): it comes up,
    serves what it can and says what is missing, like the idle monitor before the RunPod secret exists.
    The port is the settings field named for the registry's port variable (POD_CONTROLLER_PORT is the field
    pod_controller_port); Prometheus's /metrics is served on the registry's metrics port (its variable, else
    its default), for every service alike. `settings` already loaded (by `service_main`, to choose the loop) are used
    as they are; `fallback` says why the loop they asked for could not be had.
    """
    if settings is None:
        settings = load_settings(settings_class)
    name = service.name
    port: int = getattr(settings, service.port_env.lower())
    try:
        metrics_port = port_from_env(os.environ, service.metrics_port_env, service.default_metrics_port)
    except ValueError as error:
        print(f"invalid configuration:\n  {error}", file=sys.stderr)
        raise SystemExit(2) from None
    configure_logging(name, settings.log_level)
    if fallback is not None:
        log.warning("%s: %s: running on asyncio's own event loop", name, fallback)
    log.info("%s: event loop %s", name, running_loop_name())
    # OTLP export when OTEL_EXPORTER_OTLP_ENDPOINT asks for it and the tracing extra is installed
    flush_traces = configure_from_environment(name)
    if settings.database_url is None:
        sys.exit("DATABASE_URL is required (`make run` starts an embedded Postgres and sets it)")
    store = await Store.open(settings.database_url.get_secret_value(), application_name=name)
    host = await build(settings, os.environ, store)
    host.spec.on_stop = [*host.spec.on_stop, store.close, *([flush_traces] if flush_traces else [])]
    # every service's internal RPCs are guarded, whether or not its build() passed the token on
    host.spec.internal_token = host.spec.internal_token or settings.internal_token()
    await serve_until_signalled(
        host, host=settings.grpc_host, port=port, grace=settings.shutdown_grace_seconds, metrics_port=metrics_port
    )
    return 0
