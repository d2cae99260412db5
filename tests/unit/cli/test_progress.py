"""The progress display: a line per change off a terminal, a redrawn line on one, nothing under --json."""

from __future__ import annotations

import io
import re

from rich.console import Console

from thermostat.cli.output import Output
from thermostat.cli.progress import Display


def console(*, terminal: bool) -> tuple[Console, io.StringIO]:
    buffer = io.StringIO()
    return Console(file=buffer, force_terminal=terminal, width=80, color_system=None), buffer


def test_off_a_terminal_each_change_is_one_line_and_a_repeat_is_not_shown_again() -> None:
    shown, buffer = console(terminal=False)
    with Display(Output(json_mode=False), console=shown) as display:
        display.show("loading · ready in about 40 s", key="loading")
        display.show("loading · ready in about 39 s", key="loading")
        display.show("ready", key="ready")
        display.done("ready qwen is ready")
    assert buffer.getvalue().splitlines() == ["loading · ready in about 40 s", "ready", "ready qwen is ready"]


def test_on_a_terminal_the_line_is_redrawn_and_ends_with_the_final_text() -> None:
    shown, buffer = console(terminal=True)
    with Display(Output(json_mode=False), console=shown) as display:
        display.show("loading", eta_seconds=90)
        display.done("ready qwen is ready")
    drawn = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", buffer.getvalue())  # cursor moves and line clears
    assert re.split(r"[\r\n]+", drawn.strip())[-1] == "ready qwen is ready"
    assert re.search(r"loading · ETA ~1m(29|30)s", drawn), drawn  # the ETA counts down from what was sent


def test_under_json_nothing_is_drawn() -> None:
    shown, buffer = console(terminal=True)
    with Display(Output(json_mode=True), console=shown) as display:
        display.show("starting")
        display.done("ready")
    assert buffer.getvalue() == ""
