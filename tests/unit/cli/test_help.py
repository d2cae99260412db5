"""`--help` on every command shows an example of that very command, and the root's lists every exit code."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from thermostat.cli.exit_codes import DESCRIPTIONS
from thermostat.cli.main import app


def command_paths() -> list[tuple[str, ...]]:
    """Every command and group of the CLI, as the words that name it (the root is ())."""
    paths: list[tuple[str, ...]] = []

    def walk(command: Any, path: tuple[str, ...]) -> None:  # typer's own (vendored) click Command or Group
        paths.append(path)
        for name, sub in getattr(command, "commands", {}).items():
            walk(sub, (*path, name))

    walk(typer.main.get_command(app), ())
    return paths


EXPECTED = (
    {("pods", verb) for verb in ("start", "stop", "status", "watch", "history", "monitor", "spend")}
    | {("jobs", verb) for verb in ("submit", "get", "result", "cancel", "wait")}
    | {
        ("workers",),
        ("usage",),
        ("spend",),
        ("machine-types", "get"),
        ("machine-types", "put"),
        ("budgets", "get"),
        ("budgets", "set"),
    }
)


def help_of(path: tuple[str, ...]) -> str:
    result = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    return result.output


def test_the_cli_has_exactly_the_commands_issue_13_names() -> None:
    leaves = {p for p in command_paths() if p and p not in {("pods",), ("jobs",), ("machine-types",), ("budgets",)}}
    assert leaves == EXPECTED


@pytest.mark.parametrize("path", command_paths(), ids=lambda p: " ".join(p) or "thermostat")
def test_every_command_s_help_ends_with_an_example_of_itself(path: tuple[str, ...]) -> None:
    """An `Example:` section whose lines run `thermostat` with this command's words in order."""
    text = help_of(path)
    assert "Example:" in text
    examples = [line.strip() for line in text.split("Example:", 1)[1].splitlines() if line.strip().startswith("$ ")]
    assert examples, text
    for line in examples:
        words = [w for w in line.removeprefix("$ ").split() if not w.startswith("-")]
        assert words[0] == "thermostat"
        assert " ".join(path) in " ".join(words), (path, line)


def test_the_root_help_documents_every_exit_code() -> None:
    text = help_of(())
    assert "Exit codes:" in text
    for code, description in DESCRIPTIONS.items():
        assert any(line.split()[:1] == [str(int(code))] and description in line for line in text.splitlines()), code


def test_make_venv_installs_the_thermostat_script() -> None:
    """.venv/bin/thermostat runs the CLI (a usage error is exit code 2, as documented)."""
    script = Path(sys.executable).parent / "thermostat"
    shown = subprocess.run([script, "--help"], capture_output=True, text=True, timeout=60, check=False)
    assert shown.returncode == 0 and "Exit codes:" in shown.stdout, shown.stderr
    misuse = subprocess.run([script, "pods", "launch"], capture_output=True, text=True, timeout=60, check=False)
    assert misuse.returncode == 2 and "launch" in misuse.stderr
