"""A job's result on stdout: its bytes exactly into a pipe or a file, and on a terminal a line the prompt does not
run on after (`jobs submit --wait`, `jobs result`)."""

from __future__ import annotations

import io
import sys

import pytest

from thermostat.cli.jobs import write_result


class _Stdout(io.TextIOWrapper):
    def __init__(self, *, terminal: bool) -> None:
        super().__init__(io.BytesIO(), encoding="utf-8")
        self._terminal = terminal

    def isatty(self) -> bool:
        return self._terminal

    def written(self) -> bytes:
        self.flush()
        raw = self.buffer
        assert isinstance(raw, io.BytesIO)
        return raw.getvalue()


@pytest.mark.parametrize(
    ("terminal", "result", "written"),
    [
        pytest.param(True, b"hello", b"hello\n", id="terminal-ends-the-line"),
        pytest.param(True, b"2\n", b"2\n", id="terminal-line-already-ended"),
        pytest.param(True, b"", b"", id="terminal-empty-result-prints-nothing"),
        pytest.param(False, b"hello", b"hello", id="pipe-gets-the-bytes-exactly"),
        pytest.param(False, b"\x00\xff", b"\x00\xff", id="pipe-binary-untouched"),
    ],
)
def test_the_result_is_written_verbatim_and_ends_its_line_on_a_terminal(
    monkeypatch: pytest.MonkeyPatch, terminal: bool, result: bytes, written: bytes
) -> None:
    stdout = _Stdout(terminal=terminal)
    monkeypatch.setattr(sys, "stdout", stdout)
    write_result(result, None)
    assert stdout.written() == written
