"""Registers the shared fixture plugins; fixtures themselves live in tests/fixtures/."""

pytest_plugins = [
    "tests.fixtures.postgres",
    "tests.fixtures.services",
    "tests.fixtures.chaos",
    "tests.fixtures.tracing",
]
