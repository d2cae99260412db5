"""The pure readers behind RunPodV2Client: odd JSON reads fail-closed, never as an affirmative answer."""

from __future__ import annotations

import pytest

from thermostat.policy.common.pod_model import Availability, ListedPod, Lookup, PodStatus
from thermostat.providers.runpod.shapes import (
    is_problem_not_found,
    needs_observing_by_id,
    problem_detail,
    read_catalog,
    read_pod,
    read_pods_listed,
    read_pods_on_volume,
    read_retry_after,
)


@pytest.mark.parametrize(
    ("content_type", "content", "expected"),
    [
        pytest.param("application/problem+json", b'{"title":"Not Found","status":404}', True, id="problem-404"),
        pytest.param("Application/Problem+JSON; charset=utf-8", b'{"status":404}', True, id="parameters-and-case"),
        pytest.param("application/json", b'{"status":404}', False, id="plain-json"),
        pytest.param("text/html", b"<h1>404</h1>", False, id="html-page"),
        pytest.param(None, b"", False, id="no-content-type"),
        pytest.param("application/problem+json", b'{"status":"404"}', False, id="status-as-string"),
        pytest.param("application/problem+json", b'{"status":500}', False, id="other-status-in-body"),
        pytest.param("application/problem+json", b"not json", False, id="problem-type-not-json"),
    ],
)
def test_only_runpods_problem_404_means_not_found(content_type: str | None, content: bytes, expected: bool) -> None:
    """A bare or mislabelled 404 says nothing about the pod."""
    assert is_problem_not_found(content_type, content) is expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param("12", 12.0, id="seconds"),
        pytest.param(" 3 ", 3.0, id="padded"),
        pytest.param("0", 0.0, id="zero"),
        pytest.param("-1", None, id="negative"),
        pytest.param("nan", None, id="nan"),
        pytest.param("inf", None, id="infinite"),
        pytest.param("Wed, 21 Oct 2026 07:28:00 GMT", None, id="http-date"),
        pytest.param(None, None, id="absent"),
    ],
)
def test_retry_after_is_read_as_delta_seconds_only(value: str | None, expected: float | None) -> None:
    """Anything but non-negative seconds is ignored, leaving the caller's own poll interval."""
    assert read_retry_after(value) == expected


def test_a_422s_detail_carries_the_violations_its_errors_list() -> None:
    """Spec v2.9.0: a 422's detail is generic and `errors` lists each violation; both reach the log and the job."""
    body = (
        b'{"title":"Unprocessable Entity","status":422,"detail":"Request validation failed.",'
        b'"errors":["$.name: required","$.cloud: not in enum",7]}'
    )
    assert problem_detail(body) == "Request validation failed. ($.name: required; $.cloud: not in enum)"
    assert problem_detail(b'{"status":422,"errors":["$.gpu.id: required"]}') == "invalid request ($.gpu.id: required)"


@pytest.mark.parametrize(
    ("flag", "secure_price"),
    [
        pytest.param(True, 0.44, id="offered"),
        pytest.param(None, 0.44, id="no-flag-read-as-offered"),
        pytest.param(False, None, id="not-on-secure-cloud-is-no-price"),
    ],
)
def test_a_gpu_secure_cloud_does_not_offer_has_no_secure_price(flag: bool | None, secure_price: float | None) -> None:
    """The spec's prices are numbers, never null: `secure: false` is what says the figure (0) is no price."""
    gpu: dict[str, object] = {"id": "G", "price": {"secure": 0.44 if flag is not False else 0.0, "community": 0.3}}
    if flag is not None:
        gpu["secure"] = flag
    (entry,) = read_catalog({"gpus": [gpu]})
    assert entry.secure_price == secure_price


def test_problem_detail_falls_back_to_the_title_and_is_bounded() -> None:
    """The detail names the refusal for the log; a title stands in, and a huge body is cut."""
    assert problem_detail(b'{"title":"Bad Request","status":400}') == "Bad Request"
    assert problem_detail(b"<html>") is None
    assert len(problem_detail(b'{"detail":"' + b"x" * 2000 + b'"}') or "") == 500


@pytest.mark.parametrize(
    ("gpu", "secure_price", "availability", "vram"),
    [
        pytest.param(
            {"id": "G", "price": {"secure": 1.5}, "availability": "LOW", "memory": 48},
            1.5,
            Availability.LOW,
            48,
            id="complete",
        ),
        pytest.param(
            {"id": "G", "price": {"secure": True}, "availability": "low"},
            None,
            Availability.NONE,
            None,
            id="bool-price-and-lowercase-availability",
        ),
        pytest.param(
            {"id": "G", "price": None, "availability": 3, "memory": 23.9},
            None,
            Availability.NONE,
            23,
            id="no-price-numeric-availability",
        ),
        pytest.param({"id": "G", "memory": -4}, None, Availability.NONE, None, id="negative-memory"),
    ],
)
def test_catalogue_fields_that_cannot_be_read_are_absent(
    gpu: dict[str, object], secure_price: float | None, availability: Availability, vram: int | None
) -> None:
    """An unreadable price is no price (never eligible) and an unreadable level is NONE."""
    (entry,) = read_catalog({"gpus": [gpu]})
    assert (entry.secure_price, entry.availability, entry.vram_gb) == (secure_price, availability, vram)


