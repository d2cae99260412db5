"""The worker's configuration, read once from the environment.

STRATA_WORKER_TOKEN   required: the bearer token /execute and the cancel route demand (the pool mints one
                      per machine); without it the worker refuses to start, since /execute would otherwise
                      be an unauthenticated remote-code-execution endpoint
STRATA_WORKER_PORT    the port, else PORT (what the local backend and most platforms set), else 8080
STRATA_WORKER_HOST    the bind address, default 127.0.0.1
STRATA_WORKER_HANDLER echo (default: the payload back), sleep (sleeps, cancellable), fail (500), python (runs
                      the payload as a Python cell in a subprocess: python_cell.py)
STRATA_WORKER_SLEEP_SECONDS   the sleep handler's default when the payload names no duration (1)
STRATA_WORKER_FAIL_MESSAGE    the fail handler's error body ("handler failed")
STRATA_WORKER_MAX_PAYLOAD_BYTES  the largest payload accepted (64 MiB); a larger one is 413
STRATA_WORKER_JOURNAL  optional: a file each authorized /execute appends one line to (the payload's sha256),
                      so a test sees from the workers' side which payloads reached a machine, and how often
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

HANDLERS = ("echo", "sleep", "fail", "python")
DEFAULT_PORT = 8080
DEFAULT_HOST = "127.0.0.1"
DEFAULT_MAX_PAYLOAD_BYTES = 64 * 1024 * 1024


class ConfigError(Exception):
    """ConfigError is a setting the worker cannot start with; its message names the variable."""


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerConfig:
    token: str
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    handler: str = "echo"
    sleep_seconds: float = 1.0
    fail_message: str = "handler failed"
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES
    journal: str | None = None

    def __repr__(self) -> str:  # the token never reaches a log line or a traceback
        return f"WorkerConfig(host={self.host!r}, port={self.port}, handler={self.handler!r})"


def read_config(env: Mapping[str, str]) -> WorkerConfig:
    token = env.get("STRATA_WORKER_TOKEN", "")
    if not token.strip():
        raise ConfigError(
            "STRATA_WORKER_TOKEN is not set: the worker refuses to start without it, because POST /execute "
            "would be an unauthenticated remote-code-execution endpoint"
        )
    port_name = "STRATA_WORKER_PORT" if env.get("STRATA_WORKER_PORT", "").strip() else "PORT"
    raw_port = env.get(port_name, "").strip() or str(DEFAULT_PORT)
    if not _digits(raw_port, 5) or not 0 < int(raw_port) < 65536:
        raise ConfigError(f"{port_name}={raw_port!r} is not a TCP port (1-65535)")
    handler = env.get("STRATA_WORKER_HANDLER", "").strip() or "echo"
    if handler not in HANDLERS:
        raise ConfigError(f"STRATA_WORKER_HANDLER={handler!r} is not one of {', '.join(HANDLERS)}")
    raw_sleep = env.get("STRATA_WORKER_SLEEP_SECONDS", "").strip() or "1"
    sleep_seconds = _seconds(raw_sleep)
    if sleep_seconds is None:
        raise ConfigError(f"STRATA_WORKER_SLEEP_SECONDS={raw_sleep!r} is not a non-negative number of seconds")
    raw_max = env.get("STRATA_WORKER_MAX_PAYLOAD_BYTES", "").strip() or str(DEFAULT_MAX_PAYLOAD_BYTES)
    if not _digits(raw_max, 18) or int(raw_max) < 1:
        raise ConfigError(f"STRATA_WORKER_MAX_PAYLOAD_BYTES={raw_max!r} is not a positive integer")
    return WorkerConfig(
        token=token,
        host=env.get("STRATA_WORKER_HOST", "").strip() or DEFAULT_HOST,
        port=int(raw_port),
        handler=handler,
        sleep_seconds=sleep_seconds,
        fail_message=env.get("STRATA_WORKER_FAIL_MESSAGE", "") or "handler failed",
        max_payload_bytes=int(raw_max),
        journal=env.get("STRATA_WORKER_JOURNAL", "").strip() or None,
    )


def _seconds(raw: str) -> float | None:
    try:
        value = float(raw)
    except ValueError:
        return None
    return value if math.isfinite(value) and value >= 0 else None


def _digits(text: str, most: int) -> bool:
    """ASCII digits only, at most `most` of them: str.isdigit() admits '²' and other digits int() refuses."""
    return text.isascii() and text.isdigit() and len(text) <= most
