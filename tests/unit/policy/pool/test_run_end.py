"""Run end: what follows each way one machine's run can end."""

from __future__ import annotations

import pytest

from thermostat.policy.pool.run_end import AfterRun, Ended, after_run

OFFER = AfterRun(offer=True)


@pytest.mark.parametrize(
    ("ended", "facts", "follows"),
    [
        pytest.param(Ended.FREED, {}, OFFER, id="freed-is-offered-to-the-next-submit"),
        pytest.param(
            Ended.FREED,
            {"capped": True},
            AfterRun(offer=True, place_now=True),
            id="freed-under-a-fleet-cap-places-now",
        ),
        pytest.param(
            Ended.FREED,
            {"batch_raced": True},
            AfterRun(offer=True, place_after_batches=True),
            id="freed-while-a-batch-was-out-places-once-it-answered",
        ),
        pytest.param(
            Ended.FREED,
            {"unsent": True},
            AfterRun(offer=True, take_next=True),
            id="freed-before-its-send-takes-its-next-job",
        ),
        pytest.param(
            Ended.FREED,
            {"unsent": True, "image_current": False},
            OFFER,
            id="freed-before-its-send-on-an-old-image-takes-none",
        ),
        pytest.param(
            Ended.FREED,
            {"unsent": True, "batch_raced": True, "capped": True},
            AfterRun(offer=True, place_now=True, take_next=True),
            id="freed-before-its-send-had-no-completion-to-race",
        ),
        pytest.param(Ended.RETIRED, {}, AfterRun(stop=True), id="retired-is-stopped"),
        pytest.param(
            Ended.RETIRED,
            {"yielded": True},
            AfterRun(stop=True, place_after_stop=True),
            id="retired-for-a-waiting-tenant-places-once-stopped",
        ),
        pytest.param(
            Ended.HANDED_BACK,
            {},
            AfterRun(place_now=True, stop=True, place_after_stop=True),
            id="handed-back-places-before-and-after-the-stop",
        ),
        pytest.param(Ended.LOST, {}, AfterRun(), id="lost-is-left-alone"),
        pytest.param(Ended.REQUEUED, {}, AfterRun(), id="requeued-is-left-to-the-queue"),
    ],
)
def test_what_follows_a_run(ended: Ended, facts: dict[str, bool], follows: AfterRun) -> None:
    """Each way a run ends has one thing that follows it."""
    assert after_run(ended, **facts) == follows
