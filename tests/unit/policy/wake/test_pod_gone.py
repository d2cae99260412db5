"""A pod on the record that no longer exists: which pods are asked by id, and which answer confirms gone."""

from __future__ import annotations

import pytest

from thermostat.policy.common.pod_model import Lookup, PodObservation, PodStatus, VolumeLookup
from thermostat.policy.wake.pod_gone import confirmed_gone, unlisted


@pytest.mark.parametrize(
    ("volume", "billing", "asked"),
    [
        pytest.param(VolumeLookup(lookup=Lookup.NOT_FOUND), ["p1"], ("p1",), id="no-pod-on-the-volume"),
        pytest.param(VolumeLookup(lookup=Lookup.FOUND, pod_ids=("p2",)), ["p1", "p2"], ("p1",), id="listed-without-it"),
        pytest.param(VolumeLookup(lookup=Lookup.FOUND, pod_ids=("p1",)), ["p1"], (), id="still-listed"),
        pytest.param(VolumeLookup(lookup=Lookup.UNREADABLE), ["p1"], (), id="a-failed-list-says-nothing"),
        pytest.param(VolumeLookup(lookup=Lookup.NOT_FOUND), [], (), id="nothing-billing"),
        pytest.param(VolumeLookup(lookup=Lookup.NOT_FOUND), ["p1", "", "p1"], ("p1",), id="each-once-blank-none"),
    ],
)
def test_a_billing_pod_a_readable_lookup_does_not_list_is_asked_by_id(
    volume: VolumeLookup, billing: list[str], asked: tuple[str, ...]
) -> None:
    """Only a readable lookup's absence counts (pod-control seed: a failed lookup is never NotFound)."""
    assert unlisted(volume, billing) == asked


@pytest.mark.parametrize(
    ("lookup", "gone"),
    [
        pytest.param(Lookup.NOT_FOUND, True, id="runpods-404-confirms"),
        pytest.param(Lookup.UNREADABLE, False, id="a-bare-404-or-a-blip-does-not"),
        pytest.param(Lookup.FOUND, False, id="answered-by-id-not-yet-listed"),
    ],
)
def test_an_unlisted_pod_is_gone_only_when_its_observe_says_not_found(lookup: Lookup, gone: bool) -> None:
    """Both answers are needed: a new pod may not be listed yet, and a scoped key answers 404 for a live pod."""
    observation = PodObservation(lookup=lookup, pod_id="p1", status=PodStatus.TERMINATED if gone else PodStatus.UNKNOWN)
    assert confirmed_gone(observation) is gone
