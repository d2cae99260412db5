"""`make run`'s fixed ports lie outside Linux's ephemeral range, and every port it picks free is none of them (issue
35: the embedded Postgres's free port came out 50061, the pod controller's default, which then failed to bind)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from thermostat.chassis.ports import free_port
from thermostat.chassis.registry import POD_CONTROLLER, SERVICES
from thermostat.dev.stack import ports
from thermostat.dev.stack.__main__ import fixed_ports
from thermostat.dev.stack.ports import EPHEMERAL_PORTS, free_port_except, stack_metrics_port, stack_port
from tools.envoy_config import DEFAULT_ADMIN_PORT, DEFAULT_STATS_PORT

OTHER_FIXED = {8080, DEFAULT_ADMIN_PORT, DEFAULT_STATS_PORT, 9100}  # the edge's three and the RunPod simulator


def test_every_service_port_of_make_run_by_default_lies_outside_the_ephemeral_range() -> None:
    """With no port variable set, no gRPC or /metrics port is one the OS could hand to anything else."""
    grpc_ports, metrics = fixed_ports({})
    inside = {port for port in [*grpc_ports.values(), *metrics.values()] if port in EPHEMERAL_PORTS}
    assert inside == set()
    assert grpc_ports[POD_CONTROLLER.name] == 10061 and metrics[POD_CONTROLLER.name] == 11061


def test_each_registry_entry_gets_its_own_stack_ports_the_same_way() -> None:
    """Derived from the registry: distinct, real ports, none the edge's or the simulator's."""
    every = [port for s in SERVICES for port in (stack_port(s), stack_metrics_port(s))]
    assert len(set(every)) == len(every)
    assert all(1024 < port < EPHEMERAL_PORTS.start for port in every)
    assert set(every).isdisjoint(OTHER_FIXED)


def test_a_variable_still_moves_a_service_port() -> None:
    """POD_CONTROLLER_PORT=0 is a free one, as before."""
    grpc_ports, _ = fixed_ports({POD_CONTROLLER.port_env: "0"})
    assert grpc_ports[POD_CONTROLLER.name] == 0


def test_a_free_port_the_stack_picks_is_never_one_it_wants_fixed(monkeypatch: pytest.MonkeyPatch) -> None:
    """The OS offering a wanted port (an explicit one inside the ephemeral range) is asked again."""
    wanted = free_port()
    offers: Iterator[int] = iter([wanted, wanted, 0])

    def offer(host: str = "127.0.0.1") -> int:
        return next(offers) or free_port(host)

    monkeypatch.setattr(ports, "free_port", offer)
    picked = free_port_except({wanted})
    assert picked != wanted and picked > 0
