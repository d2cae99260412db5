"""The floors of a SubmitJobSync as servers: the same call answered at once, and the least pool built of the parts.

`python bench/_bare_call.py PORT` serves the pool's service on the chassis (ServiceHost: its interceptors, the
pool's own token and tenant rules, uvloop), where SubmitJobSync answers the job's payload as its result at once,
with the trailing metadata the pool's answer carries, and nothing else: no store, no worker, no wait
(bench/peers.py's "bare SubmitJobSync"). What it costs beyond a bare Health.Check is the contract's: a bearer
token checked on every call, the tenant header, the payload in and the result out.

`python bench/_bare_call.py PORT --compose CONFIG` is the least pool those parts make (bench/peers.py's "least
pool"): the same call, where each job's submit statement is written, then the job waits for one of the warm
workers in CONFIG (a machine runs one job at a time), is sent to it with the pool's WorkerClient, and its
completion statement is written before the machine is free and the result goes back. The two statements are the
repository's own submit and complete (bench/pool_pg_cost.py's steady state, on CONFIG's database of its own).
Nothing else: no admission, queue in the store, placement, runner task, lease or NOTIFY to another process. What
the pool spends beyond it is its design; what it spends is what any pool on these parts must.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

import grpc  # noqa: E402
from google.api import httpbody_pb2  # noqa: E402
from pool_throughput import API_TOKEN  # noqa: E402 - the rig's throw-away loopback token

from thermostat.chassis.event_loop import choose_loop, run  # noqa: E402
from thermostat.chassis.registry import POOL_DISPATCHER  # noqa: E402
from thermostat.chassis.server import ServiceHost, ServiceSpec  # noqa: E402
from thermostat.pool.v1 import pool_pb2, pool_pb2_grpc  # noqa: E402
from thermostat.pool_dispatcher.access import Tokens, auth_rules, tenant_rules  # noqa: E402
from thermostat.providers.pool.worker_client import WorkerClient  # noqa: E402
from thermostat.store.db import create_pool  # noqa: E402


class AnsweredAtOnce(pool_pb2_grpc.PoolDispatcherServicer):
    async def SubmitJobSync(
        self, request: pool_pb2.SubmitJobSyncRequest, context: grpc.aio.ServicerContext
    ) -> httpbody_pb2.HttpBody:
        return _completed(context, request.payload.data)


class LeastPool(pool_pb2_grpc.PoolDispatcherServicer):
    def __init__(self, statements: Any, client: WorkerClient, machines: list[dict[str, str]]) -> None:
        self.statements = statements
        self.client = client
        self.free: asyncio.Queue[dict[str, str]] = asyncio.Queue()
        for machine in machines:
            self.free.put_nowait(machine)

    async def SubmitJobSync(
        self, request: pool_pb2.SubmitJobSyncRequest, context: grpc.aio.ServicerContext
    ) -> httpbody_pb2.HttpBody:
        await self.statements.submit()
        machine = await self.free.get()
        try:
            reply = await self.client.execute(
                machine["endpoint"], machine["token"], request.payload.data, deadline_seconds=60
            )
            await self.statements.complete_one()
        finally:
            self.free.put_nowait(machine)
        return _completed(context, reply.body)


def _completed(context: grpc.aio.ServicerContext, result: bytes) -> httpbody_pb2.HttpBody:
    """A completed job's answer as the pool gives it: the result, its id and state in the trailing metadata."""
    context.set_trailing_metadata((("x-pool-job-id", str(uuid.uuid4())), ("x-pool-job-state", "completed")))
    return httpbody_pb2.HttpBody(content_type="application/octet-stream", data=result)


async def main(port: int, config: dict[str, Any] | None) -> None:
    servicer: pool_pb2_grpc.PoolDispatcherServicer = AnsweredAtOnce()
    closing = []
    if config is not None:
        import asyncpg
        import pool_pg_cost

        pool = await create_pool(config["dsn"], min_size=2, max_size=8)
        listener = await asyncpg.connect(config["dsn"])
        statements = pool_pg_cost.SteadyState(pool, listener)
        await statements.start()
        client = WorkerClient()
        servicer = LeastPool(statements, client, config["machines"])
        closing = [client.aclose, listener.close, pool.close]
    spec = ServiceSpec(
        name=POOL_DISPATCHER.name,
        service_names=POOL_DISPATCHER.served,
        register=lambda server: pool_pb2_grpc.add_PoolDispatcherServicer_to_server(servicer, server),
        auth_rules=auth_rules(Tokens(api=API_TOKEN, admin=None)),
        tenant_rules=tenant_rules(),
    )
    host = ServiceHost(spec)
    await host.start(port=port)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    await host.stop(0)
    for close in closing:
        await close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("port", type=int)
    parser.add_argument("--compose", type=Path, default=None, help="the least pool: JSON with dsn and machines")
    args = parser.parse_args()
    config = json.loads(args.compose.read_text(encoding="utf-8")) if args.compose is not None else None
    run(main(args.port, config), choose_loop("uvloop"))
