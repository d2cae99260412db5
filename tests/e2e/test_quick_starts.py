"""README's four quick starts, run as written against one `make run` (`python -m thermostat.dev.stack`) on its
defaults — no token set before it, the demo catalogue — with only the `export` lines it printed in the
environment, in README's order and then in the reverse order against the same run: each works whichever ran
before it, and none leaves the clone changed (`git status`)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from tests.e2e.test_make_run import DevStack
from tests.fixtures.postgres import embedded_data_dir

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
COCKPIT = "### A web cockpit (REST)"
BOT = "### A chat bot (the OpenAI endpoint)"
NOTEBOOK = "### A notebook server (Python client)"
OPERATOR = "### An operator (the `thermostat` CLI)"
EXPORTED = (
    "RIG_OPERATOR_TOKEN",
    "STRATA_POOL_TOKEN",
    "STRATA_POOL_ADMIN_TOKEN",
    "THERMOSTAT_INFERENCE_TOKEN",
    "STRATA_TENANT",
    "THERMOSTAT_ADDR",
)
CLIENT_VARIABLES = (*EXPORTED, "RIG_WAKE_TOKEN")


def blocks(heading: str, language: str) -> list[str]:
    """The `language` code blocks of README's section under `heading`, in order."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split(f"{heading}\n", 1)[1].split("\n### ", 1)[0].split("\n## ", 1)[0]
    return re.findall(rf"```{language}\n(.*?)```", section, flags=re.S)


def git_status() -> str:
    return subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=all"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout


@pytest.fixture(scope="module")
def exports() -> Iterator[dict[str, str]]:
    """One `make run` as a newcomer starts it (no token, catalogue or tenant of their own), and the variables of
    the `export` block it printed."""
    with embedded_data_dir() as data_dir:
        unset: dict[str, str | None] = {name: None for name in CLIENT_VARIABLES}
        # faster wake polls and monitor ticks than the demo's, so the boots take seconds
        stack = DevStack(data_dir, {**unset, "RUNPOD_WAKE_POLL_SECONDS": "0.2", "CHECK_SECONDS": "0.3"})
        try:
            edge = stack.wait_up()
            printed = dict(re.findall(r"^  export (\w+)=(\S+)$", "".join(stack.output), flags=re.M))
            assert sorted(printed) == sorted(EXPORTED), "".join(stack.output[-30:])
            assert printed["STRATA_TENANT"] == "demo"
            assert printed["THERMOSTAT_ADDR"] == edge.removeprefix("http://")
            said = "".join(stack.output)
            assert "/_sim/billed" in said
            # what the pool has configured and what its catalogue uses, in one line
            backends = r"catalogue version \d+: backends configured: [a-z, ]+; used by the catalogue: local"
            assert re.search(backends, said), said
            yield printed
        finally:
            stack.kill()


def shell(exports: Mapping[str, str]) -> dict[str, str]:
    """A new shell's environment with the export block pasted: none of the client's variables but those."""
    return {
        **{k: v for k, v in os.environ.items() if k not in CLIENT_VARIABLES},
        **exports,
        "COLUMNS": "200",
    }


def run(argv: list[str], exports: Mapping[str, str]) -> subprocess.CompletedProcess[str]:
    ran = subprocess.run(argv, cwd=ROOT, env=shell(exports), capture_output=True, text=True, timeout=600, check=False)
    assert ran.returncode == 0, f"{argv[:2]}:\n{ran.stdout[-3000:]}\n{ran.stderr[-3000:]}"
    return ran


def bash(script: str, exports: Mapping[str, str]) -> subprocess.CompletedProcess[str]:
    return run(["bash", "-euo", "pipefail", "-c", script], exports)


def cockpit(exports: Mapping[str, str]) -> None:
    (script,) = blocks(COCKPIT, "bash")
    out = bash(script, exports).stdout.splitlines()
    assert "hello" in out and "2" in out, out
    assert any('"state": "cancelled"' in line for line in out), out  # the sleep job, cancelled
    assert any('"reason":"no_demand"' in line for line in out), out  # the hint the text explains
    assert any('"status":409' in line for line in out), out  # the finished job's cancel


def chat_bot(exports: Mapping[str, str]) -> None:
    (command,) = blocks(BOT, "bash")
    assert bash(command, exports).stdout == "hello\n"
    (code,) = blocks(BOT, "python")
    out = run([sys.executable, "-c", code], exports).stdout.splitlines()
    assert out[0] in ("qwen down", "qwen booting", "qwen ready"), out
    assert "simulated pod" in out[-1], out  # the engine's answer, through the edge


def notebook(exports: Mapping[str, str]) -> None:
    (code,) = blocks(NOTEBOOK, "python")
    out = run([sys.executable, "-c", code], exports).stdout.splitlines()
    assert out[-1] == "2" and "cell completed" in out, out  # the cell ran: its output, not the payload
    (command,) = blocks(NOTEBOOK, "bash")
    *states, output = bash(command, exports).stdout.splitlines()
    assert output == "2" and states[-1].endswith("] completed"), states


def operator(exports: Mapping[str, str]) -> None:
    (script,) = blocks(OPERATOR, "bash")
    ran = bash(script, exports)
    readies = re.findall(r"^ready +qwen is ready$", ran.stderr, flags=re.M)
    assert len(readies) == 1, ran.stderr  # once, not twice
    # off a terminal a result is written as its bytes, no newline added: `hello` runs into the next output
    assert re.search(r"^hello2$", ran.stdout, flags=re.M), ran.stdout  # hello, then the cell's output
    assert re.search(r"^again", ran.stdout, flags=re.M), ran.stdout
    assert "cancelled" in ran.stdout and "qwen: stopped" in ran.stderr


QUICK_STARTS = {"cockpit": cockpit, "chat bot": chat_bot, "notebook": notebook, "operator": operator}


@pytest.mark.parametrize(
    "order",
    [
        pytest.param(["cockpit", "chat bot", "notebook", "operator"], id="readme-order"),
        pytest.param(["operator", "notebook", "chat bot", "cockpit"], id="reverse-order"),
    ],
)
def test_the_four_quick_starts_run_as_written_against_one_make_run_in_any_order(
    exports: dict[str, str], order: list[str]
) -> None:
    before = git_status()
    for name in order:
        QUICK_STARTS[name](exports)
    assert git_status() == before, "a quick start changed the clone"


def test_the_readme_stays_a_users_readme() -> None:
    """Under 400 lines: the reference lives in docs/ and the figures in bench/README.md, each linked from it."""
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) < 400
    for linked in re.findall(r"\]\(((?:docs|bench|deploy)/[^)#]+)", readme):
        assert (ROOT / linked).is_file(), linked