@pytest.mark.parametrize("body", [None, [], {"gpus": {}}, {"data": []}, "gpus"])
def test_a_catalogue_without_a_gpu_list_is_empty(body: object) -> None:
    """No list, no candidates."""
    assert read_catalog(body) == ()


def test_datacenters_without_an_id_are_skipped() -> None:
    """A datacenter row we cannot name cannot match our datacenter."""
    (entry,) = read_catalog({"gpus": [{"id": "G", "dataCenters": [{"availability": "HIGH"}, {"id": "EU-RO-1"}]}]})
    assert [(dc.id, dc.availability) for dc in entry.datacenters] == [("EU-RO-1", Availability.NONE)]


def test_a_pod_body_keeps_only_string_volume_ids_once() -> None:
    """volume_ids lists each readable mounts.network[].volumeId once, in order."""
    observed = read_pod(
        "p",
        {
            "status": "EXITED",
            "mounts": {
                "network": [{"volumeId": "v1"}, {"volumeId": 7}, {"volumeId": "v1"}, {"volumeId": "v2"}, "junk"]
            },
        },
    )
    assert (observed.lookup, observed.status, observed.volume_ids) == (Lookup.FOUND, PodStatus.EXITED, ("v1", "v2"))


def test_a_pod_cost_must_be_a_number() -> None:
    """A cost we cannot read is unknown, not free."""
    assert read_pod("p", {"status": "RUNNING", "cost": "1.59"}).cost_per_hour is None


def test_lookup_matches_only_our_volume_and_keeps_list_order() -> None:
    """Pods on other volumes or on none are ignored; ours come back in list order, each once."""
    body = {
        "pods": [
            {"id": "b", "mounts": {"network": [{"volumeId": "ours"}]}},
            {"id": "x", "mounts": {"network": [{"volumeId": "theirs"}]}},
            {"id": "y", "mounts": None},
            {"id": "a", "mounts": {"network": [{"volumeId": "ours"}]}},
            {"id": "b", "mounts": {"network": [{"volumeId": "ours"}]}},
        ]
    }
    assert read_pods_on_volume(body, "ours") == ("b", "a")


def test_an_unnamed_pod_elsewhere_does_not_spoil_the_list() -> None:
    """Only a pod on our volume must be nameable; a stranger's odd row is not our concern."""
    body = {"pods": [{"mounts": {"network": [{"volumeId": "theirs"}]}}]}
    assert read_pods_on_volume(body, "ours") == ()


@pytest.mark.parametrize(
    ("entry", "by_id"),
    [
        pytest.param({"status": "RUNNING"}, True, id="running-without-a-runtime-key"),
        pytest.param({"status": "RUNNING", "runtime": None}, False, id="running-with-a-null-runtime"),
        pytest.param({"status": "RUNNING", "runtime": {"uptimeInSeconds": 30}}, False, id="running-with-runtime"),
        pytest.param({"status": "EXITED"}, False, id="exited-without-a-runtime-key"),
    ],
)
def test_only_a_running_list_entry_without_a_runtime_key_is_observed_by_id(entry: dict, by_id: bool) -> None:
    """The list cannot say a RUNNING pod serves without its runtime; any other entry is read as it stands."""
    assert needs_observing_by_id(entry) is by_id
    if by_id:
        assert read_pod("p", entry).status is PodStatus.STARTING  # what reading it from the list would say


def test_the_account_listing_keeps_live_pods_with_their_status_and_volumes() -> None:
    body = {
        "pods": [
            {
                "id": "a",
                "name": "qwen-20261130T154501Z",
                "status": "EXITED",
                "mounts": {"network": [{"volumeId": "v"}]},
            },
            {"id": "b", "name": "gone", "status": "TERMINATED"},
            {"id": "", "name": "blank-id"},
            {"id": "c", "name": 7},
            "not a pod",
            {"id": "d", "name": "bare"},
        ]
    }
    assert read_pods_listed(body) == (
        ListedPod(id="a", name="qwen-20261130T154501Z", status="EXITED", volume_ids=("v",)),
        ListedPod(id="d", name="bare", status=""),
    )


@pytest.mark.parametrize("body", [None, {}, {"pods": {}}, []])
def test_an_account_listing_without_a_pod_list_is_unreadable(body: object) -> None:
    assert read_pods_listed(body) is None
