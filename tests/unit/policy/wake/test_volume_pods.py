"""Volume pods: which of the pods on our volume GET reports, and how its fields are derived (pod-control seed:
Surface)."""

from __future__ import annotations

import pytest

from thermostat.policy.common.pod_model import Lookup, PodObservation, PodStatus, VolumeLookup
from thermostat.policy.wake.volume_pods import LookupView, rank, view_volume_pods


def pod(pod_id: str, status: PodStatus, *, gpus: int = 1, lookup: Lookup = Lookup.FOUND) -> PodObservation:
    return PodObservation(lookup=lookup, pod_id=pod_id, status=status, gpu_count=gpus)


def found(*ids: str) -> VolumeLookup:
    return VolumeLookup(lookup=Lookup.FOUND, pod_ids=ids)


@pytest.mark.parametrize(
    ("observations", "chosen"),
    [
        pytest.param([pod("stale", PodStatus.EXITED), pod("new", PodStatus.RUNNING)], "new", id="stale-listed-first"),
        pytest.param(
            [pod("old", PodStatus.EXITED), pod("boot", PodStatus.STARTING), pod("up", PodStatus.RUNNING)],
            "up",
            id="serving-beats-in-flight",
        ),
        pytest.param(
            [pod("nogpu", PodStatus.RUNNING, gpus=0), pod("prov", PodStatus.PROVISIONING)],
            "prov",
            id="running-without-gpu-is-not-serving",
        ),
        pytest.param(
            [pod("old", PodStatus.EXITED), pod("boot", PodStatus.STARTING)], "boot", id="in-flight-beats-stopped"
        ),
        pytest.param(
            [pod("first", PodStatus.EXITED), pod("second", PodStatus.TERMINATED)], "first", id="else-the-first"
        ),
        pytest.param(
            [PodObservation(lookup=Lookup.UNREADABLE, pod_id="blip"), pod("x", PodStatus.EXITED)],
            "blip",
            id="unreadable-first-is-still-first",
        ),
    ],
)
def test_rank_prefers_the_serving_pod_then_the_in_flight_one_then_the_first(
    observations: list[PodObservation], chosen: str
) -> None:
    """GET /v2/pods order is unspecified, so a stale Exited pod listed first must not hide its replacement."""
    ranked = rank(observations)
    assert ranked is not None
    assert ranked.pod_id == chosen


def test_rank_of_no_pods_is_none() -> None:
    """No pod, nothing to report."""
    assert rank([]) is None


def test_an_unconfigured_pod_reports_configured_false_and_lookup_unconfigured() -> None:
    """Unconfigured answers 200 with configured:false and makes no RunPod call."""
    view = view_volume_pods(None, [])
    assert (view.configured, view.lookup, view.status, view.is_running, view.pod_id, view.pods_on_volume) == (
        False,
        LookupView.UNCONFIGURED,
        PodStatus.UNKNOWN,
        False,
        None,
        0,
    )


def test_an_unreadable_volume_lookup_reports_unknown_status_as_a_blip() -> None:
    """UNKNOWN with lookup UNREADABLE is a control-plane blip, not a verdict that the pod is down."""
    view = view_volume_pods(VolumeLookup(lookup=Lookup.UNREADABLE), [])
    assert (view.configured, view.lookup, view.status, view.is_running, view.pod_id) == (
        True,
        LookupView.UNREADABLE,
        PodStatus.UNKNOWN,
        False,
        None,
    )


def test_no_pod_on_the_volume_reports_not_found() -> None:
    """An empty readable list is the affirmative "no pod"."""
    view = view_volume_pods(VolumeLookup(lookup=Lookup.NOT_FOUND), [])
    assert (view.lookup, view.status, view.is_running, view.pod_id, view.pods_on_volume) == (
        LookupView.NOT_FOUND,
        PodStatus.UNKNOWN,
        False,
        None,
        0,
    )


def test_a_found_volume_reports_the_ranked_pod_and_how_many_share_the_volume() -> None:
    """The serving replacement is what Rig-E reads its endpoint from, even when listed second."""
    view = view_volume_pods(found("stale", "new"), [pod("stale", PodStatus.EXITED), pod("new", PodStatus.RUNNING)])
    assert (view.lookup, view.status, view.is_running, view.pod_id, view.pods_on_volume) == (
        LookupView.FOUND,
        PodStatus.RUNNING,
        True,
        "new",
        2,
    )


@pytest.mark.parametrize(
    ("observation", "status", "is_running"),
    [
        pytest.param(pod("a", PodStatus.RUNNING), PodStatus.RUNNING, True, id="running-with-gpu"),
        pytest.param(pod("a", PodStatus.RUNNING, gpus=0), PodStatus.RUNNING, False, id="running-without-gpu"),
        pytest.param(pod("a", PodStatus.STARTING), PodStatus.STARTING, False, id="starting"),
        pytest.param(pod("a", PodStatus.EXITED), PodStatus.EXITED, False, id="exited"),
        pytest.param(
            PodObservation(lookup=Lookup.UNREADABLE, pod_id="a"), PodStatus.UNKNOWN, False, id="observe-unreadable"
        ),
        pytest.param(
            PodObservation(lookup=Lookup.NOT_FOUND, pod_id="a", status=PodStatus.RUNNING, gpu_count=1),
            PodStatus.UNKNOWN,
            False,
            id="observe-not-found",
        ),
    ],
)
def test_is_running_means_running_with_at_least_one_gpu(
    observation: PodObservation, status: PodStatus, is_running: bool
) -> None:
    """Only RUNNING with a GPU serves; an observe that could not be read reports UNKNOWN."""
    view = view_volume_pods(found("a"), [observation])
    assert (view.status, view.is_running, view.pod_id) == (status, is_running, "a")


def test_a_found_volume_without_observations_names_the_first_listed_pod_as_unknown() -> None:
    """The pod is named whenever the volume lists one, even before it was observed."""
    view = view_volume_pods(found("a", "b"), [])
    assert (view.pod_id, view.status, view.is_running, view.pods_on_volume) == ("a", PodStatus.UNKNOWN, False, 2)
