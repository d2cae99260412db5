"""docs/api.md's grpcurl examples, run as written (the edge's address the one difference) against the whole stack
behind the real edge, with the variables `make run` exports: every public service has one, and each answers."""

from __future__ import annotations

import asyncio
import os
import re
import sys
from pathlib import Path

import pytest

from tests.e2e.cli.stack import CliStack
from tests.fixtures.services import OPERATOR_TOKEN
from tests.integration.pool_dispatcher.conftest import API_TOKEN
from thermostat.chassis.registry import public_services

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[3]
HEADING = "## grpcurl, service by service"
DOCUMENTED_EDGE = "127.0.0.1:8080"


def examples() -> list[str]:
    """The commands of the section's bash block, continuation lines joined."""
    section = (ROOT / "docs" / "api.md").read_text().split(f"{HEADING}\n", 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"```bash\n(.*?)```", section, flags=re.S)
    return [command for command in block.replace("\\\n", " ").splitlines() if command.strip()]


EXAMPLES = examples()


def test_every_public_service_and_health_has_an_example() -> None:
    named = " ".join(EXAMPLES)
    assert [s for s in (*public_services(), "grpc.health.v1.Health") if f"{s}/" not in named] == []


@pytest.mark.parametrize("command", EXAMPLES, ids=[re.sub(r"\s+", " ", c)[-60:] for c in EXAMPLES])
async def test_the_example_runs_as_written(stack: CliStack, command: str) -> None:
    environment = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "RIG_OPERATOR_TOKEN": OPERATOR_TOKEN,
        "STRATA_POOL_TOKEN": API_TOKEN,
        "STRATA_TENANT": "demo",
    }
    process = await asyncio.create_subprocess_exec(
        "bash",
        "-c",
        command.replace(DOCUMENTED_EDGE, stack.edge),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=environment,
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout=90)
    assert process.returncode == 0, (command, out.decode(), err.decode())
    assert out.strip(), command
    if command.endswith("/RunJob"):
        assert '"result": "aGVsbG8="' in out.decode() and "JOB_STATE_COMPLETED" in out.decode()
