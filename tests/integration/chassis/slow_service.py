"""A tiny service on the chassis, run as a child process by the graceful-shutdown test."""

import asyncio
import sys

import grpc

from thermostat.chassis.logs import configure_logging
from thermostat.chassis.server import ServiceHost, ServiceSpec, serve_until_signalled


async def slow(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
    print("sleeping", flush=True)  # the test signals only once the RPC is in flight, not after a guessed delay
    await asyncio.sleep(float(request.decode()))
    return b"finished"


def register(server: grpc.aio.Server) -> None:
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("test.Slow", {"Sleep": grpc.unary_unary_rpc_method_handler(slow)}),)
    )


async def main(port: int) -> None:
    configure_logging("slow-service")
    host = ServiceHost(ServiceSpec(name="slow", service_names=["test.Slow"], register=register))
    await serve_until_signalled(host, host="127.0.0.1", port=port, grace=5.0)


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1])))
