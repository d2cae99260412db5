"""Group commit of submits: which submit joins a batch, what an answer says of the next, when a batch goes out."""

from __future__ import annotations

import pytest

from thermostat.policy.pool.submit_batch import (
    BatchLimits,
    Outlook,
    goes_out_now,
    joins_batch,
    outlook_after_submit,
    queued_to_count,
)

LIMITS = BatchLimits(
    max_jobs=4, max_bytes=1000, max_delay_seconds=0.01, deadline_margin_seconds=0.05, queued_per_machine=2
)


def outlook(
    *, claimed: bool = False, live: int = 4, idle: int = 0, queued: int = 8, max_workers: int | None = 4
) -> Outlook:
    return outlook_after_submit(
        claimed=claimed,
        live_machines=live,
        idle_machines=idle,
        queued_jobs=queued,
        max_workers=max_workers,
        limits=LIMITS,
    )


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        pytest.param({}, Outlook.WILL_QUEUE, id="queued-behind-a-deep-queue-with-every-machine-busy"),
        pytest.param({"claimed": True}, Outlook.MAY_TAKE, id="claimed-a-warm-machine"),
        pytest.param({"idle": 1}, Outlook.MAY_TAKE, id="a-machine-is-idle"),
        pytest.param({"live": 3}, Outlook.MAY_TAKE, id="the-tenant-cap-has-room-for-a-start"),
        pytest.param({"max_workers": None}, Outlook.MAY_TAKE, id="an-uncapped-type-can-always-start"),
        pytest.param({"queued": 7}, Outlook.MAY_TAKE, id="a-queue-shallower-than-two-per-machine"),
        pytest.param({"queued": 0}, Outlook.MAY_TAKE, id="an-empty-queue"),
    ],
)
def test_a_submit_answer_sets_what_the_next_submit_of_its_key_expects(
    answer: dict[str, int | bool | None], expected: Outlook
) -> None:
    assert outlook(**answer) is expected  # type: ignore[arg-type]


def test_the_queue_is_counted_as_deep_as_the_tenant_cap_asks_and_not_at_all_for_an_uncapped_type() -> None:
    assert queued_to_count(max_workers=4, limits=LIMITS) == 8
    assert queued_to_count(max_workers=None, limits=LIMITS) == 0


@pytest.mark.parametrize(
    ("expected_outlook", "remaining", "joins"),
    [
        pytest.param(Outlook.WILL_QUEUE, None, True, id="expected-to-queue-and-no-deadline"),
        pytest.param(Outlook.WILL_QUEUE, 0.061, True, id="room-for-the-window-and-the-margin"),
        pytest.param(Outlook.WILL_QUEUE, 0.059, False, id="a-deadline-inside-the-window-and-margin"),
        pytest.param(Outlook.MAY_TAKE, None, False, id="a-machine-may-take-it"),
        pytest.param(None, None, False, id="nothing-known-of-the-key"),
    ],
)
def test_a_submit_joins_its_keys_batch_only_when_expected_to_queue_and_its_deadline_has_room(
    expected_outlook: Outlook | None, remaining: float | None, joins: bool
) -> None:
    assert joins_batch(outlook=expected_outlook, remaining_seconds=remaining, limits=LIMITS) is joins


def test_a_submit_behind_a_single_submit_waiting_for_the_keys_batches_goes_single_too() -> None:
    assert not joins_batch(outlook=Outlook.WILL_QUEUE, remaining_seconds=None, limits=LIMITS, single_waiting=True)


def test_batches_of_one_job_are_no_batches() -> None:
    single = BatchLimits(max_jobs=1)
    assert not joins_batch(outlook=Outlook.WILL_QUEUE, remaining_seconds=None, limits=single)


@pytest.mark.parametrize(
    ("members", "payload_bytes", "now"),
    [
        pytest.param(3, 999, False, id="below-both-limits-waits-for-the-window"),
        pytest.param(4, 0, True, id="full-by-count"),
        pytest.param(1, 1000, True, id="full-by-payload-bytes"),
    ],
)
def test_a_batch_goes_out_before_its_window_ends_when_it_is_full(members: int, payload_bytes: int, now: bool) -> None:
    assert goes_out_now(members=members, payload_bytes=payload_bytes, limits=LIMITS) is now


@pytest.mark.parametrize(
    "fields",
    [
        pytest.param({"max_jobs": 0}, id="no-jobs"),
        pytest.param({"max_bytes": 0}, id="no-bytes"),
        pytest.param({"queued_per_machine": 0}, id="no-queue-depth"),
        pytest.param({"max_delay_seconds": -0.001}, id="negative-delay"),
        pytest.param({"deadline_margin_seconds": -1.0}, id="negative-margin"),
    ],
)
def test_limits_out_of_range_are_refused(fields: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="must"):
        BatchLimits(**fields)  # type: ignore[arg-type]
