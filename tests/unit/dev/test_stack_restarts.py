"""The dev stack restarts a child that exits like a compose restart policy: doubling delays, reset once steady."""

from __future__ import annotations

import signal

import pytest

from thermostat.dev.stack.supervisor import RESTART_MAX_DELAY, exit_description, restart_delay, restarts_in_a_row


@pytest.mark.parametrize(
    ("restarts", "uptime", "delay"),
    [
        pytest.param(0, 2.0, 1.0, id="first-crash-waits-a-second"),
        pytest.param(1, 2.0, 2.0, id="second-in-a-row-doubles"),
        pytest.param(3, 2.0, 8.0, id="fourth-in-a-row-waits-eight"),
        pytest.param(10, 2.0, RESTART_MAX_DELAY, id="capped"),
        pytest.param(10_000, 2.0, RESTART_MAX_DELAY, id="capped-however-many"),
        pytest.param(5, 60.0, 1.0, id="a-child-up-a-minute-starts-over"),
    ],
)
def test_restart_delay(restarts: int, uptime: float, delay: float) -> None:
    assert restart_delay(restarts, uptime) == delay


@pytest.mark.parametrize(
    ("restarts", "uptime", "counted"),
    [
        pytest.param(0, 42.0, 1, id="the-first-restart-after-start-is-1"),
        pytest.param(1, 2.0, 2, id="the-next-in-a-row-is-2"),
        pytest.param(0, 600.0, 1, id="the-first-restart-after-a-steady-run-is-1-not-0"),
        pytest.param(7, 60.0, 1, id="a-steady-run-starts-a-new-streak"),
    ],
)
def test_the_restart_count_the_log_line_says(restarts: int, uptime: float, counted: int) -> None:
    """`restart N in a row` counts this restart: README's example (`restart 1 in a row`) after any uptime."""
    assert restarts_in_a_row(restarts, uptime) == counted


def test_an_exit_is_described_by_signal_or_status() -> None:
    assert exit_description(-signal.SIGKILL) == "killed by SIGKILL"
    assert exit_description(3) == "exited with status 3"
