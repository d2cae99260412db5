"""Structured JSON logs with secret redaction.

Every configured secret (API keys, tokens) is registered once at start-up; the filter replaces it wherever
it would appear in a record — message, arguments, exception text and stack — before any handler formats
it. A key that leaks into an httpx error message or a traceback is masked like one logged on purpose.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import traceback
from datetime import UTC, datetime
from typing import Any

from thermostat.chassis.request_context import request_id_var, traceparent_var

REDACTED = "<redacted>"
_MIN_SECRET_LENGTH = 4  # shorter values would mask ordinary words; such a "secret" protects nothing anyway

_secrets: set[str] = set()
_lock = threading.Lock()


def register_secret(value: str | None) -> None:
    """Never let `value` reach a log line from now on, nor its stripped form: a secret mounted from a file often
    ends in a newline, and the clients send it stripped (the RunPod key, the Fly token), so that is the form a
    leak would carry."""
    for form in {value or "", (value or "").strip()}:
        if len(form) >= _MIN_SECRET_LENGTH:
            with _lock:
                _secrets.add(form)


def redact(text: str) -> str:
    """`text` with every registered secret replaced."""
    with _lock:
        secrets = sorted(_secrets, key=len, reverse=True)
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, REDACTED)
    return text


class RedactingFilter(logging.Filter):
    """Renders the record's message and exception once, redacted, so no handler sees the raw values."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a bad format string must not lose the line
            message = f"{record.msg!r} {record.args!r}"
        record.msg = redact(message)
        record.args = None
        if record.exc_info and record.exc_info[1] is not None:
            record.exc_text = redact("".join(traceback.format_exception(*record.exc_info)))
            record.exc_info = None
        elif record.exc_text:
            record.exc_text = redact(record.exc_text)
        if record.stack_info:
            record.stack_info = redact(record.stack_info)
        for key, value in list(vars(record).items()):
            if key not in _STANDARD_ATTRS and isinstance(value, str):
                setattr(record, key, redact(value))
        return True


_STANDARD_ATTRS = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, request id, trace, extras, exception."""

    def __init__(self, service: str) -> None:
        super().__init__()
        self.service = service

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "service": self.service,
            "logger": record.name,
            "message": record.getMessage(),
        }
        rid = request_id_var.get()
        if rid:
            entry["request_id"] = rid
        tp = traceparent_var.get()
        if tp:
            entry["traceparent"] = tp
        for key, value in vars(record).items():
            if key not in _STANDARD_ATTRS and not key.startswith("_"):
                entry[key] = value if isinstance(value, (str, int, float, bool, type(None))) else str(value)
        if record.exc_text:
            entry["exception"] = record.exc_text
        return redact(json.dumps(entry, default=str))


def configure_logging(service: str, level: str = "INFO") -> None:
    """Route every logger through one redacting JSON handler on stderr."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter(service))
    handler.addFilter(RedactingFilter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    install_redacting_record_factory()
    # httpx logs every request URL at INFO; the URLs are ours, but the volume is noise (#2050's lesson).
    logging.getLogger("httpx").setLevel(logging.WARNING)
    logging.getLogger("httpcore").setLevel(logging.WARNING)


_factory_installed = False


def install_redacting_record_factory() -> None:
    """Redact every record as it is created, before any handler or filter sees it.

    A handler filter covers only the handlers we configure; a test harness or a library may add its own.
    Redacting in the record factory covers them all.
    """
    global _factory_installed
    with _lock:
        if _factory_installed:
            return
        _factory_installed = True
    previous = logging.getLogRecordFactory()
    scrub = RedactingFilter()

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        scrub.filter(record)
        return record

    logging.setLogRecordFactory(factory)
