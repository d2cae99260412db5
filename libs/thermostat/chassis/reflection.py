"""Server reflection that describes what is there (issue 38): a service's own port describes the public services
it serves, health and reflection, and the one service the edge sends reflection to describes, to the edge, exactly
what the edge routes — every public service of the house, health and reflection. Neither describes an internal
service, not even by name (`describe`): those are for the deployment's services, which know them.

Both views answer from a descriptor pool of their own, built from the default pool with every service not in the
view taken out of its file: grpcio's reflection answers `describe` and `file_containing_symbol` from whatever
pool it is given, and the default pool holds every service the process imported. The edge marks its reflection
calls with EDGE_HEADER (tools/edge_grpc.py); a caller who sends it itself sees only the public view.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Collection, Iterable
from typing import Any

from google.protobuf import descriptor, descriptor_pb2, descriptor_pool
from grpc import aio
from grpc_reflection.v1alpha import reflection, reflection_pb2, reflection_pb2_grpc

EDGE_HEADER = "x-thermostat-reflection"
EDGE_VALUE = "edge"


def described_pool(services: Collection[str], source: descriptor_pool.DescriptorPool | None = None) -> Any:
    """A pool holding the files of `services` and their imports, with no other service in any of them."""
    source = source or descriptor_pool.Default()
    pool = descriptor_pool.DescriptorPool()
    added: set[str] = set()

    def add(file: descriptor.FileDescriptor) -> None:
        if file.name in added:
            return
        added.add(file.name)
        for dependency in file.dependencies:
            add(dependency)
        proto = descriptor_pb2.FileDescriptorProto()
        file.CopyToProto(proto)
        kept = [s for s in proto.service if _full_name(proto.package, s.name) in services]
        del proto.service[:]
        proto.service.extend(kept)
        pool.Add(proto)

    for name in sorted(services):
        try:
            found = source.FindServiceByName(name)
        except KeyError:
            continue  # served by generic handlers, with no descriptor: listed, not described
        add(found.file)
    return pool


def _full_name(package: str, name: str) -> str:
    return f"{package}.{name}" if package else name


class DescribedReflection(reflection_pb2_grpc.ServerReflectionServicer):  # type: ignore[misc]
    """grpc.reflection.v1alpha answering from the edge's view when the edge asks, from the port's own otherwise."""

    def __init__(self, own: Iterable[str], edge: Iterable[str]) -> None:
        own, edge = sorted({*own, reflection.SERVICE_NAME}), sorted({*edge, reflection.SERVICE_NAME})
        self._own = reflection.aio.ReflectionServicer(own, pool=described_pool(own))
        self._edge = reflection.aio.ReflectionServicer(edge, pool=described_pool(edge))

    async def ServerReflectionInfo(
        self,
        requests: AsyncIterator[reflection_pb2.ServerReflectionRequest],
        context: aio.ServicerContext[Any, Any],
    ) -> AsyncIterator[reflection_pb2.ServerReflectionResponse]:
        metadata = {key: value for key, value in (context.invocation_metadata() or ())}
        chosen = self._edge if metadata.get(EDGE_HEADER) == EDGE_VALUE else self._own
        async for response in chosen.ServerReflectionInfo(requests, context):
            yield response


def enable_described_reflection(server: aio.Server, *, own: Iterable[str], edge: Iterable[str]) -> None:
    reflection_pb2_grpc.add_ServerReflectionServicer_to_server(DescribedReflection(own, edge), server)
