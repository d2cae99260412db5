"""The client's examples against the real stack `make run` starts (`python -m thermostat.dev.stack`: embedded
Postgres, the RunPod simulator, every service, local reference workers, the real Envoy edge), through the edge's
gRPC passthrough as a bot or a notebook server would: the chat-bot handler wakes the model pod with progress
messages and answers from the ready pod, and runs a pool job; the notebook hook runs a cell as a job, waits on
its stream and gets the result or the typed error, and an interrupt cancels it. Each example's command line runs
as the README's quick start writes it; the quick starts themselves run in tests/e2e/test_quick_starts.py."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import openai
import pytest

from examples.chat_bot_handler import ChatBotHandler, model_client
from examples.notebook_server_hook import GpuCellHook
from tests.e2e.test_make_run import OPERATOR, POOL, DevStack
from tests.fixtures.polling import eventually
from tests.fixtures.postgres import embedded_data_dir
from tests.integration.pool_dispatcher.conftest import local_type, sleepy_type
from thermostat.client import AsyncThermostat, ClientConfig, Phase, errors

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
WAKE_TOKEN = "e2e-wake"
INFERENCE_TOKEN = "e2e-inference"
POOL_TOKEN = POOL["Authorization"].removeprefix("Bearer ")
CATALOGUE = [
    local_type("local"),
    local_type("python", env={"STRATA_WORKER_HANDLER": "python"}),
    local_type("failing", env={"STRATA_WORKER_HANDLER": "fail", "STRATA_WORKER_FAIL_MESSAGE": "CUDA out of memory"}),
    sleepy_type("sleepy", env={"STRATA_WORKER_SLEEP_SECONDS": "60"}),
]


@pytest.fixture(scope="module")
def edge_target() -> Iterator[str]:
    """The dev stack with fast wake polls and monitor ticks, a catalogue of three types, and the wake token."""
    with embedded_data_dir() as data_dir:
        stack = DevStack(
            data_dir,
            {
                "METERING_PORT": "0",
                "RUNPOD_WAKE_POLL_SECONDS": "0.2",
                "CHECK_SECONDS": "0.3",
                "RIG_WAKE_TOKEN": WAKE_TOKEN,
                "THERMOSTAT_INFERENCE_TOKEN": INFERENCE_TOKEN,
                "POOL_MACHINE_TYPES": json.dumps(CATALOGUE),
            },
        )
        try:
            yield stack.wait_up().removeprefix("http://")
        finally:
            stack.kill()


def edge_target_of(client: AsyncThermostat) -> str:
    return client.config.target


def config(target: str, **changes: str | None) -> ClientConfig:
    settings: dict[str, str | None] = {
        "target": target,
        "wake_token": WAKE_TOKEN,
        "operator_token": OPERATOR["X-Rig-Operator-Token"],
        "pool_token": POOL_TOKEN,
        "tenant": "e2e-bot",
        **changes,
    }
    return ClientConfig.from_env(env={}, **settings)  # type: ignore[arg-type]


@pytest.fixture
async def client(edge_target: str) -> AsyncIterator[AsyncThermostat]:
    async with AsyncThermostat(config(edge_target)) as opened:
        yield opened


async def test_the_bot_wakes_the_model_with_a_word_to_the_user_and_answers_through_the_endpoint(
    client: AsyncThermostat,
) -> None:
    """A message to a stopped pod: one word while it wakes, then the engine's answer streamed through the edge's
    OpenAI endpoint; the next message goes straight to the ready pod."""
    replies: list[str] = []

    async def reply(text: str) -> None:
        replies.append(text)

    if (await client.pods.status("qwen")).is_running:  # a wake from asleep, whatever ran before
        await client.pods.stop("qwen")

        async def monitor_saw_it_down() -> bool | None:  # its next boot is then one the monitor watches
            return True if (await client.pods.monitor("qwen")).phase == "Down" else None

        await eventually(monitor_saw_it_down, timeout=30, every=0.1)
    async with model_client(edge_target_of(client), INFERENCE_TOKEN) as model:
        await ChatBotHandler(client, model).on_message("hello", reply)
        assert replies[0].startswith("Waking the model — one moment")
        assert "simulated pod" in replies[-1], replies
        pod = await client.pods.status("qwen")
        assert pod.is_running and pod.HasField("ready_since")

        replies.clear()
        await ChatBotHandler(client, model).on_message("again", reply)
    assert len(replies) == 1 and "simulated pod" in replies[0], "a ready pod answers without a word about waking"


async def test_the_bot_runs_a_pool_job_and_reports_a_failed_one(client: AsyncThermostat) -> None:
    replies: list[str] = []

    async def reply(text: str) -> None:
        replies.append(text)

    async with model_client(edge_target_of(client), INFERENCE_TOKEN) as model:
        await ChatBotHandler(client, model).on_message("/run hello pool", reply)
        await ChatBotHandler(client, model, machine_type="failing").on_message("/run boom", reply)
    assert replies[0] == "hello pool"
    assert " failed: " in replies[1] and "CUDA out of memory" in replies[1]


async def test_a_bot_with_the_wrong_inference_token_fails_loudly_not_in_the_chat(client: AsyncThermostat) -> None:
    replies: list[str] = []

    async def reply(text: str) -> None:
        replies.append(text)

    async with model_client(edge_target_of(client), "not-the-inference-token") as wrong:
        with pytest.raises(openai.AuthenticationError):
            await ChatBotHandler(client, wrong).on_message("hello", reply)
    assert replies == []


async def test_a_notebook_cell_runs_as_a_job_and_its_states_stream_in(client: AsyncThermostat) -> None:
    seen: list[str] = []
    hook = GpuCellHook(client, on_state=lambda _job, state: seen.append(state))
    output = await hook.run_cell("cell-1", "local", "x = 1 + 1")
    assert output == b'{"build_id": "cell-1", "source": "x = 1 + 1"}'
    assert seen[-1] == "completed" and set(seen) <= {"queued", "dispatched", "running", "completed"}


async def test_a_failing_cell_raises_job_failed_with_the_job(client: AsyncThermostat) -> None:
    hook = GpuCellHook(client)
    with pytest.raises(errors.JobFailed) as failed:
        await hook.run_cell("cell-2", "failing", "model.fit()")
    assert failed.value.job.state == "failed" and "CUDA out of memory" in (failed.value.job.error or "")


async def test_a_cell_past_its_timeout_raises_job_timed_out(client: AsyncThermostat) -> None:
    hook = GpuCellHook(client, timeout_seconds=1)
    with pytest.raises(errors.JobTimedOut) as timed_out:
        await hook.run_cell("cell-3", "sleepy", "time.sleep(60)")
    assert timed_out.value.job.timeout_seconds == 1


async def test_interrupting_the_kernel_cancels_the_cells_job(client: AsyncThermostat) -> None:
    running = asyncio.Event()
    hook = GpuCellHook(client, on_state=lambda _job, state: running.set() if state == "running" else None)
    cell = asyncio.create_task(hook.run_cell("cell-4", "sleepy", "train()"))
    await asyncio.wait_for(running.wait(), 60)
    await hook.interrupt("cell-4")
    with pytest.raises(errors.JobCancelled) as cancelled:
        await cell
    assert cancelled.value.job.state == "cancelled"


async def test_an_unknown_machine_type_is_invalid_argument(client: AsyncThermostat) -> None:
    with pytest.raises(errors.InvalidArgument):
        await GpuCellHook(client).run_cell("cell-5", "h100-typo", "x")


def _run_example(script: str, args: list[str], edge_target: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "THERMOSTAT_ADDR": edge_target,
        "RIG_WAKE_TOKEN": WAKE_TOKEN,
        "THERMOSTAT_INFERENCE_TOKEN": INFERENCE_TOKEN,
        "RIG_OPERATOR_TOKEN": OPERATOR["X-Rig-Operator-Token"],
        "STRATA_POOL_TOKEN": POOL_TOKEN,
        "STRATA_TENANT": "demo",
    }
    return subprocess.run(
        [sys.executable, f"examples/{script}", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_examples_command_lines_run_as_the_quick_start_writes_them(edge_target: str) -> None:
    bot = _run_example("chat_bot_handler.py", ["/run hello"], edge_target)
    assert (bot.returncode, bot.stdout) == (0, "hello\n"), bot.stderr
    chat = _run_example("chat_bot_handler.py", ["hello"], edge_target)
    assert chat.returncode == 0 and "simulated pod" in chat.stdout, chat.stderr
    notebook = _run_example("notebook_server_hook.py", ["python", "print(1 + 1)"], edge_target)
    assert notebook.returncode == 0, notebook.stderr
    *states, output = notebook.stdout.splitlines()
    assert output == "2"  # the cell ran: its output, not the payload echoed back
    assert states[-1].endswith("] completed")
    echoed = _run_example("notebook_server_hook.py", ["local", "print(1 + 1)"], edge_target)
    assert echoed.returncode == 0, echoed.stderr
    assert json.loads(echoed.stdout.splitlines()[-1])["source"] == "print(1 + 1)"


async def test_the_sync_client_through_the_edge(edge_target: str) -> None:
    from thermostat.client import Thermostat

    def script() -> tuple[str, bytes]:
        with Thermostat(config(edge_target)) as t:
            phases = [step.phase for step in t.pods.ensure_ready("qwen", timeout=60)]
            return phases[-1], t.pool.run("local", b"sync through the edge")

    assert await asyncio.to_thread(script) == (Phase.READY, b"sync through the edge")
