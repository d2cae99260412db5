"""`make run` again over the same clone (issue 35): a restart prints the tokens the last run printed, a refused
token's problem detail says where they are (and no token), and a second run while the first runs refuses, naming
it, and leaves its database serving."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest

from tests.e2e.test_make_run import DevStack
from tests.fixtures.postgres import embedded_data_dir

NOT_PRESET = {"STRATA_POOL_TOKEN": None, "STRATA_POOL_ADMIN_TOKEN": None}


def printed_token(stack: DevStack, name: str) -> str:
    for line in stack.output:
        match = re.match(rf"\s+export {name}=(\S+)", line)
        if match:
            return match.group(1)
    raise AssertionError(f"no export line for {name}:\n" + "".join(stack.output[-40:]))


@pytest.mark.e2e
def test_a_restarted_stack_keeps_its_tokens_and_a_refusal_says_where_they_are() -> None:
    """The second run's export lines are the first's; a stale token's 401 names tokens.json, not a token."""
    with embedded_data_dir() as data_dir:
        first = DevStack(data_dir, NOT_PRESET)
        try:
            first.wait_up()
            token = printed_token(first, "STRATA_POOL_TOKEN")
            first.interrupt()
        finally:
            first.kill()
        second = DevStack(data_dir, NOT_PRESET)
        try:
            edge = second.wait_up()
            assert printed_token(second, "STRATA_POOL_TOKEN") == token
            tenant = {"X-Strata-Tenant": "demo"}
            kept = httpx.get(f"{edge}/v1/workers", headers={"Authorization": f"Bearer {token}", **tenant}, timeout=10)
            assert kept.status_code == 200, kept.text
            stale = httpx.get(f"{edge}/v1/workers", headers={"Authorization": "Bearer stale", **tenant}, timeout=10)
            assert stale.status_code == 401
            detail = stale.json()["detail"]
            assert str(Path(data_dir) / "tokens.json") in detail
            assert token not in detail and "stale" not in detail
            second.interrupt()
        finally:
            second.kill()


@pytest.mark.e2e
def test_a_second_make_run_in_the_same_clone_refuses_and_the_first_keeps_serving() -> None:
    """Every port free (0), as the port-clash advice says: the second still refuses, naming the first's pid."""
    with embedded_data_dir() as data_dir:
        first = DevStack(data_dir, {})
        try:
            edge = first.wait_up()
            second = DevStack(data_dir, {})
            try:
                output, _ = second.proc.communicate(timeout=60)
            finally:
                second.kill()
            assert second.proc.returncode == 1, output[-3000:]
            assert f"another `make run` of this clone is running, pid {first.proc.pid}" in output, output[-3000:]
            assert "THERMOSTAT_DATA_DIR" in output
            assert "stopping a postgres server" not in output
            assert httpx.get(f"{edge}/health", timeout=10).status_code == 200
            first.interrupt()
        finally:
            first.kill()
