"""When a failed call is tried again, and after how long: pure functions of the failure, no I/O, no clock.

Only UNAVAILABLE is retried: every other code is the server's answer, and asking again gets the same one. A call
that may have billed (StartPod, the submits, run) is retried only when the request provably never left this
process — gRPC failed to connect to any address, so no server read it. A wake or a job the server did receive
but whose answer was lost is not issued twice: the caller sees errors.Unavailable and decides.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import grpc

# grpc-core's wording when no subchannel could connect: the call was never written to any connection
_NEVER_SENT_PREFIX = "failed to connect to all addresses"


@dataclass(frozen=True, slots=True, kw_only=True)
class RetryPolicy:
    """RetryPolicy: at most `attempts` tries in all; the n-th retry waits a jittered share of
    min(max_delay, base_delay × multiplier**n), never less than half of it (so retries do spread out)."""

    attempts: int = 4
    base_delay: float = 0.2
    multiplier: float = 2.0
    max_delay: float = 5.0

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError(f"attempts: at least 1 (got {self.attempts})")
        for name in ("base_delay", "multiplier", "max_delay"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{name}: a finite number ≥ 0 (got {value!r})")


NO_RETRY = RetryPolicy(attempts=1)


def never_sent(code: grpc.StatusCode, detail: str) -> bool:
    """True when the failure says the request never reached a server (no connection was ever made)."""
    return code is grpc.StatusCode.UNAVAILABLE and detail.startswith(_NEVER_SENT_PREFIX)


def should_retry(code: grpc.StatusCode, detail: str, *, may_bill: bool) -> bool:
    """Whether a call that failed with `code` / `detail` may be issued again."""
    if code is not grpc.StatusCode.UNAVAILABLE:
        return False
    return not may_bill or never_sent(code, detail)


def backoff_delay(policy: RetryPolicy, retry: int, unit: float) -> float:
    """Seconds before retry number `retry` (0 for the first), `unit` a random draw in [0, 1)."""
    ceiling = min(policy.max_delay, policy.base_delay * policy.multiplier**retry)
    return ceiling / 2 + ceiling / 2 * min(max(unit, 0.0), 1.0)
