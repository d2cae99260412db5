"""One channel and the two ways a call goes over it: unary with a deadline and retries, and a server stream that
is reopened after UNAVAILABLE (streams here are reads: a reopened watch starts from the current state).

Every failure leaves as a typed error (errors.from_rpc_error); nothing here logs, so metadata — the tokens —
is never printed.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from typing import Any

import grpc
from grpc import aio

from . import errors
from .retry import RetryPolicy, backoff_delay, should_retry

Metadata = Sequence[tuple[str, str]]
Sleep = Callable[[float], Awaitable[None]]

MAX_MESSAGE_BYTES = 64 * 1024 * 1024  # above the pool's largest payload / result (32 MiB) and its framing
CHANNEL_OPTIONS = (
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.enable_retries", 0),  # retries are this module's decision (never for a call that may have billed)
)


class Transport:
    """Transport owns one channel per target; `sleep`, `draw` (a random number in [0, 1)) and `clock` are
    injectable."""

    def __init__(
        self,
        *,
        policy: RetryPolicy | None = None,
        sleep: Sleep = asyncio.sleep,
        draw: Callable[[], float] = random.random,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._channels: dict[str, aio.Channel] = {}
        self.policy = policy or RetryPolicy()
        self._sleep = sleep
        self._draw = draw
        self.clock = clock

    def channel(self, target: str) -> aio.Channel:
        """The channel to `target` (opened on first use; connecting is lazy, so this never blocks)."""
        if target not in self._channels:
            self._channels[target] = aio.insecure_channel(target, options=CHANNEL_OPTIONS)
        return self._channels[target]

    async def close(self) -> None:
        channels, self._channels = list(self._channels.values()), {}
        for channel in channels:
            await channel.close()

    async def _pause(self, retry: int) -> None:
        await self._sleep(backoff_delay(self.policy, retry, self._draw()))

    async def unary(
        self,
        method: aio.UnaryUnaryMultiCallable,
        request: Any,
        *,
        metadata: Metadata,
        timeout: float,
        may_bill: bool = False,
    ) -> Any:
        response, _ = await self.unary_with_metadata(
            method, request, metadata=metadata, timeout=timeout, may_bill=may_bill
        )
        return response

    async def unary_with_metadata(
        self,
        method: aio.UnaryUnaryMultiCallable,
        request: Any,
        *,
        metadata: Metadata,
        timeout: float,
        may_bill: bool = False,
    ) -> tuple[Any, dict[str, str]]:
        """The response and the server's metadata, initial and trailing together. `timeout` bounds the call and
        its retries together."""
        deadline = self.clock() + timeout
        retry = 0
        while True:
            remaining = deadline - self.clock()
            if remaining <= 0:
                raise errors.DeadlineExceeded(grpc.StatusCode.DEADLINE_EXCEEDED, f"no answer within {timeout:g} s")
            call = method(request, metadata=tuple(metadata), timeout=remaining)
            try:
                response = await call
                answered = (*(await call.initial_metadata() or ()), *(await call.trailing_metadata() or ()))
            except aio.AioRpcError as error:
                code, detail = error.code(), error.details() or ""
                if retry + 1 >= self.policy.attempts or not should_retry(code, detail, may_bill=may_bill):
                    raise errors.from_status(code, detail) from None
                await self._pause(retry)
                retry += 1
                continue
            return response, {k: v for k, v in answered if isinstance(v, str)}

    async def stream(
        self,
        method: aio.UnaryStreamMultiCallable,
        request: Any,
        *,
        metadata: Metadata,
        timeout: float,
    ) -> AsyncGenerator[Any, None]:
        """The stream's messages until the server ends it; reopened after UNAVAILABLE (at most the policy's
        attempts in a row without a message between), all within `timeout`."""
        deadline = self.clock() + timeout
        retry = 0
        while True:
            remaining = deadline - self.clock()
            if remaining <= 0:
                raise errors.DeadlineExceeded(grpc.StatusCode.DEADLINE_EXCEEDED, f"stream ran past {timeout:g} s")
            call = method(request, metadata=tuple(metadata), timeout=remaining)
            try:
                async for message in call:
                    retry = 0
                    yield message
                return
            except aio.AioRpcError as error:
                code, detail = error.code(), error.details() or ""
                if retry + 1 >= self.policy.attempts or not should_retry(code, detail, may_bill=False):
                    raise errors.from_status(code, detail) from None
                await self._pause(retry)
                retry += 1
            finally:
                call.cancel()
