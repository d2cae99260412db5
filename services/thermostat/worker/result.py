"""What a handler answers: a status and the body, the job's result bytes on a 200."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True, kw_only=True)
class HandlerResult:
    status: int
    body: bytes
