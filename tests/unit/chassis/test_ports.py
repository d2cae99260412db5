"""free_port picks below the OS's ephemeral range, where nothing takes a port unasked while a child process starts
to bind it (CI: metering's /metrics port, the OS's pick, was taken before metering bound it)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from thermostat.chassis import ports
from thermostat.chassis.ports import DEFAULT_EPHEMERAL_LOW, PICK_FROM, ephemeral_low, free_port, pick_range


@pytest.mark.parametrize(
    ("low", "expected"),
    [
        pytest.param(32768, range(PICK_FROM, 32768), id="linux-default-range"),
        pytest.param(PICK_FROM + 1000, range(PICK_FROM, PICK_FROM + 1000), id="just-enough-room"),
        pytest.param(PICK_FROM + 999, None, id="too-little-room-is-the-oss-pick"),
        pytest.param(1024, None, id="a-range-from-1024-is-the-oss-pick"),
    ],
)
def test_the_pick_lies_below_the_ephemeral_range_when_there_is_room(low: int, expected: range | None) -> None:
    assert pick_range(low) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("32768\t60999\n", 32768, id="the-kernels-format"),
        pytest.param("40000 50000", 40000, id="a-tuned-range"),
        pytest.param("", DEFAULT_EPHEMERAL_LOW, id="unreadable-is-linuxs-default"),
    ],
)
def test_the_ephemeral_range_is_read_from_the_kernel(tmp_path: Path, text: str, expected: int) -> None:
    path = tmp_path / "ip_local_port_range"
    path.write_text(text)
    assert ephemeral_low(path) == expected
    assert ephemeral_low(tmp_path / "absent") == DEFAULT_EPHEMERAL_LOW


def test_a_free_port_is_below_the_ephemeral_range_and_even_a_plain_bind_takes_it() -> None:
    low = ephemeral_low()
    for _ in range(20):
        port = free_port()
        assert PICK_FROM <= port < low
        with socket.socket() as server:
            server.bind(("127.0.0.1", port))


def test_a_port_someone_listens_on_is_passed_over(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", free_port()))
        held.listen()
        taken = held.getsockname()[1]
        other = next(port for port in range(taken + 1, ephemeral_low()) if ports.bindable("127.0.0.1", port))
        offers = iter([taken, taken, other])
        monkeypatch.setattr(ports._PICKER, "choice", lambda _: next(offers))
        assert free_port() == other


def test_without_room_below_the_range_the_os_picks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ports, "ephemeral_low", lambda: PICK_FROM + 10)
    assert free_port() >= ephemeral_low()
