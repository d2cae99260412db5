"""A dead machine's output as a boot failure repeats it: its last lines, bounded, no secret (issue 35)."""

from __future__ import annotations

import pytest

from thermostat.providers.pool.provider_errors import (
    MAX_TAIL_CHARS,
    ended_reason,
    machine_secrets,
    output_tail,
)


@pytest.mark.parametrize(
    ("output", "tail"),
    [
        pytest.param(b"", "", id="no-output"),
        pytest.param(b"one\ntwo\n", "one | two", id="lines-joined"),
        pytest.param(b"\n\n  \nerror: boom\n\n", "error: boom", id="blank-lines-left-out"),
        pytest.param(
            b"".join(b"line %d\n" % n for n in range(10)), "line 5 | line 6 | line 7 | line 8 | line 9", id="last-5"
        ),
        pytest.param(b"a\tb   c\r\n", "a b c", id="whitespace-folded"),
        pytest.param(b"bad \xff byte\n", "bad \ufffd byte", id="not-utf8"),
    ],
)
def test_the_tail_is_the_last_non_blank_lines(output: bytes, tail: str) -> None:
    """The end of a traceback says what went wrong: the last lines, each on one line, joined."""
    assert output_tail(output, secrets=()) == tail


def test_secrets_are_scrubbed_and_a_long_tail_is_cut_from_the_front() -> None:
    """The worker token and long env values never reach the reason; a long last line keeps its end."""
    secrets = machine_secrets("worker-token-1", {"HF_TOKEN": "hf-secret-value", "HANDLER": "echo", "SLEEP": "0"})
    assert secrets == ("worker-token-1", "hf-secret-value")
    tail = output_tail(b"token worker-token-1 key hf-secret-value handler echo 0\n", secrets=secrets)
    assert tail == "token <redacted> key <redacted> handler echo 0"
    long = output_tail(b"x" * 5000 + b" the end\n", secrets=())
    assert len(long) == MAX_TAIL_CHARS and long.startswith("…") and long.endswith(" the end")


@pytest.mark.parametrize(
    ("code", "tail", "reason"),
    [
        pytest.param(
            1,
            "boom",
            "the machine exited with code 1 before answering its health check; its last output: boom",
            id="code-and-tail",
        ),
        pytest.param(137, "", "the machine exited with code 137 before answering its health check", id="no-output"),
        pytest.param(
            None, "boom", "the machine exited before answering its health check; its last output: boom", id="no-code"
        ),
    ],
)
def test_the_reason_names_the_exit_and_the_last_output(code: int | None, tail: str, reason: str) -> None:
    assert ended_reason(code, tail) == reason
