"""Thermostat: the async client behind a private event loop in a daemon thread, for scripts.

Each method runs its coroutine on that loop and blocks for the answer; an async iterator becomes a plain
iterator, each `next()` one step on the loop (breaking out of the loop closes the stream). The method surface is
the async one, typed from it (`blocking` / `blocking_iter` carry each signature over), so the two cannot drift.
Interrupting a blocked call (Ctrl-C) cancels its coroutine on the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import threading
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from types import TracebackType
from typing import Any, Concatenate, Generic, ParamSpec, Self, TypeVar, Unpack, overload

from .async_client import AsyncThermostat
from .config import ClientConfig, ConnectArgs
from .metering import AsyncMetering
from .pods import AsyncPods
from .pool import AsyncPool
from .retry import RetryPolicy

A = TypeVar("A")
P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")


# How long an interrupted call, or a stream's close, may take to unwind on the loop before the caller gives up on it.
_SETTLE_SECONDS = 5.0


class _Call(Generic[R]):
    """One coroutine run on the loop for a caller blocked in another thread.

    The caller waits on a bare lock the loop releases when the task ends, never on a lock the two threads share
    (a concurrent Future's condition): Ctrl-C can land between any two bytecodes of the waiting thread, even just
    after it took such a lock and before the `with` that releases it, and the loop thread would then block on it
    for good. A bare lock the caller only acquires leaves nothing held behind whatever the interrupt cut short.
    """

    def __init__(self, work: Callable[[], Coroutine[Any, Any, R]]) -> None:
        self._work = work
        self._task: asyncio.Task[R] | None = None
        self._unmade: Exception | None = None  # what making the coroutine raised (bad arguments)
        self._ended = threading.Lock()
        self._ended.acquire()
        self.finished = False

    def start(self) -> None:  # on the loop
        if self.finished:  # cancelled before it was started
            return
        try:
            self._task = asyncio.ensure_future(self._work())
        except Exception as error:
            self._unmade = error
            self._finish()
            return
        self._task.add_done_callback(lambda _: self._finish())

    def cancel(self) -> None:  # on the loop; scheduled after start(), so a task exists unless start() never was
        if self._task is not None:
            self._task.cancel()
        elif not self.finished:
            self._finish()

    def _finish(self) -> None:
        self.finished = True
        self._ended.release()

    def wait(self, timeout: float | None) -> bool:
        """True once the task has ended; False when `timeout` passed first."""
        return self.finished or self._ended.acquire(timeout=-1 if timeout is None else timeout)

    def result(self) -> R:
        if self._unmade is not None:
            raise self._unmade
        assert self._task is not None, "result() follows a wait that saw the task end"
        return self._task.result()


class _Loop:
    """A private event loop running in its own daemon thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="thermostat-client", daemon=True)
        self._thread.start()

    def run(self, work: Callable[[], Coroutine[Any, Any, R]], *, timeout: float | None = None) -> R:
        """The result of the coroutine `work()` makes, run on the loop; TimeoutError (that coroutine cancelled) when
        it takes longer than `timeout`. The coroutine is made on the loop: one made here could be dropped unawaited
        by an interrupt landing before it was handed over."""
        call = _Call(work)
        try:
            self.loop.call_soon_threadsafe(call.start)
            if not call.wait(timeout):
                raise TimeoutError(f"the call did not end within {timeout} s")
        except BaseException:
            # An interrupted caller must not leave the call running on the loop, nor run on while it unwinds:
            # closing a stream whose step is still being cancelled would meet a generator that is still running
            # (Ctrl-C during `pods watch`). The loop runs callbacks in order, so this cancel comes after start.
            self.loop.call_soon_threadsafe(call.cancel)
            call.wait(_SETTLE_SECONDS)
            raise
        return call.result()

    def iterate(self, stream: AsyncIterator[T]) -> Iterator[T]:
        steps: list[asyncio.Task[Any]] = []

        async def step() -> tuple[bool, T | None]:
            task = asyncio.current_task()
            if task is not None:
                steps.append(task)
            try:
                return True, await anext(stream)
            except StopAsyncIteration:
                return False, None
            finally:
                if task is not None:
                    steps.remove(task)

        async def close_after_steps(close: Callable[[], Coroutine[Any, Any, None]]) -> None:
            # An interrupt (Ctrl-C) can leave a step running however it landed: end it before closing the
            # stream, or aclose() meets a generator that is still running.
            running = list(steps)
            for task in running:
                task.cancel()
            if running:
                await asyncio.wait(running)
            await close()

        try:
            while True:
                more, item = self.run(step)
                if not more:
                    return
                yield item  # type: ignore[misc]  # `more` says item is a T
        finally:
            close = getattr(stream, "aclose", None)
            if close is not None and self.loop.is_running():
                if threading.current_thread() is self._thread:
                    # collected on the loop's own thread: blocking here would wait on ourselves
                    self.loop.create_task(close_after_steps(close))
                else:
                    # bounded: a stream that will not close must not hang a Ctrl-C (it is cancelled instead)
                    with contextlib.suppress(TimeoutError):
                        self.run(functools.partial(close_after_steps, close), timeout=_SETTLE_SECONDS)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()


