"""The framework's floor for a SubmitJobSync: the same call, answered at once (bench/peers.py's "bare SubmitJobSync").

`python bench/_bare_call.py PORT` serves the pool's service on the chassis (ServiceHost: its interceptors, the
pool's own token and tenant rules, uvloop), where SubmitJobSync answers the job's payload as its result at once,
with the trailing metadata the pool's answer carries, and nothing else: no store, no worker, no wait. What a
real SubmitJobSync costs beyond this call is the pool's own work (the two statements, the worker hop and the
Python around them); what this call costs beyond a bare Health.Check is the contract's: a bearer token checked
on every call, the tenant header, the payload in and the result out.
"""

from __future__ import annotations

import asyncio
import signal
import sys
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]

import grpc  # noqa: E402
from google.api import httpbody_pb2  # noqa: E402

from thermostat.chassis.event_loop import choose_loop, run  # noqa: E402
from thermostat.chassis.registry import POOL_DISPATCHER  # noqa: E402
from thermostat.chassis.server import ServiceHost, ServiceSpec  # noqa: E402
from thermostat.pool.v1 import pool_pb2, pool_pb2_grpc  # noqa: E402
from thermostat.pool_dispatcher.access import Tokens, auth_rules, tenant_rules  # noqa: E402

API_TOKEN = "bench-pool-token"  # noqa: S105 - bench/pool_throughput.py's throw-away loopback token


class AnsweredAtOnce(pool_pb2_grpc.PoolDispatcherServicer):
    async def SubmitJobSync(
        self, request: pool_pb2.SubmitJobSyncRequest, context: grpc.aio.ServicerContext
    ) -> httpbody_pb2.HttpBody:
        context.set_trailing_metadata((("x-pool-job-id", str(uuid.uuid4())), ("x-pool-job-state", "completed")))
        return httpbody_pb2.HttpBody(content_type="application/octet-stream", data=request.payload.data)


async def main(port: int) -> None:
    spec = ServiceSpec(
        name=POOL_DISPATCHER.name,
        service_names=POOL_DISPATCHER.served,
        register=lambda server: pool_pb2_grpc.add_PoolDispatcherServicer_to_server(AnsweredAtOnce(), server),
        auth_rules=auth_rules(Tokens(api=API_TOKEN, admin=None)),
        tenant_rules=tenant_rules(),
    )
    host = ServiceHost(spec)
    await host.start(port=port)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    await host.stop(0)


if __name__ == "__main__":
    run(main(int(sys.argv[1])), choose_loop("uvloop"))
