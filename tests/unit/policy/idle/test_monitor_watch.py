"""Whether the idle monitor watches a pod: one named test per rule of policy/monitor_watch.py."""

from __future__ import annotations

import pytest

from thermostat.policy.idle.monitor_watch import (
    QUIET_ASKS_AT_START,
    ControllerAnswer,
    LineLevel,
    PodWatchState,
    Watch,
    WatchLine,
    WatchStep,
    after_answer,
    watch_reason,
)

A = ControllerAnswer
START = PodWatchState()
DISABLED = PodWatchState(watch=Watch.DISABLED)
WATCHING = PodWatchState(watch=Watch.WATCHING, ticking=True)
DISABLED_WHILE_TICKING = PodWatchState(watch=Watch.DISABLED, ticking=True)


def lines(state: PodWatchState, answers: list[ControllerAnswer]) -> tuple[PodWatchState, list[WatchLine], int]:
    """Feed answers in order: the final state, every line logged and how often ticking was started."""
    logged, starts = [], 0
    for answer in answers:
        step = after_answer(state, answer, "qwen", "UNAVAILABLE")
        state, starts = step.state, starts + step.start_ticking
        logged += [step.line] if step.line else []
    return state, logged, starts


def test_a_fresh_watch_waits_for_the_controller_and_ticks_nothing() -> None:
    """Before any answer the pod is not watched, and says why."""
    assert (START.watch, START.ticking) == (Watch.WAITING, False)
    assert watch_reason(Watch.WAITING) == "waiting for the pod controller to answer"


def test_an_unconfigured_answer_disables_the_pod_until_configured_and_says_so_once() -> None:
    """The pod-control seed's "the idle monitor exits at startup": watching stops, not the process; one warning line."""
    state, logged, starts = lines(START, [A.UNCONFIGURED] * 5)
    assert (state.watch, state.ticking, starts) == (Watch.DISABLED, False, 0)
    assert logged == [
        WatchLine(
            level=LineLevel.WARNING,
            message=(
                "pod qwen: disabled until configured: the pod controller reports RUNPOD_API_KEY unset or the pod's "
                "volume id blank; watching nothing for it until then"
            ),
        )
    ]


def test_a_configured_answer_starts_ticking_exactly_once() -> None:
    """However many configured answers follow (each tick is one), one ticker is started."""
    state, logged, starts = lines(START, [A.CONFIGURED] * 4)
    assert (state.watch, state.ticking, starts) == (Watch.WATCHING, True, 1)
    assert logged == [WatchLine(level=LineLevel.INFO, message="pod qwen: configured; watching it")]


def test_configuration_that_appears_later_starts_watching_and_says_it_appeared() -> None:
    """Disabled, then the controller (restarted with the secret) answers configured."""
    step = after_answer(DISABLED, A.CONFIGURED, "qwen")
    assert step == WatchStep(
        state=WATCHING,
        start_ticking=True,
        line=WatchLine(level=LineLevel.INFO, message="pod qwen: configured; watching it (configuration appeared)"),
    )


def test_a_controller_that_loses_its_configuration_disables_the_watch_without_a_second_ticker() -> None:
    """Ticking and then unconfigured: disabled (the ticks decide nothing); configured again resumes, no new start."""
    state, logged, starts = lines(WATCHING, [A.UNCONFIGURED, A.UNCONFIGURED, A.CONFIGURED])
    assert (state, starts) == (WATCHING, 0)
    assert [line.level for line in logged] == [LineLevel.WARNING, LineLevel.INFO]


def test_a_name_the_controller_does_not_know_is_not_watched_and_said_once_as_an_error() -> None:
    """NOT_FOUND: RUNPOD_PODS differs between the services; asked again, logged once."""
    state, logged, starts = lines(START, [A.UNKNOWN_NAME] * 3)
    assert (state.watch, starts) == (Watch.UNKNOWN_NAME, 0)
    assert logged == [
        WatchLine(
            level=LineLevel.ERROR,
            message=(
                "pod qwen: the pod controller does not know this name (is RUNPOD_PODS the same for both services?); "
                "not watching it"
            ),
        )
    ]


@pytest.mark.parametrize("state", [START, DISABLED, WATCHING], ids=["waiting", "disabled", "watching"])
def test_no_answer_leaves_the_watch_as_it_was(state: PodWatchState) -> None:
    """An unreachable controller says nothing about configuration: nothing starts, nothing is disabled."""
    step = after_answer(state, A.UNREACHABLE, "qwen", "UNAVAILABLE")
    assert (step.state.watch, step.state.ticking, step.start_ticking) == (state.watch, state.ticking, False)


def test_the_first_asks_at_start_find_the_controller_starting_and_say_nothing() -> None:
    """The services start side by side: a few unanswered asks before any answer are no outage (issue 35)."""
    state, logged, _ = lines(START, [A.UNREACHABLE] * (QUIET_ASKS_AT_START - 1) + [A.CONFIGURED])
    assert [line.message for line in logged] == ["pod qwen: configured; watching it"]
    assert state.unanswered == 0


def test_a_controller_silent_past_the_start_grace_is_said_once() -> None:
    """QUIET_ASKS_AT_START unanswered asks in a row from the start: one warning, however many follow."""
    _, logged, _ = lines(START, [A.UNREACHABLE] * (QUIET_ASKS_AT_START + 4))
    assert [line.message for line in logged] == [
        "pod qwen: the pod controller is not reachable (UNAVAILABLE); asking again"
    ]


def test_an_outage_before_ticking_is_said_once_and_again_after_an_answer() -> None:
    """Not reachable past the start grace: one warning; answered, then unreachable again: a second one at once."""
    silent = [A.UNREACHABLE] * QUIET_ASKS_AT_START
    _, logged, _ = lines(START, [*silent, A.UNCONFIGURED, A.UNREACHABLE, A.UNREACHABLE])
    outages = [line for line in logged if "not reachable" in line.message]
    assert [line.message for line in outages] == [
        "pod qwen: the pod controller is not reachable (UNAVAILABLE); asking again"
    ] * 2


def test_an_outage_while_ticking_is_left_to_the_tickers_own_line() -> None:
    """The ticker logs every unanswered tick; the watch adds nothing."""
    assert after_answer(WATCHING, A.UNREACHABLE, "qwen", "UNAVAILABLE").line is None
    assert after_answer(DISABLED_WHILE_TICKING, A.UNREACHABLE, "qwen").line is None


def test_only_a_watched_pod_has_no_reason() -> None:
    """watch_reason is what GetMonitorState prints beside `watch`."""
    assert watch_reason(Watch.WATCHING) == ""
    assert all(watch_reason(w) for w in Watch if w is not Watch.WATCHING)
