"""A chat bot's message handler on Thermostat: the model pod through the edge's OpenAI endpoint, which wakes it on
the message, holds the request while it boots and streams the answer; a word to the user while the pod wakes (with
the ETA measured from past boots); `/run <text>` runs a job on the worker pool and answers its result.

Run it against `make run`, with the `export` lines it printed in the environment (THERMOSTAT_ADDR,
THERMOSTAT_INFERENCE_TOKEN for the model, STRATA_POOL_TOKEN and STRATA_TENANT for the pool):

    .venv/bin/python examples/chat_bot_handler.py "hello"
    .venv/bin/python examples/chat_bot_handler.py "/run hello"

Any OpenAI client works the same way: `base_url` is the edge's /openai/v1, `api_key` the inference token, `model`
the pod's name. The bot never orchestrates the wake itself, and never holds a proxy URL that an idle stop made stale.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import openai

from thermostat.client import AsyncThermostat, errors

Reply = Callable[[str], Awaitable[None]]


def model_client(addr: str | None = None, token: str | None = None) -> openai.AsyncOpenAI:
    """The official OpenAI client on the edge's endpoint (THERMOSTAT_ADDR, THERMOSTAT_INFERENCE_TOKEN)."""
    addr = addr or os.environ.get("THERMOSTAT_ADDR", "127.0.0.1:8080")
    token = token or os.environ["THERMOSTAT_INFERENCE_TOKEN"]
    # a held request waits for the pod to boot (minutes): the client's own timeout must not cut it first
    return openai.AsyncOpenAI(base_url=f"http://{addr}/openai/v1", api_key=token, timeout=1200, max_retries=0)


@dataclass
class ChatBotHandler:
    """One bot's handler: `on_message(text, reply)` answers one user message through `reply`."""

    client: AsyncThermostat
    model: openai.AsyncOpenAI
    model_pod: str = "qwen"
    machine_type: str = "local"

    async def on_message(self, text: str, reply: Reply) -> None:
        if text.startswith("/run "):
            await self._run_job(text.removeprefix("/run ").encode(), reply)
            return
        try:
            await self._tell_if_waking(reply)
            stream = await self.model.chat.completions.create(
                model=self.model_pod, messages=[{"role": "user", "content": text}], max_tokens=512, stream=True
            )
            parts = [chunk.choices[0].delta.content or "" async for chunk in stream if chunk.choices]
            await reply("".join(parts).strip())
        except openai.RateLimitError as refused:  # 429 insufficient_quota: the pod's budget is spent
            await reply(f"The model's budget is spent: {refused.message}")
        except openai.APIStatusError as failed:
            if failed.status_code == 504:
                await reply("The model is taking too long to boot; please try again in a few minutes.")
            elif failed.status_code in (502, 503):  # the wake failed, the pod was stopped, or too many wait
                await reply(f"The model cannot answer right now: {failed.message}")
            else:
                raise  # 401/404/400: a misconfigured bot fails loudly, not in the chat
        except openai.APIConnectionError:
            await reply("Thermostat is unreachable; please try again shortly.")

    async def _tell_if_waking(self, reply: Reply) -> None:
        """One word to the user before a request that will wait for the pod to wake (GET /models wakes nothing)."""
        models = {m.id: m.model_extra or {} for m in (await self.model.models.list()).data}
        state = models.get(self.model_pod, {})
        if state.get("state") == "ready":
            return
        eta = state.get("eta_seconds")
        when = f" (ready in about {max(1, round(float(eta) / 60))} min)" if isinstance(eta, int | float) else ""
        await reply(f"Waking the model — one moment{when}.")

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

    async with AsyncThermostat.connect() as client, model_client() as model:
        await ChatBotHandler(client, model).on_message(" ".join(argv) or "hello", say)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