class _Part(Generic[A]):
    """A sync sub-client: the async one and the loop it runs on."""

    def __init__(self, inner: A, loop: _Loop) -> None:
        self._inner = inner
        self._loop = loop


class blocking(Generic[A, P, R]):
    """The async method `method` of A, called from the sync side: same parameters, the result instead of a
    coroutine."""

    def __init__(self, method: Callable[Concatenate[A, P], Coroutine[Any, Any, R]]) -> None:
        self._method = method

    @overload
    def __get__(self, part: None, owner: type) -> Self: ...
    @overload
    def __get__(self, part: _Part[A], owner: type) -> Callable[P, R]: ...
    def __get__(self, part: _Part[A] | None, owner: type) -> Self | Callable[P, R]:
        if part is None:
            return self
        method = self._method

        def call(*args: P.args, **kwargs: P.kwargs) -> R:
            return part._loop.run(functools.partial(method, part._inner, *args, **kwargs))

        call.__doc__ = method.__doc__
        return call


class blocking_iter(Generic[A, P, T]):
    """The async-iterator method `method` of A, from the sync side: same parameters, a plain iterator."""

    def __init__(self, method: Callable[Concatenate[A, P], AsyncIterator[T]]) -> None:
        self._method = method

    @overload
    def __get__(self, part: None, owner: type) -> Self: ...
    @overload
    def __get__(self, part: _Part[A], owner: type) -> Callable[P, Iterator[T]]: ...
    def __get__(self, part: _Part[A] | None, owner: type) -> Self | Callable[P, Iterator[T]]:
        if part is None:
            return self
        method = self._method

        def call(*args: P.args, **kwargs: P.kwargs) -> Iterator[T]:
            return part._loop.iterate(method(part._inner, *args, **kwargs))

        call.__doc__ = method.__doc__
        return call


class Pods(_Part[AsyncPods]):
    start = blocking(AsyncPods.start)
    stop = blocking(AsyncPods.stop)
    status = blocking(AsyncPods.status)
    watch = blocking_iter(AsyncPods.watch)
    history = blocking(AsyncPods.history)
    monitor = blocking(AsyncPods.monitor)
    spend = blocking(AsyncPods.spend)
    budget = blocking(AsyncPods.budget)
    set_budget = blocking(AsyncPods.set_budget)
    ensure_ready = blocking_iter(AsyncPods.ensure_ready)


class Pool(_Part[AsyncPool]):
    submit = blocking(AsyncPool.submit)
    run = blocking(AsyncPool.run)
    run_many = blocking_iter(AsyncPool.run_many)
    get = blocking(AsyncPool.get)
    result = blocking(AsyncPool.result)
    cancel = blocking(AsyncPool.cancel)
    wait = blocking_iter(AsyncPool.wait)
    hint = blocking(AsyncPool.hint)
    machine_types = blocking(AsyncPool.machine_types)
    put_machine_types = blocking(AsyncPool.put_machine_types)
    workers = blocking(AsyncPool.workers)
    usage = blocking(AsyncPool.usage)


class Metering(_Part[AsyncMetering]):
    pool_spend = blocking(AsyncMetering.pool_spend)
    tenant_budget = blocking(AsyncMetering.tenant_budget)
    set_tenant_budget = blocking(AsyncMetering.set_tenant_budget)
    ledger = blocking(AsyncMetering.ledger)


class Thermostat:
    """The blocking client. Use it as a context manager (the channel and the loop's thread end on exit), or call
    close()."""

    def __init__(self, config: ClientConfig | None = None, *, retry: RetryPolicy | None = None) -> None:
        self._loop = _Loop()

        async def build() -> AsyncThermostat:  # the channel belongs to the loop it is created on
            return AsyncThermostat(config, retry=retry)

        try:
            self._async = self._loop.run(build)
        except BaseException:
            self._loop.close()
            raise
        self.config = self._async.config
        self.pods = Pods(self._async.pods, self._loop)
        self.pool = Pool(self._async.pool, self._loop)
        self.metering = Metering(self._async.metering, self._loop)

    @classmethod
    def connect(cls, **arguments: Unpack[ConnectArgs]) -> Thermostat:
        """A client from arguments, each falling back to its environment variable (ClientConfig.from_env)."""
        return cls(ClientConfig.from_env(**arguments))

    def close(self) -> None:
        """Close the channels and end the loop's thread; closing again does nothing."""
        if self._loop.loop.is_closed():
            return
        try:
            self._loop.run(self._async.close)
        finally:
            self._loop.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()
