"""Structured logs never carry a configured secret, wherever it would have appeared."""

from __future__ import annotations

import io
import json
import logging

import pytest

from thermostat.chassis.logs import (
    REDACTED,
    JsonFormatter,
    RedactingFilter,
    install_redacting_record_factory,
    register_secret,
)

SECRET = "rpa_LIVEKEY_0123456789abcdef"


@pytest.fixture
def json_log():
    register_secret(SECRET)
    install_redacting_record_factory()
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter("test"))
    handler.addFilter(RedactingFilter())
    logger = logging.getLogger("test.redaction")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    yield logger, stream
    logger.removeHandler(handler)


def _lines(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


@pytest.mark.parametrize(
    "emit",
    [
        pytest.param(lambda log: log.info("key is %s", SECRET), id="in-format-arguments"),
        pytest.param(lambda log: log.warning(f"calling with Bearer {SECRET}"), id="in-the-message"),
        pytest.param(lambda log: log.info("request", extra={"auth": f"Bearer {SECRET}"}), id="in-an-extra-field"),
        pytest.param(lambda log: log.info("headers %r", {"Authorization": f"Bearer {SECRET}"}), id="in-a-repr"),
    ],
)
def test_a_registered_secret_never_reaches_a_line(json_log, emit) -> None:
    """The secret is replaced in messages, arguments and extra fields."""
    logger, stream = json_log
    emit(logger)
    text = stream.getvalue()
    assert SECRET not in text
    assert REDACTED in text


def test_a_secret_inside_exception_text_is_redacted(json_log) -> None:
    """A key that leaks into an exception message or traceback is masked too."""
    logger, stream = json_log
    try:
        raise RuntimeError(f"401 from https://api.example/v2/pods?api_key={SECRET}")
    except RuntimeError:
        logger.exception("call failed")
    (line,) = _lines(stream)
    assert SECRET not in json.dumps(line)
    assert "RuntimeError" in str(line["exception"])


def test_records_seen_by_other_handlers_are_redacted_too(json_log, caplog) -> None:
    """The record factory redacts before any handler, so a foreign handler (here pytest's) sees no secret."""
    logger, _ = json_log
    with caplog.at_level(logging.INFO, logger="test.redaction"):
        logger.info("token=%s", SECRET)
    assert all(SECRET not in r.getMessage() for r in caplog.records)
    assert SECRET not in caplog.text


def test_lines_are_json_with_level_logger_and_message(json_log) -> None:
    """Each line is one JSON object a log pipeline can index."""
    logger, stream = json_log
    logger.warning("pod %s stopped", "abc")
    (line,) = _lines(stream)
    assert line["level"] == "WARNING"
    assert line["logger"] == "test.redaction"
    assert line["message"] == "pod abc stopped"
    assert line["service"] == "test"


def test_short_values_are_not_treated_as_secrets() -> None:
    """A one-character 'secret' would mask ordinary text; such values are ignored."""
    from thermostat.chassis.logs import redact

    register_secret("a")
    assert redact("a cat") == "a cat"


def test_a_secret_mounted_with_a_trailing_newline_is_redacted_as_the_clients_send_it() -> None:
    """RUNPOD_API_KEY from a Secret file ends in a newline; the client strips it, and the stripped key is masked."""
    from thermostat.chassis.logs import redact

    register_secret("rpa_MOUNTED_KEY_fedcba9876\n")
    assert redact("Authorization: Bearer rpa_MOUNTED_KEY_fedcba9876") == f"Authorization: Bearer {REDACTED}"
