"""`make run` on a terminal prints a short human line per event; JSON stays what a pipe gets (issue 35: every
relayed line was about 190 characters of JSON)."""

from __future__ import annotations

import json

import pytest

from thermostat.chassis.registry import SERVICES
from thermostat.dev.stack.relay import LOGS_ENV, NAME_WIDTH, STACK_PREFIX, human, human_logs

LINE = json.dumps({
    "time": "2026-12-05T12:55:18.142+00:00", "level": "INFO", "service": "idle-monitor",
    "logger": "thermostat.idle_monitor", "message": "pod qwen: configured; watching it",
    "request_id": "f218dbcc-a6d0-4098-9b0a-5e6a04de6794",
})  # fmt: skip


def test_a_service_line_is_its_time_and_message() -> None:
    assert human(LINE) == "12:55:18 pod qwen: configured; watching it"


def test_a_line_above_info_says_its_level() -> None:
    warning = json.loads(LINE) | {"level": "WARNING", "message": "pod qwen: stopping b0v01 (idle)"}
    assert human(json.dumps(warning)) == "12:55:18 WARNING pod qwen: stopping b0v01 (idle)"


def test_a_lines_own_fields_are_kept_and_an_exception_is_its_last_line() -> None:
    entry = json.loads(LINE) | {"job_id": "j1", "exception": "Traceback (most recent call last):\n  ...\nValueError: x"}
    assert human(json.dumps(entry)) == "12:55:18 pod qwen: configured; watching it (job_id=j1) | ValueError: x"


@pytest.mark.parametrize(
    "line",
    [
        "I1205 12:55:36.206027   29848 fork_posix.cc:71] Other threads are currently calling into gRPC",
        "runpod simulator ready",
        "{not json",
        '{"no": "message"}',
        "[1, 2]",
    ],
)
def test_a_line_that_is_no_service_json_is_printed_as_it_is(line: str) -> None:
    assert human(line) == line


def test_short_lines_on_a_terminal_json_through_a_pipe() -> None:
    assert human_logs({}, terminal=True) and not human_logs({}, terminal=False)


def test_the_variable_chooses_either_way() -> None:
    assert not human_logs({LOGS_ENV: "json"}, terminal=True)
    assert human_logs({LOGS_ENV: "human"}, terminal=False)
    with pytest.raises(ValueError, match=LOGS_ENV):
        human_logs({LOGS_ENV: "yaml"}, terminal=True)


def test_every_name_fills_one_column_the_stacks_own_lines_included() -> None:
    """The registry's longest name sets it, so a new service's lines align with the rest."""
    assert max(len(s.name) for s in SERVICES) <= NAME_WIDTH
    assert STACK_PREFIX.index("|") == NAME_WIDTH + 1
