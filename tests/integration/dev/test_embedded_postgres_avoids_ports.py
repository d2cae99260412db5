"""The embedded server never takes a port the dev stack wants fixed, even when the OS offers it (issue 35)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.fixtures.postgres import embedded_data_dir
from thermostat.chassis.ports import free_port
from thermostat.dev.embedded_postgres import EmbeddedPostgres
from thermostat.dev.stack import ports

# starts an embedded Postgres of its own, with no fixture to say so (tests/fixtures/tiers.py)
pytestmark = pytest.mark.pg


def test_the_embedded_server_skips_a_free_port_the_stack_wants(monkeypatch: pytest.MonkeyPatch) -> None:
    """The OS's first offer is the pod controller's port: the server listens elsewhere."""
    wanted = free_port()
    offers: Iterator[int] = iter([wanted])

    def offer(host: str = "127.0.0.1") -> int:
        return next(offers, 0) or free_port(host)

    monkeypatch.setattr(ports, "free_port", offer)
    # embedded_data_dir: as root the server runs as its own user, who may not enter pytest's tmp_path
    with embedded_data_dir() as root, EmbeddedPostgres(root / "pg", durable=False, avoid_ports={wanted}) as server:
        assert server.port != wanted
