"""The event loop a service runs on: uvloop unless EVENT_LOOP=asyncio, asyncio's own when uvloop is missing."""

from __future__ import annotations

import asyncio
import sys

import pytest

from thermostat.chassis.event_loop import choose_loop, run, running_loop_name
from thermostat.chassis.settings import ServiceSettings, load_settings


async def _loop_and_timeout() -> tuple[str, bool]:
    """The loop's name, and whether asyncio.timeout still cancels and un-cancels its task there."""
    try:
        async with asyncio.timeout(0.01):
            await asyncio.sleep(10)
    except TimeoutError:
        task = asyncio.current_task()
        return running_loop_name(), task is not None and task.cancelling() == 0
    return running_loop_name(), False


def test_uvloop_is_the_default_setting(monkeypatch) -> None:
    monkeypatch.delenv("EVENT_LOOP", raising=False)
    assert load_settings(ServiceSettings).event_loop == "uvloop"


def test_event_loop_asyncio_is_accepted_and_another_value_names_the_variable(monkeypatch, capsys) -> None:
    monkeypatch.setenv("EVENT_LOOP", "asyncio")
    assert load_settings(ServiceSettings).event_loop == "asyncio"
    monkeypatch.setenv("EVENT_LOOP", "tokio")
    with pytest.raises(SystemExit):
        load_settings(ServiceSettings)
    assert "EVENT_LOOP='tokio'" in capsys.readouterr().err


def test_uvloop_runs_a_service_coroutine_with_asyncio_timeout_intact() -> None:
    choice = choose_loop("uvloop")
    assert (choice.name, choice.fallback) == ("uvloop", None)
    assert run(_loop_and_timeout(), choice) == ("uvloop", True)


def test_asyncio_setting_runs_the_standard_loop() -> None:
    choice = choose_loop("asyncio")
    assert (choice.name, choice.factory, choice.fallback) == ("asyncio", None, None)
    assert run(_loop_and_timeout(), choice) == ("asyncio", True)


def test_without_uvloop_installed_the_standard_loop_runs_and_says_why(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # an import of it now raises ImportError, as when absent
    choice = choose_loop("uvloop")
    assert choice.name == "asyncio"
    assert choice.factory is None
    assert choice.fallback == "EVENT_LOOP=uvloop, but uvloop is not installed"
