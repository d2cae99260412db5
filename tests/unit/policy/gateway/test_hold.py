"""Forward, hold or refuse (policy/gateway/hold.py): the table at the top of the module, rule by rule."""

from __future__ import annotations

import pytest

from thermostat.policy.gateway.hold import (
    Arrival,
    HistoryMark,
    Hold,
    ModelState,
    PodSnapshot,
    admit,
    eta_words,
    hold_step,
    model_state,
    retry_after,
    rewake_due,
    stop_since_wake,
    wait_bound_seconds,
    waiting_comment,
    wake_refusal,
)
from thermostat.policy.gateway.openai_errors import Refusal

URL = "http://127.0.0.1:9100/proxy/p1-8000"
READY = PodSnapshot(name="qwen", status="RUNNING", is_running=True, ready=True, proxy_url=URL)
LOADING = PodSnapshot(name="qwen", status="RUNNING", is_running=True, proxy_url=URL, eta_seconds=42.0)
PROVISIONING = PodSnapshot(name="qwen", status="PROVISIONING", eta_seconds=190.0)
DOWN = PodSnapshot(name="qwen", status="EXITED")
WAKING = PodSnapshot(name="qwen", status="EXITED", wake_in_flight=True)
UNKNOWN = PodSnapshot(name="qwen")


@pytest.mark.parametrize(
    ("pod", "state"),
    [
        pytest.param(READY, ModelState.READY, id="running and seen answering is ready"),
        pytest.param(LOADING, ModelState.BOOTING, id="running while the model loads is booting"),
        pytest.param(PROVISIONING, ModelState.BOOTING, id="provisioning is booting"),
        pytest.param(WAKING, ModelState.BOOTING, id="a wake in flight is booting"),
        pytest.param(DOWN, ModelState.DOWN, id="exited is down"),
        pytest.param(UNKNOWN, ModelState.DOWN, id="no view yet is down"),
        pytest.param(
            PodSnapshot(name="qwen", status="RUNNING", is_running=True, ready=True),
            ModelState.BOOTING,
            id="ready without a proxy url is not ready",
        ),
    ],
)
def test_model_state(pod: PodSnapshot, state: ModelState) -> None:
    """Ready is the monitor's word (readySince) on a running pod with a proxy URL, never RunPod's RUNNING alone."""
    assert model_state(pod) is state


@pytest.mark.parametrize(
    ("pod", "held", "arrival"),
    [
        pytest.param(READY, 0, Arrival.FORWARD, id="a ready pod is forwarded to"),
        pytest.param(READY, 5, Arrival.FORWARD, id="a ready pod is forwarded to whatever is held"),
        pytest.param(DOWN, 0, Arrival.HOLD, id="a down pod holds the request"),
        pytest.param(PROVISIONING, 4, Arrival.HOLD, id="a booting pod holds under the bound"),
        pytest.param(PROVISIONING, 5, Arrival.REFUSE, id="at the bound the request is refused"),
        pytest.param(DOWN, 5, Arrival.REFUSE, id="a down pod at the bound refuses too"),
    ],
)
def test_admit(pod: PodSnapshot, held: int, arrival: Arrival) -> None:
    assert admit(pod, held=held, max_held=5).arrival is arrival


def test_a_request_past_the_held_bound_is_503_with_retry_after_the_eta() -> None:
    """GATEWAY_MAX_HELD_PER_POD (KEDA's #1733): past it, 503 with Retry-After, the message naming the setting."""
    refusal = admit(PROVISIONING, held=2, max_held=2).refusal
    assert refusal is not None
    assert (refusal.status, refusal.code, refusal.retry_after_seconds) == (503, "too_many_held_requests", 190)
    assert "GATEWAY_MAX_HELD_PER_POD" in refusal.message


@pytest.mark.parametrize(
    ("eta", "seconds"),
    [pytest.param(None, 30, id="no eta: a fixed pause"), pytest.param(0.2, 1, id="at least a second"),
     pytest.param(61.5, 62, id="the eta rounded up"), pytest.param(float("inf"), 30, id="no infinite wait")],
)  # fmt: skip
def test_retry_after(eta: float | None, seconds: int) -> None:
    assert retry_after(eta) == seconds


def test_a_held_request_is_forwarded_once_the_pod_is_ready() -> None:
    assert hold_step(READY, waited_seconds=5, wait_bound_seconds=60, seen_up=True, stopped_by=None).hold is Hold.FORWARD


def test_a_held_request_keeps_waiting_while_the_pod_boots_and_says_what_it_does() -> None:
    step = hold_step(PROVISIONING, waited_seconds=5, wait_bound_seconds=600, seen_up=True, stopped_by=None)
    assert step.hold is Hold.KEEP
    assert step.comment == ": waking qwen: provisioning, ready in about 4 min"


def test_the_wait_bound_is_504_saying_what_the_pod_was_doing() -> None:
    step = hold_step(LOADING, waited_seconds=60, wait_bound_seconds=60, seen_up=True, stopped_by=None)
    assert step.hold is Hold.REFUSE and step.refusal is not None
    assert (step.refusal.status, step.refusal.refusal) == (504, Refusal.WAIT_BOUND)
    assert "loading the model" in step.refusal.message and "GATEWAY_WAKE_WAIT_SECONDS" in step.refusal.message


def test_a_pod_stopped_while_requests_are_held_fails_them_naming_the_stop() -> None:
    """The monitor's boot-grace stop during the hold: 503, the stop's trigger in the message."""
    step = hold_step(
        DOWN, waited_seconds=30, wait_bound_seconds=600, seen_up=True, stopped_by="stopped by the boot-grace rule"
    )
    assert step.hold is Hold.REFUSE and step.refusal is not None
    assert (step.refusal.status, step.refusal.refusal) == (503, Refusal.STOPPED_WHILE_HELD)
    assert "boot-grace" in step.refusal.message


