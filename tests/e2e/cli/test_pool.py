"""`thermostat workers`, `usage`, `spend` and `machine-types get|put` against the whole stack behind the real
edge: JSON with the pool's fields, tables, a catalogue put from a file, and what a bad one exits with."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.cli.conftest import fresh_tenant
from tests.e2e.cli.stack import CATALOGUE, CliStack, run_cli
from tests.fixtures.polling import eventually
from tests.integration.pool_dispatcher.conftest import ADMIN_TOKEN, API_TOKEN, local_type
from thermostat.cli.exit_codes import ExitCode

pytestmark = pytest.mark.e2e

WORKER_FIELDS = {"id", "tenant_id", "machine_type", "image", "backend", "state", "created_at", "health_misses"}
USAGE_FIELDS = {"position", "job_id", "tenant_id", "machine_type", "worker_id", "terminal_state", "duration_seconds"}


async def ran_a_job(stack: CliStack, tenant: str) -> None:
    ran = await stack.cli("jobs", "submit", "local", "--data", "x", "--wait", tenant=tenant)
    assert ran.exit_code == 0, ran.stderr


async def test_workers_lists_the_tenant_s_machines_as_json_and_as_a_table(stack: CliStack) -> None:
    tenant = fresh_tenant()
    await ran_a_job(stack, tenant)
    workers = (await stack.cli("--json", "workers", tenant=tenant)).json()
    assert workers and all(set(w) >= WORKER_FIELDS for w in workers)
    assert {(w["tenant_id"], w["machine_type"], w["backend"]) for w in workers} == {(tenant, "local", "local")}
    table = await stack.cli("workers", tenant=tenant)
    assert table.exit_code == 0 and tenant in table.stdout and "machine type" in table.stdout


async def test_usage_lists_one_event_per_finished_job_and_resumes_after_a_position(stack: CliStack) -> None:
    tenant = fresh_tenant()
    await ran_a_job(stack, tenant)
    await ran_a_job(stack, tenant)
    events = (await stack.cli("--json", "usage", tenant=tenant)).json()
    assert len(events) == 2 and all(set(e) >= USAGE_FIELDS for e in events)
    assert {e["terminal_state"] for e in events} == {"completed"}
    after = (await stack.cli("--json", "usage", "--after-position", str(events[0]["position"]), tenant=tenant)).json()
    assert [e["job_id"] for e in after] == [events[1]["job_id"]]
    table = await stack.cli("usage", tenant=tenant)
    assert table.exit_code == 0 and "completed" in table.stdout and "--after-position" in table.stderr


def readme_exports(stack: CliStack, tenant: str) -> dict[str, str]:
    """What README's quick start exports: both pool tokens and a tenant."""
    return {
        "THERMOSTAT_ADDR": stack.edge,
        "STRATA_POOL_TOKEN": API_TOKEN,
        "STRATA_POOL_ADMIN_TOKEN": ADMIN_TOKEN,
        "STRATA_TENANT": tenant,
    }


async def test_with_readmes_exports_workers_and_usage_are_the_tenants_unless_all_are_asked_for(
    stack: CliStack,
) -> None:
    """Issue 35: the exported admin token listed every tenant's machines as "the tenant's"; --all-tenants lists all."""
    mine, other = fresh_tenant(), fresh_tenant()
    await ran_a_job(stack, mine)
    await ran_a_job(stack, other)
    env = readme_exports(stack, mine)
    for command in ("workers", "usage"):
        listed = (await run_cli(["--json", command], env=env)).json()
        assert listed and {item["tenant_id"] for item in listed} == {mine}, command
        every = (await run_cli(["--json", command, "--all-tenants"], env=env)).json()
        assert {mine, other} <= {item["tenant_id"] for item in every}, command
    refused = await run_cli(["--json", "workers", "--all-tenants", "--tenant-id", other], env=env)
    assert refused.exit_code == ExitCode.USAGE and "not both" in refused.error()["detail"]
    plain = {k: v for k, v in env.items() if k != "STRATA_POOL_ADMIN_TOKEN"}
    refused = await run_cli(["--json", "workers", "--all-tenants"], env=plain)
    assert refused.exit_code == ExitCode.USAGE and "STRATA_POOL_ADMIN_TOKEN" in refused.error()["detail"]


