"""`thermostat pods …` and pod budgets against the whole stack behind the real edge: a wake shown phase by
phase until ready (an ETA once a boot was measured), status, watch, stop, history, the monitor's view, spend,
and the exit codes a refused wake, an unknown pod, a missing token and an unreachable edge give."""

from __future__ import annotations

import asyncio
import json
import signal

import pytest

from tests.e2e.cli.stack import CliStack, line_matching, run_cli
from thermostat.chassis.ports import free_port
from thermostat.cli.exit_codes import ExitCode
from thermostat.client import Phase
from thermostat.client.progress import ORDER

pytestmark = pytest.mark.e2e

POD_FIELDS = {"name", "configured", "status", "is_running", "pod_id", "proxy_url", "pods_on_volume", "datacenter"}


async def test_pods_start_shows_the_wake_then_ready_and_prints_the_ready_pod(stack: CliStack) -> None:
    """The progress lines go to stderr, from the wake's outcome to ready; stdout is the ready pod. Held in
    PROVISIONING until the CLI said so, the wake answers after the watch showed the boot: its answer is shown in
    the phase reached, and no phase follows a later one (issue 35: `loading → waking (Created …) → ready`)."""
    held = stack.sim.settings.provisioning_seconds
    seen: list[str] = []
    try:
        stack.sim.configure(provisioning_seconds=-1)  # the pod is placed only once the test lets it go
        async with stack.script("pods", "start", "llama") as process:
            await line_matching(process.stderr, r"^provisioning ", seen)
            stack.sim.configure(provisioning_seconds=held)
            await line_matching(process.stderr, r"^ready ", seen)
            out, err = await process.communicate()
            seen += err.decode().splitlines()
            assert process.returncode == 0, seen
    finally:
        stack.sim.configure(provisioning_seconds=held)
    stdout = out.decode()
    assert seen[0].startswith("waking")
    phases = [line.split()[0] for line in seen]
    ranks = [ORDER.index(Phase(phase)) for phase in phases]
    assert ranks == sorted(ranks), seen
    assert [line for line in seen if "llama: Created" in line and not line.startswith("waking")], seen  # its answer
    assert seen[-1].split() == ["ready", "llama", "is", "ready"]
    assert [line for line in seen if line.startswith("ready")] == [seen[-1]], seen  # once, not twice
    assert "RUNNING" in stdout and "ready since" in stdout


async def test_pods_start_json_prints_only_the_ready_pod(stack: CliStack) -> None:
    pod = (await stack.cli("--json", "pods", "start", "phi")).json()
    assert set(pod) >= POD_FIELDS
    assert (pod["name"], pod["status"], pod["is_running"]) == ("phi", "RUNNING", True)
    assert pod["ready_since"].endswith("Z")


async def test_while_the_model_loads_the_progress_says_so_with_an_eta_once_a_boot_was_measured(
    stack: CliStack,
) -> None:
    """The installed script, line by line: the model is held loading until the CLI has said so — on the pod's
    first boot with no estimate (no history), on the second with the ETA the first one measured — then ready."""
    held = stack.sim.settings.model_ready_seconds
    try:
        for expected in ("no estimate yet", "ready in about"):
            stack.sim.configure(model_ready_seconds=-1)  # the model never answers until released
            seen: list[str] = []
            async with stack.script("pods", "start", "mistral") as process:
                loading = await line_matching(process.stderr, r"^loading ", seen)
                assert expected in loading, seen
                stack.sim.configure(model_ready_seconds=held)
                await line_matching(process.stderr, r"^ready +mistral is ready$", seen)
                assert await process.wait() == 0, seen
            assert seen[0].startswith("waking"), seen
            if expected == "no estimate yet":
                stopped = (await stack.cli("--json", "pods", "stop", "mistral")).json()
                assert stopped["ok"] is True and [p["ok"] for p in stopped["pods"]] == [True]
    finally:
        stack.sim.configure(model_ready_seconds=held)

    history = (await stack.cli("--json", "pods", "history", "mistral", "--page-size", "50")).json()
    actions = [e["action"] for e in history["entries"] if "action" in e]
    wakes = [e["wake"] for e in history["entries"] if "wake" in e]
    assert [(a["action"], a["trigger"]) for a in actions] == [("Start", "wake"), ("Stop", "manual"), ("Create", "wake")]
    assert len(wakes) == 2 and {w["outcome"] for w in wakes} == {"Succeeded"}
    table = await stack.cli("pods", "history", "mistral")
    assert table.exit_code == 0 and "Stop" in table.stdout and "manual" in table.stdout and "Wake" in table.stdout
    # a stop and a wake that created nothing have no price: none shown, not 0.00
    assert "0.00" not in table.stdout, table.stdout


async def test_pods_status_json_carries_the_get_pod_fields_and_the_table_renders(stack: CliStack) -> None:
    status = (await stack.cli("--json", "pods", "status", "qwen")).json()
    assert set(status) >= POD_FIELDS and status["name"] == "qwen" and status["configured"] is True
    after = (await stack.cli("pods", "status", "qwen", "--json")).json()  # --json after the command too
    assert set(after) == set(status) and after["name"] == "qwen"
    table = await stack.cli("pods", "status", "qwen")
    assert table.exit_code == 0
    assert "datacenter" in table.stdout and "EU-RO-1" in table.stdout


