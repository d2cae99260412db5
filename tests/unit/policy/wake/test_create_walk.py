"""Create-attempt walk: what one POST /v2/pods answer means and where the walk goes next (pod-control seed:
Wake part 1b)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from thermostat.policy.common.pod_model import Availability, CreateResult, Lookup, VolumeLookup
from thermostat.policy.wake.create_walk import (
    MAX_CREATE_RETRIES,
    Created,
    CreateFailurePhase,
    CreateOutcome,
    CreateStep,
    CreateWalk,
    Failed,
    Post,
    RecheckVerdict,
    Wait,
    advance,
    classify,
    recheck_after_wait,
    start,
)
from thermostat.policy.wake.gpu_selection import GpuCandidate

POLL = 10.0
MAX_RETRY_AFTER = 30.0


def cand(gpu_id: str, price: float = 0.5) -> GpuCandidate:
    return GpuCandidate(gpu_id=gpu_id, price_per_hour=price, availability=Availability.HIGH, vram_gb=48)


A, B, C = cand("A"), cand("B"), cand("C")


def step(walk: CreateWalk, status: int, *, pod_id: str | None = None, retry_after: float | None = None) -> CreateStep:
    return advance(
        walk,
        CreateResult(http_status=status, pod_id=pod_id, retry_after_seconds=retry_after),
        poll_interval_seconds=POLL,
        max_retry_after_seconds=MAX_RETRY_AFTER,
    )


@pytest.mark.parametrize(
    ("status", "outcome"),
    [
        pytest.param(201, CreateOutcome.CREATED, id="201-created"),
        pytest.param(200, CreateOutcome.CREATED, id="200-off-spec-created"),
        pytest.param(202, CreateOutcome.CREATED, id="202-off-spec-created"),
        pytest.param(400, CreateOutcome.TRY_NEXT_CANDIDATE, id="400-next"),
        pytest.param(403, CreateOutcome.TRY_NEXT_CANDIDATE, id="403-next"),
        pytest.param(402, CreateOutcome.ABORT, id="402-abort"),
        pytest.param(422, CreateOutcome.ABORT, id="422-abort"),
        pytest.param(429, CreateOutcome.RETRY_SAME_CANDIDATE, id="429-retry"),
        pytest.param(500, CreateOutcome.RETRY_SAME_CANDIDATE, id="500-retry"),
        pytest.param(502, CreateOutcome.RETRY_SAME_CANDIDATE, id="502-retry"),
        pytest.param(503, CreateOutcome.RETRY_SAME_CANDIDATE, id="503-retry"),
        pytest.param(599, CreateOutcome.RETRY_SAME_CANDIDATE, id="599-retry"),
        pytest.param(0, CreateOutcome.ABORT, id="transport-failure-abort"),
        pytest.param(301, CreateOutcome.ABORT, id="redirect-abort"),
        pytest.param(404, CreateOutcome.ABORT, id="404-abort"),
        pytest.param(409, CreateOutcome.ABORT, id="409-abort"),
        pytest.param(600, CreateOutcome.ABORT, id="out-of-range-abort"),
    ],
)
def test_classify_maps_each_provider_status_to_its_outcome(status: int, outcome: CreateOutcome) -> None:
    """201/2xx created · 400/403 next · 402/422 abort · 429/5xx retry · transport failure and the rest abort."""
    assert classify(status) is outcome


def test_start_posts_the_first_candidate() -> None:
    """The walk begins at the cheapest (first-ranked) candidate."""
    first = start([A, B])
    assert isinstance(first, Post)
    assert first.candidate == A
    assert first.walk.attempts == 0


def test_start_with_no_candidates_fails_without_posting() -> None:
    """Zero candidates is terminal at once: nothing is created, nothing billed."""
    first = start([])
    assert isinstance(first, Failed)
    assert first.phase is CreateFailurePhase.NO_CANDIDATES


def test_created_with_a_pod_id_ends_the_walk_on_that_candidate() -> None:
    """A 201 with an id is the replacement, on the GPU that was posted."""
    created = step(start([A, B]).walk, 201, pod_id="pod-new")
    assert isinstance(created, Created)
    assert (created.pod_id, created.candidate) == ("pod-new", A)
    assert created.walk.last_provider_status == 201


@pytest.mark.parametrize("status", [pytest.param(200, id="200"), pytest.param(202, id="202")])
def test_an_off_spec_2xx_with_a_pod_id_is_created_so_the_pod_is_never_orphaned(status: int) -> None:
    """The pod exists and bills whatever the exact 2xx, so it must be tracked as the replacement."""
    created = step(start([A]).walk, status, pod_id="pod-new")
    assert isinstance(created, Created)
    assert created.pod_id == "pod-new"


@pytest.mark.parametrize("pod_id", [pytest.param(None, id="absent"), pytest.param("  ", id="blank")])
def test_a_2xx_without_a_pod_id_fails_as_created_without_id(pod_id: str | None) -> None:
    """Without an id the pod can't be polled or terminated, so the walk stops instead of posting again."""
    failed = step(start([A, B]).walk, 201, pod_id=pod_id)
    assert isinstance(failed, Failed)
    assert failed.phase is CreateFailurePhase.CREATED_WITHOUT_ID
    assert "created without id" in failed.reason