def test_a_pod_down_after_it_was_seen_up_with_no_stop_since_the_wake_is_waited_for() -> None:
    """The down view is the pod's previous stop arriving late (the view before it was that boot, gone stale): the
    wake is bringing the pod up, so the request keeps waiting."""
    step = hold_step(DOWN, waited_seconds=3, wait_bound_seconds=600, seen_up=True, stopped_by=None)
    assert step.hold is Hold.KEEP


def test_a_pod_not_yet_seen_up_is_waited_for_not_judged_stopped() -> None:
    """Right after the wake answered, the watched view may still show the old exited pod: that is no stop."""
    step = hold_step(DOWN, waited_seconds=1, wait_bound_seconds=600, seen_up=False, stopped_by=None)
    assert step.hold is Hold.KEEP


@pytest.mark.parametrize(
    ("eta", "words"),
    [
        pytest.param(None, "", id="no eta: no made-up number (#2093)"),
        pytest.param(3.0, "ready in about 10 s", id="seconds"),
        pytest.param(44.0, "ready in about 50 s", id="tens of seconds"),
        pytest.param(125.0, "ready in about 3 min", id="minutes"),
    ],
)
def test_eta_words(eta: float | None, words: str) -> None:
    assert eta_words(eta) == words


def test_the_comment_without_an_eta_names_what_the_pod_does() -> None:
    assert waiting_comment(WAKING) == ": waking qwen: waking"
    assert waiting_comment(PodSnapshot(name="qwen", status="STARTING")) == ": waking qwen: starting"


@pytest.mark.parametrize(
    ("code", "refusal", "status"),
    [
        pytest.param("RESOURCE_EXHAUSTED", Refusal.OVER_BUDGET, 429, id="a refused budget is 429"),
        pytest.param("ABORTED", Refusal.WAKE_FAILED, 503, id="a failed wake is 503"),
        pytest.param("NOT_FOUND", Refusal.UNKNOWN_MODEL, 404, id="an unknown pod is 404"),
        pytest.param("UNAVAILABLE", Refusal.CONTROL_UNAVAILABLE, 503, id="an unreachable controller is 503"),
    ],
)
def test_wake_refusal(code: str, refusal: Refusal, status: int) -> None:
    error = wake_refusal("qwen", code, "daily budget 5.00 USD reached")
    assert error is not None and (error.refusal, error.status) == (refusal, status)


def test_a_wake_that_answered_is_no_refusal() -> None:
    assert wake_refusal("qwen", "OK", "Created") is None


def test_the_budget_refusal_is_openai_insufficient_quota_with_the_numbers() -> None:
    error = wake_refusal("qwen", "RESOURCE_EXHAUSTED", "daily budget 5.00 USD reached (spent 5.02)")
    assert error is not None
    assert error.body() == {
        "error": {
            "message": "qwen: daily budget 5.00 USD reached (spent 5.02)",
            "type": "insufficient_quota",
            "param": None,
            "code": "insufficient_quota",
        }
    }


@pytest.mark.parametrize(
    ("configured", "grace", "bound"),
    [pytest.param(90.0, 20.0, 90.0, id="the setting wins"), pytest.param(None, 5.0, 300.0, id="else the boot grace"),
     pytest.param(None, 0.0, 1200.0, id="a grace that is off: its default")],
)  # fmt: skip
def test_wait_bound_seconds(configured: float | None, grace: float, bound: float) -> None:
    assert wait_bound_seconds(configured, grace) == bound


@pytest.mark.parametrize(
    ("pod", "answered", "seen_up", "since", "due"),
    [
        pytest.param(DOWN, True, False, 5.0, True, id="answered and nothing on its way up: ask again"),
        pytest.param(DOWN, False, False, 60.0, False, id="the wake still runs: join it, ask nothing"),
        pytest.param(DOWN, True, False, 1.0, False, id="just answered: the view may not show the start yet"),
        pytest.param(DOWN, True, True, 60.0, False, id="seen up then down: a stop, never undone"),
        pytest.param(PROVISIONING, True, False, 60.0, False, id="on its way up: nothing to ask"),
    ],
)
def test_rewake_due(pod: PodSnapshot, answered: bool, seen_up: bool, since: float, due: bool) -> None:
    assert rewake_due(pod, wake_answered=answered, seen_up=seen_up, since_wake_seconds=since) is due


WAKE = HistoryMark(wake=True)
START = HistoryMark(trigger="request")
IDLE_STOP = HistoryMark(stop=True, trigger="idle")
GRACE_STOP = HistoryMark(stop=True, trigger="boot-grace", detail="not ready after 20 min")


@pytest.mark.parametrize(
    ("entries", "words"),
    [
        pytest.param([GRACE_STOP, START, WAKE, IDLE_STOP], "stopped by the boot-grace rule (not ready after 20 min)",
                     id="a stop after the wake is named with its detail"),
        pytest.param([START, WAKE, IDLE_STOP], None, id="the wake came after the stop: that stop is the old one"),
        pytest.param([IDLE_STOP], "stopped by the idle rule", id="a stop and no wake on the page"),
        pytest.param([START, IDLE_STOP, WAKE], "stopped by the idle rule", id="other actions are passed over"),
        pytest.param([], None, id="an empty history names no stop"),
    ],
)  # fmt: skip
def test_stop_since_wake(entries: list[HistoryMark], words: str | None) -> None:
    assert stop_since_wake(entries) == words
