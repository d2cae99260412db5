"""AsyncThermostat: a channel to the edge (or one per service address given) and the three sub-clients over it."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from types import TracebackType
from typing import Self, Unpack

from ._calls import Calls
from .config import ClientConfig, ConnectArgs
from .metering import AsyncMetering
from .pods import AsyncPods
from .pool import AsyncPool
from .retry import RetryPolicy
from .transport import Sleep, Transport


class AsyncThermostat:
    """The async client. Use it as an async context manager (the channels close on exit), or call close().

    `retry`, `sleep`, `draw` and `clock` shape the retry backoff and deadlines (tests inject them)."""

    def __init__(
        self,
        config: ClientConfig | None = None,
        *,
        retry: RetryPolicy | None = None,
        sleep: Sleep = asyncio.sleep,
        draw: Callable[[], float] = random.random,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config if config is not None else ClientConfig.from_env()
        self._transport = Transport(policy=retry, sleep=sleep, draw=draw, clock=clock)
        calls = Calls(self._transport, self.config)
        self.pods = AsyncPods(calls)
        self.pool = AsyncPool(calls)
        self.metering = AsyncMetering(calls)

    @classmethod
    def connect(cls, **arguments: Unpack[ConnectArgs]) -> AsyncThermostat:
        """A client from arguments, each falling back to its environment variable (ClientConfig.from_env)."""
        return cls(ClientConfig.from_env(**arguments))

    async def close(self) -> None:
        await self._transport.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        await self.close()