def test_try_next_candidate_posts_the_next_gpu() -> None:
    """A 400/403 is per-GPU: the walk moves to the next candidate."""
    nxt = step(start([A, B]).walk, 400)
    assert isinstance(nxt, Post)
    assert nxt.candidate == B


def test_try_next_on_the_last_candidate_is_exhausted() -> None:
    """Running out of candidates ends Exhausted, named like the 2026-09-11 log line (#2093)."""
    failed = step(start([A]).walk, 400)
    assert isinstance(failed, Failed)
    assert failed.phase is CreateFailurePhase.EXHAUSTED
    assert failed.reason == "ended Exhausted after 1 of 1 candidate(s) and 0 retries (last status 400)"


@pytest.mark.parametrize(
    "status",
    [pytest.param(402, id="402"), pytest.param(422, id="422"), pytest.param(0, id="transport")],
)
def test_abort_ends_the_walk_without_trying_another_candidate(status: int) -> None:
    """402/422 are account-level, and a timed-out create may have placed a pod: never post again."""
    failed = step(start([A, B]).walk, status)
    assert isinstance(failed, Failed)
    assert failed.phase is CreateFailurePhase.ABORTED


def test_retry_waits_the_retry_after_then_reposts_the_same_candidate() -> None:
    """A 429 names its own wait; the same GPU is posted again after it."""
    wait = step(start([A, B]).walk, 429, retry_after=7)
    assert isinstance(wait, Wait)
    assert (wait.seconds, wait.candidate) == (7, A)


@pytest.mark.parametrize(
    ("retry_after", "seconds"),
    [
        pytest.param(None, POLL, id="absent-uses-poll-interval"),
        pytest.param(5.0, 5.0, id="short-is-honoured"),
        pytest.param(3600.0, MAX_RETRY_AFTER, id="long-is-capped"),
        pytest.param(-4.0, 0.0, id="negative-is-zero"),
        pytest.param(float("nan"), POLL, id="nan-uses-poll-interval"),
    ],
)
def test_retry_wait_is_retry_after_or_poll_interval_capped_at_max_retry_after(
    retry_after: float | None, seconds: float
) -> None:
    """Wait = min(Retry-After ?? PollInterval, MaxRetryAfter): a hostile header never stalls the wake."""
    wait = step(start([A]).walk, 503, retry_after=retry_after)
    assert isinstance(wait, Wait)
    assert wait.seconds == seconds


def test_retries_share_one_budget_of_two_across_the_whole_walk() -> None:
    """Two retries in total, whatever candidate they were spent on."""
    walk = start([A, B, C]).walk
    s1 = step(walk, 429)
    s2 = step(s1.walk, 503)
    s3 = step(s2.walk, 503)
    assert isinstance(s1, Wait)
    assert isinstance(s2, Wait)
    assert isinstance(s3, Failed)
    assert s3.phase is CreateFailurePhase.RETRIES_EXHAUSTED
    assert MAX_CREATE_RETRIES == 2


def test_the_retry_budget_is_never_refilled_on_a_candidate_change() -> None:
    """A 429 is account-level and a 5xx an outage: moving to the next GPU does not buy more retries."""
    s1 = step(start([A, B, C]).walk, 503)  # retry A (1 of 2)
    s2 = step(s1.walk, 400)  # next: B
    s3 = step(s2.walk, 503)  # retry B (2 of 2)
    s4 = step(s3.walk, 503)  # budget spent
    assert [type(s).__name__ for s in (s1, s2, s3, s4)] == ["Wait", "Post", "Wait", "Failed"]
    assert isinstance(s4, Failed)
    assert s4.phase is CreateFailurePhase.RETRIES_EXHAUSTED


