"""`thermostat jobs …` against the whole stack behind the real edge: submit and wait (the state shown while it
waits), result bytes verbatim, get and cancel, and the exit code of each way a job ends or is refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.cli.conftest import fresh_tenant
from tests.e2e.cli.stack import CliStack
from thermostat.cli.exit_codes import ExitCode

pytestmark = pytest.mark.e2e

JOB_FIELDS = {
    "id",
    "tenant_id",
    "machine_type",
    "state",
    "submitted_at",
    "priority",
    "timeout_seconds",
    "has_result",
}
BINARY = bytes(range(256)) * 16 + b"\x00\r\n\xff"


async def test_submit_wait_writes_the_result_to_stdout_and_shows_the_job_s_states(stack: CliStack) -> None:
    tenant = fresh_tenant()
    ran = await stack.cli("jobs", "submit", "local", "--data", "hello", "--wait", tenant=tenant)
    assert ran.exit_code == 0, ran.stderr
    assert ran.stdout_bytes == b"hello"
    states = [line.split(": ", 1)[1].split(" ")[0] for line in ran.stderr.strip().splitlines()]
    assert states[-1] == "completed" and states[0] in ("queued", "dispatched", "running", "completed")


async def test_submit_then_wait_then_result_then_get(stack: CliStack, tmp_path: Path) -> None:
    """A binary payload from a file; the job as JSON; wait ends completed (exit 0); the result is byte-exact."""
    tenant = fresh_tenant()
    payload = tmp_path / "payload.bin"
    payload.write_bytes(BINARY)
    job = (await stack.cli("--json", "jobs", "submit", "local", str(payload), "--priority", "7", tenant=tenant)).json()
    assert set(job) >= JOB_FIELDS
    assert (job["tenant_id"], job["machine_type"], job["priority"]) == (tenant, "local", 7)

    done = (await stack.cli("--json", "jobs", "wait", job["id"], tenant=tenant)).json()
    assert (done["id"], done["state"], done["has_result"]) == (job["id"], "completed", True)

    out = tmp_path / "result.bin"
    assert (await stack.cli("jobs", "result", job["id"], "-o", str(out), tenant=tenant)).exit_code == 0
    assert out.read_bytes() == BINARY
    assert (await stack.cli("jobs", "result", job["id"], tenant=tenant)).stdout_bytes == BINARY

    got = (await stack.cli("--json", "jobs", "get", job["id"], tenant=tenant)).json()
    assert got["state"] == "completed" and got["completed_at"] >= got["submitted_at"]
    table = await stack.cli("jobs", "get", job["id"], tenant=tenant)
    assert "completed" in table.stdout and "machine type" in table.stdout


async def test_a_payload_from_stdin_and_a_result_to_a_file_with_the_job_on_stdout(
    stack: CliStack, tmp_path: Path
) -> None:
    ran = await stack.cli("jobs", "submit", "local", "-", "--wait", stdin=b"from stdin", tenant=fresh_tenant())
    assert (ran.exit_code, ran.stdout_bytes) == (0, b"from stdin")
    out = tmp_path / "out.bin"
    saved = await stack.cli(
        "jobs", "submit", "local", "--data", "to a file", "--wait", "-o", str(out), tenant=fresh_tenant()
    )
    assert saved.exit_code == 0 and "completed" in saved.stdout and out.read_bytes() == b"to a file"


async def test_a_failed_job_exits_7_with_the_worker_s_error(stack: CliStack) -> None:
    tenant = fresh_tenant()
    ran = await stack.cli("--json", "jobs", "submit", "failing", "--data", "x", "--wait", tenant=tenant)
    assert ran.exit_code == ExitCode.JOB_FAILED, ran.stderr
    job = json.loads(ran.stdout)
    assert job["state"] == "failed" and "cell raised" in job["error"]
    again = await stack.cli("jobs", "wait", job["id"], tenant=tenant)
    assert again.exit_code == ExitCode.JOB_FAILED and "failed" in again.stdout


async def test_a_job_past_its_timeout_exits_8(stack: CliStack) -> None:
    ran = await stack.cli(
        "--json", "jobs", "submit", "quick", "--data", '{"seconds": 10}', "--wait", tenant=fresh_tenant()
    )
    assert ran.exit_code == ExitCode.JOB_TIMED_OUT, ran.stderr
    assert json.loads(ran.stdout)["state"] == "timed_out"


async def test_cancel_shows_the_cancelled_job_and_wait_then_exits_9(stack: CliStack) -> None:
    tenant = fresh_tenant()
    job = (await stack.cli("--json", "jobs", "submit", "sleepy", "--data", '{"seconds": 30}', tenant=tenant)).json()
    cancelled = (await stack.cli("--json", "jobs", "cancel", job["id"], tenant=tenant)).json()
    assert (cancelled["id"], cancelled["state"]) == (job["id"], "cancelled")
    ran = await stack.cli("jobs", "wait", job["id"], tenant=tenant)
    assert ran.exit_code == ExitCode.JOB_CANCELLED
    assert "cancelled" in ran.stdout


async def test_a_tenant_over_its_budget_is_refused_with_exit_5(stack: CliStack) -> None:
    """budgets set tenant (the admin token) then get; a submit over the ceiling exits 5, naming the budget."""
    tenant = fresh_tenant()
    set_ = (await stack.cli("--json", "budgets", "set", "tenant", tenant, "--daily", "0", admin=True)).json()
    assert (set_["tenant_id"], set_["daily_usd"]) == (tenant, 0) and "monthly_usd" not in set_
    got = (await stack.cli("--json", "budgets", "get", "tenant", tenant, admin=True)).json()
    assert got["daily_usd"] == 0 and got["today_usd"] == 0
    refused = await stack.cli("--json", "jobs", "submit", "local", "--data", "x", tenant=tenant)
    assert refused.exit_code == ExitCode.REFUSED, refused.stderr
    assert "budget" in refused.error()["detail"]


async def test_setting_a_tenant_budget_without_the_admin_token_or_with_a_wrong_one_exits_3(stack: CliStack) -> None:
    api_token_only = await stack.cli("--json", "budgets", "set", "tenant", fresh_tenant(), "--daily", "1")
    assert api_token_only.exit_code == ExitCode.UNAUTHENTICATED, api_token_only.stderr
    assert api_token_only.error()["code"] in ("UNAUTHENTICATED", "PERMISSION_DENIED")
    wrong = await stack.cli(
        "--json",
        "--pool-admin-token",
        "not-the-admin-token",
        "budgets",
        "set",
        "tenant",
        fresh_tenant(),
        "--daily",
        "1",
    )
    assert wrong.exit_code == ExitCode.UNAUTHENTICATED, wrong.stderr
    assert wrong.error()["code"] in ("UNAUTHENTICATED", "PERMISSION_DENIED")


async def test_an_unknown_job_exits_not_found_and_no_pool_token_unauthenticated(stack: CliStack) -> None:
    tenant = fresh_tenant()
    unknown = await stack.cli("--json", "jobs", "get", "00000000-0000-0000-0000-000000000000", tenant=tenant)
    assert unknown.exit_code == ExitCode.NOT_FOUND, unknown.stderr
    anonymous = await stack.cli("--json", "jobs", "submit", "local", "--data", "x", tenant=tenant, pool=False)
    assert anonymous.exit_code == ExitCode.UNAUTHENTICATED and anonymous.error()["code"] == "UNAUTHENTICATED"


async def test_usage_errors_exit_2_naming_what_was_wrong(stack: CliStack, tmp_path: Path) -> None:
    both = await stack.cli("jobs", "submit", "local", str(tmp_path / "p"), "--data", "x", tenant=fresh_tenant())
    assert both.exit_code == ExitCode.USAGE and "--data" in both.stderr
    missing = await stack.cli("jobs", "submit", "local", str(tmp_path / "absent.bin"), tenant=fresh_tenant())
    assert missing.exit_code == ExitCode.USAGE and "absent.bin" in missing.stderr
    tenant = fresh_tenant()
    job = (await stack.cli("--json", "jobs", "submit", "sleepy", "--data", '{"seconds": 30}', tenant=tenant)).json()
    bad_build = await stack.cli("--json", "jobs", "cancel", job["id"], "--build-id", "no spaces", tenant=tenant)
    assert bad_build.exit_code == ExitCode.USAGE and "build" in bad_build.error()["detail"]
    assert (await stack.cli("jobs", "cancel", job["id"], tenant=tenant)).exit_code == 0
    bad_timeout = await stack.cli("jobs", "submit", "local", "--data", "x", "--job-timeout", "0", tenant=fresh_tenant())
    assert bad_timeout.exit_code == ExitCode.USAGE and "--job-timeout" in bad_timeout.stderr


@pytest.mark.parametrize("json_mode", [pytest.param(False, id="table"), pytest.param(True, id="json")])
async def test_a_job_command_without_a_tenant_is_one_line_and_the_usage_exit_code(
    stack: CliStack, json_mode: bool
) -> None:
    """Neither --tenant nor STRATA_TENANT: one line naming both, exit 2 — not the client's traceback and exit 1."""
    ran = await stack.cli(*(["--json"] if json_mode else []), "jobs", "submit", "local", "--data", "x")
    assert ran.exit_code == ExitCode.USAGE, ran.stderr
    assert len(ran.stderr.strip().splitlines()) == 1 and "Traceback" not in ran.stderr, ran.stderr
    detail = ran.error()["detail"] if json_mode else ran.stderr
    assert "--tenant" in detail and "STRATA_TENANT" in detail
    assert ran.stdout == ""
