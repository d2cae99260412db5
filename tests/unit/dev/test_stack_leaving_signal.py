"""The dev stack's own stop tells a pool dispatcher the whole stack is going away (SIGINT: its machines stop); a
SIGTERM to a dispatcher alone is a deploy (its machines stay for the process the stack starts next)."""

from __future__ import annotations

import signal

import pytest

from thermostat.chassis.registry import SERVICES
from thermostat.dev.stack.supervisor import leaving_signal
from thermostat.policy.pool.departure import Departure, departure_for


@pytest.mark.parametrize(
    ("child", "sent"),
    [
        pytest.param("pool-dispatcher", signal.SIGINT, id="the-pool-dispatcher-stops-its-machines"),
        pytest.param("pool-dispatcher#2", signal.SIGINT, id="its-second-replica-too"),
        pytest.param("pod-controller", signal.SIGTERM, id="another-service-gets-sigterm"),
        pytest.param("runpod-simulator", signal.SIGTERM, id="a-simulator-gets-sigterm"),
    ],
)
def test_the_stacks_stop_signal(child: str, sent: signal.Signals) -> None:
    assert leaving_signal(child) is sent


def test_the_stacks_stop_is_the_pools_stop_fleet_departure() -> None:
    assert departure_for(leaving_signal("pool-dispatcher").name) is Departure.STOP_FLEET
    assert all(leaving_signal(s.name) is signal.SIGTERM for s in SERVICES if s.name != "pool-dispatcher")
