"""Stop order: a stop halts only a wake already requested when the stop was issued (issue 7)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from thermostat.policy.wake.stop_order import StopEntry, StopVerdict, judge_stops

WAKE = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
SETTLE = 50.0


def stop(
    offset_s: float, *, settled: bool = True, accepted: tuple[str, ...] = ("p1",), trigger: str = "idle"
) -> StopEntry:
    """A stop issued `offset_s` seconds after the wake was requested (negative: before it)."""
    return StopEntry(
        issued_at=WAKE + timedelta(seconds=offset_s),
        trigger=trigger,
        settled=settled,
        accepted_pod_ids=accepted if settled else (),
    )


def judge(*stops: StopEntry, now_s: float = 1.0):
    return judge_stops(requested_at=WAKE, stops=stops, now=WAKE + timedelta(seconds=now_s), settle_seconds=SETTLE)


def test_rule_1_a_stop_issued_during_the_wake_and_accepted_halts_it_naming_pod_and_trigger() -> None:
    decision = judge(stop(0.2, trigger="boot-grace"))
    assert decision.verdict is StopVerdict.HALT
    assert decision.reason.startswith("pod p1 was stopped (boot-grace) during the wake")


def test_rule_1_wins_over_another_stop_still_in_flight() -> None:
    assert judge(stop(0.1), stop(0.3, settled=False)).verdict is StopVerdict.HALT


@pytest.mark.parametrize(
    "offset_s", [pytest.param(-0.4, id="issued-before-the-wake"), pytest.param(0.2, id="issued-during-the-wake")]
)
def test_rule_2_a_stop_in_flight_is_waited_for(offset_s: float) -> None:
    decision = judge(stop(offset_s, settled=False))
    assert decision.verdict is StopVerdict.WAIT
    assert ("before" if offset_s < 0 else "during") in decision.reason


def test_rule_3_a_stop_issued_during_the_wake_that_never_settled_halts_it() -> None:
    decision = judge(stop(0.2, settled=False), now_s=SETTLE + 1)
    assert decision.verdict is StopVerdict.HALT
    assert "never settled" in decision.reason


@pytest.mark.parametrize(
    "stops",
    [
        pytest.param((), id="no-stop"),
        pytest.param((stop(-0.3),), id="accepted-before-the-wake-even-if-its-record-landed-later"),
        pytest.param((stop(-0.3, settled=False),), id="issued-before-and-lost-past-the-settle-bound"),
        pytest.param((stop(0.2, accepted=()),), id="issued-during-but-refused-by-runpod"),
    ],
)
def test_rule_4_otherwise_the_wake_proceeds(stops: tuple[StopEntry, ...]) -> None:
    now_s = SETTLE + 1 if any(not s.settled for s in stops) else 1.0
    assert judge(*stops, now_s=now_s).verdict is StopVerdict.PROCEED
