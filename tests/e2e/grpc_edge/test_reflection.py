"""Reflection describes what is there: at the edge what the edge routes, on a service's own port what it serves;
never an internal service, asked by list or by name."""

from __future__ import annotations

import pytest

from tests.e2e.cli.stack import CliStack
from tests.e2e.grpc_edge.grpcurl import grpcurl
from thermostat.chassis.registry import SERVICES, ServiceDef, public_services

pytestmark = pytest.mark.e2e
ALWAYS = ["grpc.health.v1.Health", "grpc.reflection.v1alpha.ServerReflection"]
INTERNAL = [name for s in SERVICES for name in s.internal_services]


async def test_the_edge_lists_what_it_routes(stack: CliStack) -> None:
    """`grpcurl list` at the edge: every public service, health and reflection, nothing else."""
    ran = await grpcurl("-plaintext", stack.edge, "list")
    assert sorted(ran.stdout.split()) == sorted([*public_services(), *ALWAYS]), ran.stderr


@pytest.mark.parametrize("internal", INTERNAL)
async def test_the_edge_does_not_describe_an_internal_service(stack: CliStack, internal: str) -> None:
    """`grpcurl describe` of an internal service at the edge finds no such symbol."""
    ran = await grpcurl("-plaintext", stack.edge, "describe", internal)
    assert ran.returncode != 0 and "Symbol not found" in ran.stderr, (ran.stdout, ran.stderr)


async def test_the_edge_describes_every_public_service(stack: CliStack) -> None:
    """Each public service is described at the edge, whichever service answers reflection."""
    for name in public_services():
        ran = await grpcurl("-plaintext", stack.edge, "describe", name)
        assert ran.returncode == 0 and f"service {name.rpartition('.')[2]} {{" in ran.stdout, ran.stderr


@pytest.mark.parametrize("service", SERVICES, ids=lambda s: s.name)
async def test_a_service_port_describes_only_what_it_serves(stack: CliStack, service: ServiceDef) -> None:
    """On its own port a service lists its public services, health and reflection; another service's API and its
    own internal one are not described."""
    address = stack.services[service.name]
    ran = await grpcurl("-plaintext", address, "list")
    assert sorted(ran.stdout.split()) == sorted([*service.public_services, *ALWAYS]), ran.stderr
    others = [name for name in public_services() if name not in service.public_services]
    for name in [*others, *service.internal_services]:
        described = await grpcurl("-plaintext", address, "describe", name)
        assert described.returncode != 0 and "Symbol not found" in described.stderr, (name, described.stdout)
