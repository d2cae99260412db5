"""Wake rounds: one decision over every pod on the volume, then the new pod's poll (pod-control seed: Wake step 2/3)."""

from __future__ import annotations

import pytest

from thermostat.policy.common.pod_model import Lookup, PodObservation, PodStatus, VolumeLookup
from thermostat.policy.wake.wake_result import WakeOutcome
from thermostat.policy.wake.wake_round import (
    NewPodVerdict,
    RoundVerdict,
    VolumeVerdict,
    after_volume_lookup,
    decide_new_pod,
    decide_round,
)


def pod(
    pod_id: str, status: PodStatus, *, gpus: int = 1, started: bool = False, lookup: Lookup = Lookup.FOUND
) -> PodObservation:
    return PodObservation(lookup=lookup, pod_id=pod_id, status=status, gpu_count=gpus, start_attempted=started)


def unreadable(pod_id: str) -> PodObservation:
    return PodObservation(lookup=Lookup.UNREADABLE, pod_id=pod_id)


def gone(pod_id: str) -> PodObservation:
    return PodObservation(lookup=Lookup.NOT_FOUND, pod_id=pod_id)


def test_a_serving_pod_not_started_this_wake_is_already_running() -> None:
    """Nothing was billed by this wake: the pod was already up."""
    decision = decide_round([pod("a", PodStatus.RUNNING)])
    assert (decision.verdict, decision.pod_id, decision.outcome) == (
        RoundVerdict.DONE,
        "a",
        WakeOutcome.ALREADY_RUNNING,
    )
    assert decision.stale_pod_ids == ()


def test_a_serving_pod_this_wake_started_is_started() -> None:
    """The outcome names the start this wake issued."""
    decision = decide_round([pod("a", PodStatus.RUNNING, started=True)])
    assert (decision.verdict, decision.outcome) == (RoundVerdict.DONE, WakeOutcome.STARTED)


@pytest.mark.parametrize(
    "sibling",
    [
        pytest.param(pod("old", PodStatus.EXITED), id="exited"),
        pytest.param(pod("old", PodStatus.STARTING), id="in-flight"),
        pytest.param(unreadable("old"), id="unreadable"),
        pytest.param(gone("old"), id="not-found"),
        pytest.param(pod("old", PodStatus.RUNNING, gpus=0), id="running-without-gpu"),
    ],
)
def test_a_serving_pod_wins_and_every_sibling_is_stale(sibling: PodObservation) -> None:
    """One serving pod is enough; every other pod on the volume goes to the terminate step."""
    decision = decide_round([sibling, pod("new", PodStatus.RUNNING)])
    assert (decision.verdict, decision.pod_id, decision.stale_pod_ids) == (RoundVerdict.DONE, "new", ("old",))


def test_with_two_serving_pods_the_first_listed_wins_and_the_other_is_stale() -> None:
    """Two pods serving on one volume bill twice; the list order picks one deterministically."""
    decision = decide_round([pod("a", PodStatus.RUNNING), pod("b", PodStatus.RUNNING, started=True)])
    assert (decision.pod_id, decision.outcome, decision.stale_pod_ids) == (
        "a",
        WakeOutcome.ALREADY_RUNNING,
        ("b",),
    )


@pytest.mark.parametrize(
    "observations",
    [
        pytest.param([pod("a", PodStatus.STARTING)], id="starting"),
        pytest.param([pod("a", PodStatus.PROVISIONING)], id="provisioning"),
        pytest.param([pod("a", PodStatus.UNKNOWN)], id="unknown"),
        pytest.param([unreadable("a")], id="unreadable"),
        pytest.param([pod("a", PodStatus.EXITED), pod("b", PodStatus.STARTING)], id="stopped-and-in-flight"),
        pytest.param([pod("a", PodStatus.TERMINATED), unreadable("b")], id="dead-and-unreadable"),
        pytest.param([gone("a"), pod("b", PodStatus.PROVISIONING)], id="gone-and-in-flight"),
    ],
)
def test_any_pod_in_flight_or_unreadable_repolls(observations: list[PodObservation]) -> None:
    """Never start or create while any pod on the volume is in flight or unreadable."""
    decision = decide_round(observations)
    assert decision.verdict is RoundVerdict.REPOLL


def test_waiting_then_rewake_never_stacks_a_third_pod() -> None:
    """After a Waiting wake the stale stopped pod and the provisioning replacement coexist: the re-wake waits."""
    stale_first = [pod("stale", PodStatus.EXITED), pod("replacement", PodStatus.PROVISIONING)]
    decision = decide_round(stale_first)
    assert decision.verdict is RoundVerdict.REPOLL
    assert decision.pod_id is None
    assert decision.stale_pod_ids == ()


def test_one_stopped_pod_is_started() -> None:
    """A stopped pod that this wake has not tried yet is started, not replaced."""
    decision = decide_round([pod("a", PodStatus.EXITED)])
    assert (decision.verdict, decision.pod_id) == (RoundVerdict.START, "a")


def test_with_several_stopped_pods_only_the_first_listed_is_started() -> None:
    """Starting two would bill two; once one serves, the others are stale and terminated."""
    decision = decide_round([pod("a", PodStatus.ERROR), pod("b", PodStatus.EXITED)])
    assert (decision.verdict, decision.pod_id) == (RoundVerdict.START, "a")


