"""Pod orphan sweep: which live pods the controller made that no configured pod manages (issue 12)."""

from __future__ import annotations

import pytest

from thermostat.policy.common.pod_model import ListedPod
from thermostat.policy.wake.pod_orphans import PodOrphan, created_for, find_pod_orphans, to_terminate

VOLUMES = {"qwen": "vol-qwen", "llama": "vol-llama", "draft": ""}
STAMP = "20261130T154501Z"


def pod(name: str, *volumes: str, pod_id: str = "p1", status: str = "RUNNING") -> ListedPod:
    return ListedPod(id=pod_id, name=name, status=status, volume_ids=volumes)


@pytest.mark.parametrize(
    ("name", "owner"),
    [
        pytest.param(f"qwen-{STAMP}", "qwen", id="a-configured-name-with-the-stamp"),
        pytest.param(f"old-model-{STAMP}", "old-model", id="a-name-the-store-knows"),
        pytest.param("qwen", None, id="the-bare-name-is-the-templates-original"),
        pytest.param(f"qwen-{STAMP}-copy", None, id="anything-after-the-stamp"),
        pytest.param("qwen-20261130T1545Z", None, id="a-short-stamp"),
        pytest.param(f"mistral-{STAMP}", None, id="a-name-nobody-knows"),
        pytest.param(f"-{STAMP}", None, id="no-name-before-the-stamp"),
        pytest.param("pool-gpu-1b4e28ba-2fa1-11d2-883f-0016d3cca427", None, id="a-pool-machine"),
    ],
)
def test_a_pod_is_the_controllers_only_when_named_a_known_pod_and_a_create_stamp(name: str, owner: str | None) -> None:
    assert created_for(name, {"qwen", "old-model"}) == owner


def test_a_pod_of_ours_on_its_pods_configured_volume_is_managed_not_an_orphan() -> None:
    assert find_pod_orphans(listed=[pod(f"qwen-{STAMP}", "vol-qwen")], volumes=VOLUMES, known_names=()) == ()


def test_a_stopped_pod_on_the_configured_volume_is_managed_too() -> None:
    listed = [pod(f"qwen-{STAMP}", "vol-qwen", status="EXITED")]
    assert find_pod_orphans(listed=listed, volumes=VOLUMES, known_names=()) == ()


def test_a_pod_of_ours_on_another_volume_is_an_orphan_naming_both_volumes() -> None:
    (orphan,) = find_pod_orphans(listed=[pod(f"qwen-{STAMP}", "vol-old")], volumes=VOLUMES, known_names=())
    assert orphan == PodOrphan(
        pod_id="p1",
        name=f"qwen-{STAMP}",
        owner="qwen",
        status="RUNNING",
        volume_ids=("vol-old",),
        reason="mounts vol-old, not qwen's volume vol-qwen",
    )


def test_a_pod_of_ours_mounting_no_volume_is_an_orphan() -> None:
    (orphan,) = find_pod_orphans(listed=[pod(f"llama-{STAMP}")], volumes=VOLUMES, known_names=())
    assert orphan.reason == "mounts no volume, not llama's volume vol-llama"


def test_a_pod_named_after_a_pod_no_longer_configured_is_an_orphan_wherever_it_is() -> None:
    listed = [pod(f"old-model-{STAMP}", "vol-qwen")]
    (orphan,) = find_pod_orphans(listed=listed, volumes=VOLUMES, known_names={"old-model"})
    assert (orphan.owner, orphan.reason) == ("old-model", "pod old-model is no longer configured")


def test_a_pod_named_after_a_pod_whose_volume_is_blank_is_left_to_the_operator() -> None:
    assert find_pod_orphans(listed=[pod(f"draft-{STAMP}", "vol-x")], volumes=VOLUMES, known_names=()) == ()


def test_hand_made_pods_and_pool_machines_are_never_orphans() -> None:
    listed = [
        pod("qwen", "vol-other", pod_id="a"),
        pod("my-notebook", pod_id="b"),
        pod("pool-gpu-1b4e28ba-2fa1-11d2-883f-0016d3cca427", pod_id="c"),
    ]
    assert find_pod_orphans(listed=listed, volumes=VOLUMES, known_names={"my-notebook"}) == ()


def test_only_an_orphan_found_by_the_previous_pass_too_is_terminated() -> None:
    first = find_pod_orphans(
        listed=[pod(f"qwen-{STAMP}", "vol-old", pod_id="a"), pod(f"llama-{STAMP}", pod_id="b")],
        volumes=VOLUMES,
        known_names=(),
    )
    second = find_pod_orphans(
        listed=[pod(f"llama-{STAMP}", pod_id="b"), pod(f"qwen-{STAMP}", "vol-old", pod_id="c")],
        volumes=VOLUMES,
        known_names=(),
    )
    assert [o.pod_id for o in to_terminate(current=second, previous=first)] == ["b"]
    assert to_terminate(current=first, previous=()) == ()