async def test_an_explicit_pool_token_wins_over_the_exported_admin_token(stack: CliStack) -> None:
    """`thermostat --pool-token wrong workers` with README's exports is refused (3), not answered with the admin's."""
    env = readme_exports(stack, fresh_tenant())
    wrong = await run_cli(["--pool-token", "wrong", "workers"], env=env)
    assert wrong.exit_code == ExitCode.UNAUTHENTICATED, (wrong.stdout, wrong.stderr)
    assert (await run_cli(["--pool-token", API_TOKEN, "workers"], env=env)).exit_code == 0


async def test_spend_shows_the_tenant_s_machine_and_job_time(stack: CliStack) -> None:
    """Once metering has read the pool's feeds, the tenant has a line for its machine type."""
    tenant = fresh_tenant()
    await ran_a_job(stack, tenant)

    async def line() -> dict[str, Any] | None:
        spend = (await stack.cli("--json", "spend", tenant=tenant)).json()
        assert {"lines", "since", "until"} <= set(spend)
        lines = [s for s in spend["lines"] if s["tenant_id"] == tenant and s["job_seconds"] > 0]
        return lines[0] if lines else None

    found = await eventually(line, timeout=30, every=0.3)
    assert found["machine_type"] == "local" and found["machine_seconds"] > 0
    assert {"machine_usd", "job_usd", "priced"} <= set(found)
    table = await stack.cli("spend", "--since", "2000-01-01", tenant=tenant)
    assert table.exit_code == 0 and tenant in table.stdout


async def test_machine_types_put_from_a_file_then_get_shows_the_new_catalogue(stack: CliStack, tmp_path: Path) -> None:
    catalogue = [*CATALOGUE, local_type("extra", max_workers=1, price_per_hour=0.5)]
    file = tmp_path / "types.json"
    file.write_text(json.dumps(catalogue))
    stored = (await stack.cli("--json", "machine-types", "put", str(file), admin=True)).json()
    assert [t["name"] for t in stored] == [t["name"] for t in catalogue]
    got = (await stack.cli("--json", "machine-types", "get", admin=True)).json()
    extra = next(t for t in got if t["name"] == "extra")
    assert (extra["max_workers"], extra["price_per_hour"]) == (1, 0.5)
    table = await stack.cli("machine-types", "get")
    assert table.exit_code == 0 and "extra" in table.stdout and "sleepy" in table.stdout


async def test_a_bad_catalogue_is_refused_naming_what_is_wrong_and_nothing_is_stored(
    stack: CliStack, tmp_path: Path
) -> None:
    before = (await stack.cli("--json", "machine-types", "get", admin=True)).json()
    not_json = tmp_path / "broken.json"
    not_json.write_text("[{")
    ran = await stack.cli("machine-types", "put", str(not_json), admin=True)
    assert ran.exit_code == ExitCode.USAGE and "broken.json" in ran.stderr and "not JSON" in ran.stderr

    unservable = tmp_path / "fly.json"
    unservable.write_text(json.dumps([{"name": "a100", "image": "x", "backend": "fly"}]))
    refused = await stack.cli("--json", "machine-types", "put", str(unservable), admin=True)
    assert refused.exit_code == ExitCode.USAGE, refused.stderr
    assert refused.error()["code"] == "INVALID_ARGUMENT" and "a100" in refused.error()["detail"]

    anonymous = await stack.cli("machine-types", "put", str(unservable))
    assert anonymous.exit_code == ExitCode.UNAUTHENTICATED
    assert (await stack.cli("--json", "machine-types", "get", admin=True)).json() == before
