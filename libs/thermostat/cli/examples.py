"""Help text: every command's `--help` ends with an example (a test walks every command and checks)."""

from __future__ import annotations

from rich.markup import escape

EXAMPLE_HEADING = "Example:"


def example(*command_lines: str) -> str:
    """An epilog showing `command_lines`, each a full `thermostat …` line (escaped: help text is rich markup)."""
    return "\n".join([EXAMPLE_HEADING, *(f"  $ {escape(line)}" for line in command_lines)])
