"""A chat bot's message handler on Thermostat: wake the model pod on a message, tell the user while it boots
(with the ETA the controller measured from past boots), answer through the pod's proxy; `/run <text>` runs a job
on the worker pool and answers its result.

Run it against `make run`, with the `export` lines it printed in the environment (the operator token wakes when
no RIG_WAKE_TOKEN is set):

    .venv/bin/python examples/chat_bot_handler.py "/run hello"

Only the model call is the bot's own: `ask_model` posts to the pod's vLLM (OpenAI-compatible) endpoint; inject
another to talk to the model however the bot does.
"""

from __future__ import annotations

import asyncio
import json
import sys
import urllib.request
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from thermostat.client import AsyncThermostat, Phase, errors

Reply = Callable[[str], Awaitable[None]]
AskModel = Callable[[str, str], Awaitable[str]]  # (proxy URL, user text) → the model's answer


async def ask_vllm(proxy_url: str, text: str) -> str:
    """The model's answer from the pod's vLLM chat-completions endpoint (stdlib HTTP, off the event loop)."""

    def post() -> str:
        body = json.dumps({"messages": [{"role": "user", "content": text}], "max_tokens": 512}).encode()
        request = urllib.request.Request(  # noqa: S310 -- the controller's proxy URL, https in production
            f"{proxy_url}/v1/chat/completions", data=body, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=120) as response:  # noqa: S310
            answer: str = json.load(response)["choices"][0]["message"]["content"]
            return answer

    return await asyncio.to_thread(post)


@dataclass
class ChatBotHandler:
    """One bot's handler: `on_message(text, reply)` answers one user message through `reply`."""

    client: AsyncThermostat
    model_pod: str = "qwen"
    machine_type: str = "local"
    wake_timeout: float = 900
    ask_model: AskModel = ask_vllm

    async def on_message(self, text: str, reply: Reply) -> None:
        if text.startswith("/run "):
            await self._run_job(text.removeprefix("/run ").encode(), reply)
            return
        proxy_url = await self._model_ready(reply)
        if proxy_url is not None:
            await reply(await self.ask_model(proxy_url, text))

    async def _model_ready(self, reply: Reply) -> str | None:
        """Wake the model pod and follow it to ready, telling the user what happens; its proxy URL, or None."""
        told = False
        try:
            async for step in self.client.pods.ensure_ready(self.model_pod, timeout=self.wake_timeout):
                if step.phase == Phase.READY:
                    return step.pod.proxy_url if step.pod is not None else None
                if step.phase == Phase.WAKING or step.outcome is not None:
                    continue  # the wake asked, then answered: a running pod needs no word, a booting one gets one
                if not told:
                    await reply("Waking the model — one moment.")
                    told = True
                await reply(f"Still booting: {step.detail}.")
        except errors.WakeFailed as failed:
            await reply(f"The model cannot be woken right now: {failed.detail}")
        except errors.DeadlineExceeded:
            await reply("The model is taking too long to boot; please try again in a few minutes.")
        except errors.Unavailable:
            await reply("Thermostat is unreachable; please try again shortly.")
        return None

    async def _run_job(self, payload: bytes, reply: Reply) -> None:
        try:
            result = await self.client.pool.run(self.machine_type, payload)
        except errors.JobError as ended:  # failed, timed out or cancelled: the job says which and why
            await reply(f"The job {ended.job.id} {ended.job.state.replace('_', ' ')}: {ended.job.error or ''}".strip())
        except errors.ThermostatError as refused:
            await reply(f"The pool refused the job: {refused.detail}")
        else:
            await reply(result.decode(errors="replace"))


async def main(argv: list[str]) -> None:
    async def say(text: str) -> None:
        print(text, flush=True)

    async with AsyncThermostat.connect() as client:
        await ChatBotHandler(client).on_message(" ".join(argv) or "hello", say)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
