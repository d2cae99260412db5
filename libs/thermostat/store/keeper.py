"""LeaseKeeper: hold one lease, renew it in the background, say when it is lost.

Services use one keeper per lease: the idle monitor campaigns for `monitor:<pod>` and ticks while it leads;
the pod controller takes `wake:<pod>` around a wake so replicas never create two pods (the pod-control seed's wake
gate, extended across replicas).

Theory of operation:
- After a successful acquire the keeper renews every `renew_interval` (default a third of the TTL,
  counted from when the previous renewal was *asked*), so two renewals can fail before trust runs out.
  River's re-election bugs came from a TTL equal to the tick (PRs 199/217/219).
- Each renewal is bounded by the trust that remains: a store that hangs fails the renewal by the time the
  holder must stop believing anyway. A failed renewal is retried every `retry_interval` while trust
  remains.
- The lease is lost, finally, when a renewal answers that the term moved on (TAKEN: the holder stalled
  past its expiry and someone took over), or when trust ran out with no renewal succeeding (EXPIRED: the
  store was unreachable, or our pool was exhausted). The keeper then stops, sets `lost`, and calls
  `on_lost`. To lead again, acquire again — a lease nobody took comes back with the same term.
- `new_incarnation=True`: the keeper's first acquire takes a new term even from its own holder name, so a
  process restarted under its old name fences off the old one (if it is merely stalled) while taking the
  name at once; later acquires by the same keeper (after a loss) keep the term as usual.
- `is_trusted()` turns False the moment the trust window ends, without waiting for the loop: check it
  right before each action the lease guards. Leaders that kept believing for days (Oban 1488) never
  checked.
- Time is the injected `clock` (default the system's; its monotonic reading stamps trust, its sleep paces
  renewals, retries and the bound on each renewal), so a test steps time instead of waiting for it. The
  keeper's lease store is re-stamped on the same clock: trust is only comparable on the clock it was read from.
- `release()` (and leaving `async with`) stops renewing and releases the lease if it is still ours, so a
  graceful shutdown hands leadership over at once instead of after a TTL (solid_queue 568).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Self

from thermostat.chassis.clock import Clock
from thermostat.store.lease import Lease, LeaseStore

__all__ = ["LeaseKeeper", "LeaseLoss", "LeaseLossReason"]

_log = logging.getLogger(__name__)


class LeaseLossReason(enum.Enum):
    TAKEN = "taken"
    """A renewal found the term had moved on: another holder took the lease after it expired."""
    EXPIRED = "expired"
    """No renewal succeeded before the trust window ended; another holder may take it over."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaseLoss:
    lease: Lease
    """The lease as last held."""
    reason: LeaseLossReason


