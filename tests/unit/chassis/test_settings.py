"""Settings: a bad value stops the service at start with a message naming the variable."""

from __future__ import annotations

import pytest
from pydantic import Field, SecretStr

from thermostat.chassis.settings import ServiceSettings, load_settings


class DemoSettings(ServiceSettings):
    demo_port: int = Field(default=50051, ge=0, le=65535)
    demo_api_key: SecretStr | None = None


def test_defaults_apply_when_nothing_is_set(monkeypatch) -> None:
    """With no environment the defaults are used."""
    monkeypatch.delenv("DEMO_PORT", raising=False)
    assert load_settings(DemoSettings).demo_port == 50051


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        pytest.param("DEMO_PORT", "eighty", id="not-a-number"),
        pytest.param("DEMO_PORT", "70000", id="out-of-range"),
        pytest.param("LOG_LEVEL", "LOUD", id="not-a-level"),
        pytest.param("SHUTDOWN_GRACE_SECONDS", "-1", id="negative-grace"),
    ],
)
def test_a_bad_value_exits_naming_the_variable(monkeypatch, capsys, variable, value) -> None:
    """The service refuses to start and says which variable is wrong and why."""
    monkeypatch.setenv(variable, value)
    with pytest.raises(SystemExit) as exit_:
        load_settings(DemoSettings)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert variable in err
    assert repr(value) in err


def test_a_secret_is_never_echoed_in_the_error(monkeypatch, capsys) -> None:
    """Even a malformed secret is not printed back."""
    monkeypatch.setenv("DEMO_PORT", "bad")
    monkeypatch.setenv("DATABASE_URL", "postgresql://u:hunter22@db/x")
    with pytest.raises(SystemExit):
        load_settings(DemoSettings)
    assert "hunter22" not in capsys.readouterr().err


def test_loaded_secrets_are_registered_for_redaction(monkeypatch) -> None:
    """Every SecretStr setting is masked in logs from the moment settings load."""
    from thermostat.chassis.logs import redact

    monkeypatch.setenv("DEMO_API_KEY", "sk-demo-1234567890")
    load_settings(DemoSettings)
    assert redact("key sk-demo-1234567890") == "key <redacted>"
