"""Live displays while something waits: a wake booting (phase, detail, ETA from measured boots, as WatchPod
reports it) and a job waiting (its state and the time since it was submitted).

On a terminal the line redraws in place (rich's Live with a spinner); otherwise — a pipe, a log, CI — one line
per change goes to stderr, so a log shows each phase once and stdout stays the result alone. Under `--json`
nothing is drawn: a script reads the result.
"""

from __future__ import annotations

import time
from types import TracebackType
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.spinner import Spinner

from thermostat.cli.output import Output


def eta_text(eta_seconds: float | None) -> str:
    """`ETA ~1m05s` for a known ETA, empty when the service has none (no measured boot yet)."""
    if eta_seconds is None:
        return ""
    seconds = max(0, round(eta_seconds))
    return f"ETA ~{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"ETA ~{seconds}s"


class Display:
    """One status line that changes: live on a terminal, a line per change of `key` elsewhere, nothing
    under --json."""

    def __init__(self, out: Output, *, console: Console | None = None) -> None:
        self._console = console or out.stderr
        self._quiet = out.json_mode
        self._live: Live | None = None
        self._spinner = Spinner("dots", "")
        self._text = ""
        self._ready_at: float | None = None  # monotonic time the last ETA points at
        self._last_line = ""
        self._final: str | None = None

    def __enter__(self) -> Display:
        if not self._quiet and self._console.is_terminal:
            self._live = Live(
                console=self._console, transient=False, refresh_per_second=8, get_renderable=self._renderable
            )
            self._live.__enter__()
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None) -> None:
        if self._live is not None:
            self._live.__exit__(kind, value, tb)

    def show(self, text: str, *, key: Any = None, eta_seconds: float | None = None) -> None:
        """Show `text`; in line mode only when `key` (default: the text) differs from the last one shown. An ETA
        counts down on a terminal (the service re-sends it on a change of state, not every second)."""
        if self._quiet:
            return
        if self._live is not None:
            self._text = text
            self._ready_at = None if eta_seconds is None else time.monotonic() + eta_seconds
            self._live.refresh()
            return
        marker = str(key if key is not None else text)
        if marker != self._last_line:
            self._last_line = marker
            self._console.print(text, markup=False, highlight=False)

    def _renderable(self) -> Spinner | str:
        if self._final is not None:
            return self._final
        if self._ready_at is None:
            self._spinner.update(text=self._text)
        else:
            self._spinner.update(text=f"{self._text} · {eta_text(self._ready_at - time.monotonic())}")
        return self._spinner

    def done(self, text: str, *, key: Any = None) -> None:
        """The final line: replaces the spinner on a terminal; in line mode printed unless `key` is the last
        one shown (the final state was already a line of its own)."""
        if self._quiet:
            return
        if self._live is not None:
            self._final = text
            self._live.refresh()
            return
        if key is None or str(key) != self._last_line:
            self._console.print(text, markup=False, highlight=False)


class Stopwatch:
    """Seconds since the display began (monotonic; what a job's line shows as elapsed)."""

    def __init__(self) -> None:
        self._start = time.monotonic()

    def elapsed(self) -> str:
        seconds = round(time.monotonic() - self._start)
        return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"
