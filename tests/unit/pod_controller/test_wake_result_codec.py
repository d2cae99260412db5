"""The stored wake result: what a joining replica reads back is the WakeResult the leader returned."""

from __future__ import annotations

import json

import pytest

from thermostat.pod_controller.repository import WAKE_RESULTS
from thermostat.policy.wake.wake_result import WakeFailureKind, WakeOutcome, WakeResult


@pytest.mark.parametrize(
    "result",
    [
        WakeResult(outcome=WakeOutcome.ALREADY_RUNNING, pod_id="p1", proxy_url="https://p1-8000.proxy", message="up"),
        WakeResult(
            outcome=WakeOutcome.CREATED,
            pod_id="p2",
            gpu_id="NVIDIA A100 80GB PCIe",
            price_per_hour=1.19,
            candidates_considered=3,
            create_attempts=2,
            last_provider_status=201,
            billed=True,
        ),
        WakeResult(outcome=WakeOutcome.FAILED, failure_kind=WakeFailureKind.NO_ELIGIBLE_GPU, message="none under 2.00"),
    ],
    ids=["already-running", "created", "failed"],
)
def test_a_result_reads_back_as_it_was_written(result: WakeResult) -> None:
    assert WAKE_RESULTS.decode(WAKE_RESULTS.encode(result)) == result


def test_the_stored_text_names_fields_and_enums_by_value_as_rows_written_before_the_codec_do() -> None:
    stored = json.loads(
        WAKE_RESULTS.encode(WakeResult(outcome=WakeOutcome.FAILED, failure_kind=WakeFailureKind.EXCEPTION))
    )
    assert (stored["outcome"], stored["failure_kind"], stored["pod_id"]) == ("Failed", "Exception", None)


def test_a_stored_field_this_version_does_not_know_is_ignored() -> None:
    assert WAKE_RESULTS.decode('{"outcome": "Started", "pod_id": "p1", "retired_field": 1}') == WakeResult(
        outcome=WakeOutcome.STARTED, pod_id="p1"
    )
