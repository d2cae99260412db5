"""README's operator quick start, run as written (bash, `set -euo pipefail`) against the stack `make run` starts
(`python -m thermostat.dev.stack`), with the tokens its first block exports: every command must succeed."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.test_make_run import DevStack
from tests.fixtures.postgres import embedded_data_dir

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
SECTION = "### Operator quick start: the `thermostat` CLI"


def quick_start() -> tuple[dict[str, str], str]:
    """The variables the section's first block exports (set before `make run`) and its second block."""
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index(SECTION) :]
    blocks = re.findall(r"```bash\n(.*?)```", section, flags=re.S)[:2]
    exports = re.search(r"^export (.+?)\s*$", blocks[0], flags=re.M)
    assert exports is not None and "make run" in blocks[0]
    variables = dict(pair.split("=", 1) for pair in exports.group(1).split())
    return variables, blocks[1]


@pytest.fixture(scope="module")
def edge() -> Iterator[str]:
    variables, _ = quick_start()
    with embedded_data_dir() as data_dir:
        # make run as the section starts it, with faster wake polls and monitor ticks than the demo's
        stack = DevStack(
            data_dir,
            {**variables, "METERING_PORT": "0", "RUNPOD_WAKE_POLL_SECONDS": "0.2", "CHECK_SECONDS": "0.3"},
        )
        try:
            yield stack.wait_up().removeprefix("http://")
        finally:
            stack.kill()


def test_the_operator_quick_start_runs_as_written_against_make_run(edge: str, tmp_path: Path) -> None:
    variables, commands = quick_start()
    env = {
        **{k: v for k, v in os.environ.items() if k not in variables},
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "THERMOSTAT_ADDR": edge,  # the edge of this run (make run's default is 127.0.0.1:8080)
        "COLUMNS": "200",
    }
    ran = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", commands],
        cwd=tmp_path,  # types.json lands here
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    assert re.search(r"^ready +qwen is ready$", ran.stderr, flags=re.M), ran.stderr
    assert "hello" in ran.stdout and "again" in ran.stdout
    assert "qwen: stopped" in ran.stderr
    assert (tmp_path / "types.json").read_text().lstrip().startswith("[")
