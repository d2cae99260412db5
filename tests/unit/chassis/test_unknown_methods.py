"""A call of a method the port does not serve is answered naming it and what is served instead."""

from __future__ import annotations

from thermostat.chassis.unknown_methods import unknown_method_message
from thermostat.pods.v1 import pods_pb2  # noqa: F401 (its services in the default pool)


def test_a_served_services_missing_method_is_named_with_the_services_methods() -> None:
    """The service is served here: its methods are listed."""
    message = unknown_method_message("/thermostat.pods.v1.PodController/Bogus", ["thermostat.pods.v1.PodController"])
    assert message.startswith("thermostat.pods.v1.PodController has no method 'Bogus'; its methods: StartPod, ")


def test_a_service_the_port_does_not_serve_is_named_with_what_it_serves() -> None:
    """Another service's method (or an internal one not served here): what this port serves."""
    message = unknown_method_message("/thermostat.pool.v1.PoolDispatcher/SubmitJob", ["b.V1", "a.V1"])
    assert (
        message
        == "this port serves no 'thermostat.pool.v1.PoolDispatcher'; it serves a.V1, b.V1 (grpcurl list names them)"
    )