def test_retry_exhaustion_is_terminal_not_a_fall_through_to_the_next_candidate() -> None:
    """With candidates left, a third retryable answer still ends the walk as RetriesExhausted."""
    s = step(step(step(start([A, B]).walk, 429).walk, 429).walk, 429)
    assert isinstance(s, Failed)
    assert s.phase is CreateFailurePhase.RETRIES_EXHAUSTED
    assert s.walk.candidates_considered == 1


def test_the_walk_records_attempts_candidates_considered_and_last_status() -> None:
    """The wake history keeps how far the walk got, so a failed wake can be diagnosed later (#2541)."""
    s = step(step(step(start([A, B, C]).walk, 400).walk, 503).walk, 403)
    s = step(s.walk, 402)
    assert isinstance(s, Failed)
    assert (s.walk.attempts, s.walk.candidates_considered, s.walk.retries_used) == (4, 3, 1)
    assert s.walk.last_provider_status == 402
    assert s.reason == "ended Aborted after 3 of 3 candidate(s) and 1 retries (last status 402)"


def drive(candidates: list[GpuCandidate], statuses: list[int]) -> tuple[CreateStep, int]:
    current: CreateStep = start(candidates)
    calls = 0
    answers = iter(statuses)
    while isinstance(current, (Post, Wait)):
        calls += 1
        status = next(answers, 201)
        current = step(current.walk, status, pod_id="p" if 200 <= status < 300 else None)
    return current, calls


@settings(max_examples=300, deadline=None)
@given(
    n_candidates=st.integers(min_value=0, max_value=6),
    statuses=st.lists(
        st.sampled_from([0, 200, 201, 202, 301, 400, 402, 403, 404, 409, 422, 429, 500, 502, 503]),
        max_size=20,
    ),
)
def test_total_create_calls_never_exceed_candidates_plus_two(n_candidates: int, statuses: list[int]) -> None:
    """Whatever RunPod answers, the walk ends after at most len(candidates) + 2 POSTs."""
    candidates = [cand(f"gpu-{i}") for i in range(n_candidates)]
    final, calls = drive(candidates, statuses)
    assert isinstance(final, (Created, Failed))
    assert calls <= n_candidates + MAX_CREATE_RETRIES
    assert final.walk.attempts == calls
    assert final.walk.retries_used <= MAX_CREATE_RETRIES


@pytest.mark.parametrize(
    ("volume", "stale", "verdict", "pod_id"),
    [
        pytest.param(
            VolumeLookup(lookup=Lookup.FOUND, pod_ids=("stale-1", "new-1")),
            ("stale-1",),
            RecheckVerdict.ADOPT,
            "new-1",
            id="found-new-pod-is-adopted",
        ),
        pytest.param(
            VolumeLookup(lookup=Lookup.FOUND, pod_ids=("stale-1",)),
            ("stale-1",),
            RecheckVerdict.RETRY,
            None,
            id="found-only-stale-pods-retries",
        ),
        pytest.param(VolumeLookup(lookup=Lookup.NOT_FOUND), (), RecheckVerdict.RETRY, None, id="not-found-retries"),
        pytest.param(VolumeLookup(lookup=Lookup.UNREADABLE), (), RecheckVerdict.FAILED, None, id="unreadable-fails"),
        pytest.param(VolumeLookup(lookup=Lookup.FOUND), (), RecheckVerdict.FAILED, None, id="found-but-empty-fails"),
        pytest.param(
            VolumeLookup(lookup=Lookup.NOT_FOUND, pod_ids=("x",)),
            (),
            RecheckVerdict.FAILED,
            None,
            id="not-found-with-ids-fails",
        ),
    ],
)
def test_the_volume_is_reread_before_a_retry_and_a_new_pod_there_is_adopted(
    volume: VolumeLookup, stale: tuple[str, ...], verdict: RecheckVerdict, pod_id: str | None
) -> None:
    """A gateway 5xx after RunPod committed the create must not bill a second pod; a failed read never posts."""
    recheck = recheck_after_wait(volume, stale_pod_ids=stale)
    assert (recheck.verdict, recheck.pod_id) == (verdict, pod_id)
