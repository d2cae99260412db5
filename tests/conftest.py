"""Registers the shared fixture plugins; fixtures themselves live in tests/fixtures/.

Every service a test starts as a process (they inherit this environment) serves /metrics on a free port rather
than its registry default, so two processes of one service, or two test runs on one machine, never collide.
"""

import os

from thermostat.chassis.registry import SERVICES

pytest_plugins = [
    "tests.fixtures.postgres",
    "tests.fixtures.services",
    "tests.fixtures.chaos",
    "tests.fixtures.tracing",
]

for _service in SERVICES:
    os.environ.setdefault(_service.metrics_port_env, "0")