class LeaseKeeper:
    """Holds one named lease for one holder and keeps it renewed until released or lost."""

    def __init__(
        self,
        leases: LeaseStore,
        *,
        name: str,
        holder: str,
        ttl: float,
        renew_interval: float | None = None,
        retry_interval: float | None = None,
        on_lost: Callable[[LeaseLoss], object] | None = None,
        clock: Clock | None = None,
        new_incarnation: bool = False,
    ) -> None:
        renew_interval = ttl / 3 if renew_interval is None else renew_interval
        if not 0 < renew_interval < ttl:
            raise ValueError(f"renew_interval must be positive and below the ttl ({ttl}), not {renew_interval}")
        self.name = name
        self.holder = holder
        self.ttl = ttl
        self._leases = leases if clock is None else leases.using(clock)
        self._clock = self._leases.clock
        self._renew_interval = renew_interval
        self._retry_interval = renew_interval / 4 if retry_interval is None else retry_interval
        self._on_lost = on_lost
        self._lease: Lease | None = None
        self._loss: LeaseLoss | None = None
        self._lost = asyncio.Event()
        self._acquiring = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        self._new_term = new_incarnation

    @property
    def lease(self) -> Lease | None:
        """The lease as last renewed, while held (None before acquiring and after a loss or release)."""
        return self._lease

    @property
    def loss(self) -> LeaseLoss | None:
        """Why the last held lease was lost, if it was."""
        return self._loss

    def is_trusted(self, now: float | None = None) -> bool:
        """Whether this holder may act on the lease now."""
        lease = self._lease
        return lease is not None and lease.is_trusted(self._clock.monotonic() if now is None else now)

    def remaining_trust(self) -> float:
        """Seconds this holder may still act on the lease (0 when none is held)."""
        lease = self._lease
        return 0.0 if lease is None else max(0.0, lease.remaining_trust(self._clock.monotonic()))

    async def acquire(self) -> Lease | None:
        """Try once to take the lease; on success keep it renewed in the background."""
        async with self._acquiring:  # one renewal loop per keeper, however many callers race here
            if self._lease is not None:
                return self._lease
            lease = await self._leases.acquire(self.name, self.holder, self.ttl, new_term=self._new_term)
            if lease is None:
                return None
            self._new_term = False  # this incarnation holds the name now; a re-acquire keeps its term
            self._lease, self._loss = lease, None
            self._lost.clear()
            self._task = asyncio.create_task(self._keep(lease), name=f"lease-keeper:{self.name}")
            return lease

    async def campaign(self, retry_interval: float | None = None) -> Lease:
        """Try until the lease is ours (store errors are logged and retried)."""
        pause = self._renew_interval if retry_interval is None else retry_interval
        while True:
            try:
                lease = await self.acquire()
            except Exception:
                _log.warning("acquiring lease %s failed; retrying in %.1f s", self.name, pause, exc_info=True)
                lease = None
            if lease is not None:
                return lease
            await self._clock.sleep(pause)

    async def wait_lost(self) -> LeaseLoss:
        """Wait until the held lease is lost (not released)."""
        await self._lost.wait()
        assert self._loss is not None
        return self._loss

    async def release(self) -> bool:
        """Stop renewing and release the lease; True when it was still ours and is now free."""
        await self._stop_renewing()
        lease, self._lease = self._lease, None
        if lease is None:
            return False
        return await self._leases.release(lease)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.release()

    async def _stop_renewing(self) -> None:
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _keep(self, lease: Lease) -> None:
        clock = self._clock
        next_at = clock.monotonic() + self._renew_interval
        while True:
            await clock.sleep(next_at - clock.monotonic())
            asked_at = clock.monotonic()
            remaining = lease.trusted_until - asked_at
            # Past its trust (the process stalled), one honest attempt still tells TAKEN from EXPIRED.
            deadline = remaining if remaining > 0 else self._renew_interval
            try:
                renewed = await self._renew_within(lease, deadline)
            except Exception as error:
                if clock.monotonic() >= lease.trusted_until:
                    self._lose(lease, LeaseLossReason.EXPIRED)
                    return
                _log.warning("renewing lease %s failed (%r); retrying", self.name, error)
                next_at = clock.monotonic() + self._retry_interval
                continue
            if renewed is None:
                self._lose(lease, LeaseLossReason.TAKEN)
                return
            self._lease = lease = renewed
            next_at = asked_at + self._renew_interval

    async def _renew_within(self, lease: Lease, seconds: float) -> Lease | None:
        """Renew, or raise TimeoutError once `seconds` pass on the keeper's clock (the renewal is cancelled)."""
        renewal = asyncio.ensure_future(self._leases.renew(lease))
        timer = asyncio.ensure_future(self._clock.sleep(seconds))
        try:
            await asyncio.wait({renewal, timer}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            timer.cancel()
            if not renewal.done():
                renewal.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await renewal
        if renewal.cancelled():
            raise TimeoutError(f"renewing lease {self.name} took longer than {seconds:.2f} s")
        return renewal.result()

    def _lose(self, lease: Lease, reason: LeaseLossReason) -> None:
        _log.warning("lost lease %s (term %d, holder %s): %s", lease.name, lease.term, lease.holder, reason.value)
        self._lease = None
        self._loss = LeaseLoss(lease=lease, reason=reason)
        self._task = None
        self._lost.set()
        if self._on_lost is not None:
            try:
                self._on_lost(self._loss)
            except Exception:
                _log.exception("on_lost callback for lease %s failed", lease.name)