async def test_pods_watch_prints_a_json_line_per_change_and_ends_at_ready(stack: CliStack) -> None:
    started = (await stack.cli("--json", "pods", "start", "gemma", "--no-wait")).json()
    assert started["outcome"] in ("Created", "Started", "Waiting")
    ran = await stack.cli("--json", "pods", "watch", "gemma", "--until-ready")
    assert ran.exit_code == 0, ran.stderr
    views = [json.loads(line) for line in ran.stdout.splitlines()]
    assert views and all(v["name"] == "gemma" for v in views)
    assert views[-1]["is_running"] is True and "ready_since" in views[-1]
    assert all("ready_since" not in v for v in views[:-1])


async def test_pods_monitor_and_spend_show_the_monitor_s_view_and_what_the_pod_billed(stack: CliStack) -> None:
    assert (await stack.cli("pods", "start", "qwen")).exit_code == 0
    view = (await stack.cli("--json", "pods", "monitor", "qwen")).json()
    assert view["name"] == "qwen" and view["watch"] == "Watching" and view["phase"]
    assert {"idle_streak", "idle_threshold", "booting_ticks", "boot_grace_threshold"} <= set(view)
    assert "phase" in (await stack.cli("pods", "monitor", "qwen")).stdout

    spend = (await stack.cli("--json", "pods", "spend", "qwen")).json()
    assert {"name", "as_of", "total_usd", "today_usd", "month_usd", "lines", "intervals"} <= set(spend)
    table = await stack.cli("pods", "spend", "qwen")
    assert table.exit_code == 0 and "total usd" in table.stdout


async def test_budgets_set_then_get_for_a_pod_and_a_wake_over_it_exits_refused(stack: CliStack) -> None:
    """A zero daily ceiling: set (operator token) and read back; the wake is refused, exit 5, nothing started."""
    set_ = (await stack.cli("--json", "budgets", "set", "pod", "gemma", "--daily", "0", "--monthly", "100")).json()
    assert (set_["name"], set_["daily_usd"], set_["monthly_usd"]) == ("gemma", 0, 100)
    got = (await stack.cli("--json", "budgets", "get", "pod", "gemma")).json()
    assert (got["daily_usd"], got["monthly_usd"]) == (0, 100) and "today_usd" in got
    assert "monthly usd" in (await stack.cli("budgets", "get", "pod", "gemma")).stdout

    await stack.cli("pods", "stop", "gemma")
    refused = await stack.cli("--json", "pods", "start", "gemma")
    assert refused.exit_code == ExitCode.REFUSED, refused.stderr
    assert "budget" in refused.error()["detail"]

    cleared = (await stack.cli("--json", "budgets", "set", "pod", "gemma")).json()
    assert "daily_usd" not in cleared and "monthly_usd" not in cleared


async def test_pods_status_prints_the_numbers_of_a_refused_wake_as_they_were_written(stack: CliStack) -> None:
    """The refusal's reason ends in `[budget=daily limit_usd=…]`: the table shows it, not a rich style of that
    name (a table cell's text is not markup)."""
    await stack.cli("--json", "budgets", "set", "pod", "gemma", "--daily", "0")
    try:
        await stack.cli("pods", "stop", "gemma")
        assert (await stack.cli("--json", "pods", "start", "gemma")).exit_code == ExitCode.REFUSED
        shown = await stack.cli("pods", "status", "gemma")
    finally:
        await stack.cli("--json", "budgets", "set", "pod", "gemma")
    assert shown.exit_code == 0, shown.stderr
    assert "[budget=daily limit_usd=0.0000" in " ".join(shown.stdout.split())


async def test_budgets_set_without_the_operator_token_exits_unauthenticated(stack: CliStack) -> None:
    ran = await stack.cli("--json", "budgets", "set", "pod", "qwen", "--daily", "5", operator=False)
    assert ran.exit_code == ExitCode.UNAUTHENTICATED
    assert ran.error()["code"] == "UNAUTHENTICATED"


async def test_an_unknown_pod_exits_not_found(stack: CliStack) -> None:
    ran = await stack.cli("--json", "pods", "status", "nosuchpod")
    assert ran.exit_code == ExitCode.NOT_FOUND
    assert ran.error()["code"] == "NOT_FOUND" and "nosuchpod" in ran.error()["detail"]


async def test_a_negative_ceiling_is_a_usage_error_naming_the_option(stack: CliStack) -> None:
    ran = await stack.cli("budgets", "set", "pod", "qwen", "--daily", "-1")
    assert ran.exit_code == ExitCode.USAGE and "--daily" in ran.stderr


async def test_an_edge_nobody_listens_on_exits_unavailable() -> None:
    ran = await run_cli(["--json", "--addr", f"127.0.0.1:{free_port()}", "--timeout", "2", "pods", "status", "qwen"])
    assert ran.exit_code == ExitCode.UNAVAILABLE, (ran.stdout, ran.stderr)
    assert ran.error()["code"] in ("UNAVAILABLE", "DEADLINE_EXCEEDED")


async def test_ctrl_c_ends_a_watch_of_the_installed_script_with_exit_130(stack: CliStack) -> None:
    """.venv/bin/thermostat (what make venv installs) follows a pod until SIGINT, then exits 130."""
    async with stack.script("--json", "pods", "watch", "qwen") as process:
        assert process.stdout is not None
        first = await asyncio.wait_for(process.stdout.readline(), timeout=30)
        assert json.loads(first)["name"] == "qwen"
        process.send_signal(signal.SIGINT)
        _, stderr = await asyncio.wait_for(process.communicate(), timeout=30)
        assert process.returncode == ExitCode.INTERRUPTED, stderr
