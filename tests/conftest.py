"""Registers the shared fixture plugins; fixtures themselves live in tests/fixtures/."""

import os

# Before anything imports grpc: its fork handlers can crash a child forked (not vforked) while gRPC threads run,
# as the embedded Postgres is when started as another user (restarted by the chaos suite: about 1 in 4 crashed
# with SIGSEGV before exec). The tests fork only to exec, so they need no fork support; their children inherit it.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "0")

pytest_plugins = ["tests.fixtures.postgres", "tests.fixtures.services", "tests.fixtures.chaos"]
