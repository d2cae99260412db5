"""Registers the shared fixture plugins; fixtures themselves live in tests/fixtures/.

Every service a test starts as a process (they inherit this environment) serves /metrics on a free port rather
than its registry default, so two processes of one service, or two test runs on one machine, never collide.
"""

import os

# Before anything imports grpc: its fork handlers can crash a child forked (not vforked) while gRPC threads run,
# as the embedded Postgres is when started as another user (restarted by the chaos suite: about 1 in 4 crashed
# with SIGSEGV before exec). The tests fork only to exec, so they need no fork support; their children inherit it.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "0")

from hypothesis import HealthCheck, settings

from thermostat.chassis.registry import SERVICES

# Property tests assert what holds, never how fast: on two shared cores a generated case can take longer than
# hypothesis's 200 ms deadline, and input generation longer than its health check allows, with nothing wrong.
settings.register_profile("thermostat", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("thermostat")

pytest_plugins = [
    "tests.fixtures.postgres",
    "tests.fixtures.docker",
    "tests.fixtures.services",
    "tests.fixtures.chaos",
    "tests.fixtures.tracing",
    "tests.fixtures.parallel",
    "tests.fixtures.vllm_engine",
    "tests.fixtures.tiers",
    "tests.fixtures.crash_site",
]

for _service in SERVICES:
    os.environ.setdefault(_service.metrics_port_env, "0")