def test_a_stopped_sibling_is_started_before_a_replacement_is_created() -> None:
    """When one pod failed its start and another was never tried, the untried one is started first."""
    decision = decide_round([pod("a", PodStatus.EXITED, started=True), pod("b", PodStatus.EXITED)])
    assert (decision.verdict, decision.pod_id) == (RoundVerdict.START, "b")


def test_when_every_pod_needs_replacing_a_replacement_is_created_with_all_of_them_stale() -> None:
    """Failed starts, terminated pods and GPU-less pods are all left for the terminate step."""
    observations = [
        pod("a", PodStatus.EXITED, started=True),
        pod("b", PodStatus.TERMINATED),
        pod("c", PodStatus.RUNNING, gpus=0),
    ]
    decision = decide_round(observations)
    assert (decision.verdict, decision.stale_pod_ids) == (RoundVerdict.CREATE_REPLACEMENT, ("a", "b", "c"))


@pytest.mark.parametrize(
    "observations",
    [
        pytest.param([gone("a")], id="only-pod-gone"),
        pytest.param([gone("a"), pod("b", PodStatus.EXITED)], id="gone-and-stopped"),
        pytest.param([pod("a", PodStatus.TERMINATED), gone("b")], id="gone-and-terminated"),
        pytest.param([], id="no-observations"),
    ],
)
def test_an_observe_not_found_is_never_a_create_trigger_by_itself(observations: list[PodObservation]) -> None:
    """A misrouted 404 or a scoped key would bill a second pod: the absence is re-confirmed on the volume."""
    decision = decide_round(observations)
    assert decision.verdict is RoundVerdict.CONFIRM_ABSENCE


@pytest.mark.parametrize(
    ("volume", "verdict", "pod_ids"),
    [
        pytest.param(VolumeLookup(lookup=Lookup.UNREADABLE), VolumeVerdict.FAILED, (), id="unreadable-fails"),
        pytest.param(
            VolumeLookup(lookup=Lookup.FOUND, pod_ids=("a", "b")),
            VolumeVerdict.DRIVE,
            ("a", "b"),
            id="found-drives-that-list",
        ),
        pytest.param(VolumeLookup(lookup=Lookup.NOT_FOUND), VolumeVerdict.CREATE, (), id="not-found-creates"),
        pytest.param(VolumeLookup(lookup=Lookup.FOUND), VolumeVerdict.FAILED, (), id="found-but-empty-fails"),
        pytest.param(
            VolumeLookup(lookup=Lookup.NOT_FOUND, pod_ids=("a",)),
            VolumeVerdict.FAILED,
            (),
            id="not-found-with-ids-fails",
        ),
    ],
)
def test_the_volume_lookup_is_the_only_affirmative_absence(
    volume: VolumeLookup, verdict: VolumeVerdict, pod_ids: tuple[str, ...]
) -> None:
    """Unreadable fails with zero writes, Found drives that list, only an empty readable list creates."""
    decision = after_volume_lookup(volume)
    assert (decision.verdict, decision.pod_ids) == (verdict, pod_ids)


def test_a_failed_volume_lookup_says_why() -> None:
    """The 409 detail explains that nothing was created because the list could not be read."""
    assert "unreadable" in after_volume_lookup(VolumeLookup(lookup=Lookup.UNREADABLE)).reason


@pytest.mark.parametrize(
    ("observation", "verdict"),
    [
        pytest.param(pod("new", PodStatus.RUNNING), NewPodVerdict.SERVING, id="running-with-gpu-serves"),
        pytest.param(pod("new", PodStatus.PROVISIONING), NewPodVerdict.REPOLL, id="provisioning-repolls"),
        pytest.param(pod("new", PodStatus.STARTING), NewPodVerdict.REPOLL, id="starting-repolls"),
        pytest.param(pod("new", PodStatus.UNKNOWN), NewPodVerdict.REPOLL, id="unknown-repolls"),
        pytest.param(unreadable("new"), NewPodVerdict.REPOLL, id="unreadable-repolls"),
        pytest.param(gone("new"), NewPodVerdict.REPOLL, id="not-yet-listed-repolls"),
        pytest.param(pod("new", PodStatus.TERMINATED), NewPodVerdict.FAILED, id="terminated-fails"),
        pytest.param(pod("new", PodStatus.EXITED), NewPodVerdict.FAILED, id="exited-fails"),
        pytest.param(pod("new", PodStatus.ERROR), NewPodVerdict.FAILED, id="error-fails"),
        pytest.param(pod("new", PodStatus.RUNNING, gpus=0), NewPodVerdict.FAILED, id="no-gpu-fails"),
    ],
)
def test_the_new_pod_is_polled_until_it_serves_and_a_dead_one_is_not_retried(
    observation: PodObservation, verdict: NewPodVerdict
) -> None:
    """Serving → terminate step · in flight or not yet visible → repoll · dead → Failed, no second create walk."""
    decision = decide_new_pod(observation)
    assert decision.verdict is verdict
    if verdict is NewPodVerdict.FAILED:
        assert decision.reason.endswith("not retrying")
