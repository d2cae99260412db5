"""The create-attempt walk: one POST /v2/pods per step over the ranked candidates (pod-control seed: Wake part 1b).

`classify` reads one answer:

    2xx                      Created             (any 2xx: the pod exists and bills, an off-spec 200/202
                                                  must not orphan it; without a pod id it is Failed)
    400, 403                 TryNextCandidate    (per-GPU: this card can't be placed)
    402, 422                 Abort               (account / request problem: no card will do better)
    429, 5xx                 RetrySameCandidate  (account-level rate limit or an outage, not per-GPU)
    0 and anything else      Abort               (0 is a transport failure: a create that timed out may
                                                  have placed a pod, so it is never retried blind)

The walk, as a table (state = candidate index i, retries used r of MAX_CREATE_RETRIES):

    start(candidates)        none → Failed(NoCandidates) · else Post(c[0])
    Created + pod id         Created(pod id, c[i])
    Created, no pod id       Failed(CreatedWithoutId) — "created without id": it can't be polled or
                             terminated, so the walk stops rather than bill a second pod
    TryNextCandidate         i+1 < n → Post(c[i+1]) · else Failed(Exhausted)
    RetrySameCandidate       r < 2 → Wait(min(Retry-After ?? poll, max), c[i]), r+1 · else Failed(RetriesExhausted)
    Abort                    Failed(Aborted)

The retry budget is ONE budget for the whole walk, never refilled on a candidate change, and its exhaustion
is terminal rather than a fall-through to the next candidate: a 429 or a 5xx says nothing about the GPU.
Every POST either advances i, spends a retry or ends the walk, so total calls <= candidates + 2.

After a Wait the caller re-reads the volume (`recheck_after_wait`) before it posts the same candidate again:
a gateway 5xx after RunPod committed the create must not bill a second pod.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum

from thermostat.policy.common.pod_model import CreateResult, Lookup, VolumeLookup
from thermostat.policy.wake.gpu_selection import GpuCandidate

MAX_CREATE_RETRIES = 2


class CreateOutcome(StrEnum):
    """CreateOutcome is what one create answer means for the walk."""

    CREATED = "Created"
    TRY_NEXT_CANDIDATE = "TryNextCandidate"
    RETRY_SAME_CANDIDATE = "RetrySameCandidate"
    ABORT = "Abort"


class CreateFailurePhase(StrEnum):
    """CreateFailurePhase is where a walk that created nothing usable ended."""

    NO_CANDIDATES = "NoCandidates"
    EXHAUSTED = "Exhausted"
    RETRIES_EXHAUSTED = "RetriesExhausted"
    ABORTED = "Aborted"
    CREATED_WITHOUT_ID = "CreatedWithoutId"


def classify(status: int) -> CreateOutcome:
    """Map a POST /v2/pods HTTP status (0 for a transport failure) to what the walk does next."""
    if 200 <= status < 300:
        return CreateOutcome.CREATED
    if status in (400, 403):
        return CreateOutcome.TRY_NEXT_CANDIDATE
    if status == 429 or 500 <= status < 600:
        return CreateOutcome.RETRY_SAME_CANDIDATE
    return CreateOutcome.ABORT


@dataclass(frozen=True, slots=True, kw_only=True)
class CreateWalk:
    """CreateWalk is the walk's state, and what the wake history records of it (#2541).

    `candidates_considered` counts distinct candidates posted; `attempts` counts POSTs answered.
    """

    candidates: tuple[GpuCandidate, ...]
    index: int = 0
    retries_used: int = 0
    attempts: int = 0
    candidates_considered: int = 0
    last_provider_status: int | None = None

    @property
    def current(self) -> GpuCandidate:
        return self.candidates[self.index]


@dataclass(frozen=True, slots=True, kw_only=True)
class Post:
    """Post: POST /v2/pods on `candidate`, then `advance(walk, result)`."""

    walk: CreateWalk
    candidate: GpuCandidate


@dataclass(frozen=True, slots=True, kw_only=True)
class Wait:
    """Wait `seconds`, re-read the volume (`recheck_after_wait`), then post `candidate` again."""

    walk: CreateWalk
    candidate: GpuCandidate
    seconds: float


@dataclass(frozen=True, slots=True, kw_only=True)
class Created:
    """Created: `pod_id` exists on `candidate`'s GPU and bills; poll it until it serves."""

    walk: CreateWalk
    candidate: GpuCandidate
    pod_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Failed:
    """Failed: the walk ended without a usable pod; `reason` goes into the 409 detail."""

    walk: CreateWalk
    phase: CreateFailurePhase
    reason: str


CreateStep = Post | Wait | Created | Failed


def start(candidates: Sequence[GpuCandidate]) -> Post | Failed:
    """Begin at the first-ranked (cheapest) candidate; no candidates ends the walk before any POST."""
    walk = CreateWalk(candidates=tuple(candidates))
    if not walk.candidates:
        return Failed(walk=walk, phase=CreateFailurePhase.NO_CANDIDATES, reason="no eligible GPU")
    return Post(walk=walk, candidate=walk.current)


def advance(
    walk: CreateWalk,
    result: CreateResult,
    *,
    poll_interval_seconds: float,
    max_retry_after_seconds: float,
) -> CreateStep:
    """Fold one POST answer on `walk.current` into the walk and say what to do next."""
    walk = replace(
        walk,
        attempts=walk.attempts + 1,
        candidates_considered=max(walk.candidates_considered, walk.index + 1),
        last_provider_status=result.http_status,
    )
    match classify(result.http_status):
        case CreateOutcome.CREATED:
            pod_id = (result.pod_id or "").strip()
            if not pod_id:
                return _failed(walk, CreateFailurePhase.CREATED_WITHOUT_ID, "created without id")
            return Created(walk=walk, candidate=walk.current, pod_id=pod_id)
        case CreateOutcome.TRY_NEXT_CANDIDATE:
            if walk.index + 1 >= len(walk.candidates):
                return _failed(walk, CreateFailurePhase.EXHAUSTED)
            walk = replace(walk, index=walk.index + 1)
            return Post(walk=walk, candidate=walk.current)
        case CreateOutcome.RETRY_SAME_CANDIDATE:
            if walk.retries_used >= MAX_CREATE_RETRIES:
                return _failed(walk, CreateFailurePhase.RETRIES_EXHAUSTED)
            walk = replace(walk, retries_used=walk.retries_used + 1)
            seconds = _retry_wait(result.retry_after_seconds, poll_interval_seconds, max_retry_after_seconds)
            return Wait(walk=walk, candidate=walk.current, seconds=seconds)
        case CreateOutcome.ABORT:
            return _failed(walk, CreateFailurePhase.ABORTED)


def _retry_wait(retry_after: float | None, poll_interval: float, max_retry_after: float) -> float:
    wanted = retry_after if retry_after is not None and math.isfinite(retry_after) else poll_interval
    return max(0.0, min(wanted, max_retry_after))


def _failed(walk: CreateWalk, phase: CreateFailurePhase, what: str | None = None) -> Failed:
    # Same shape as the 2026-09-11 log line, so an operator reads how far the walk got (#2093).
    progress = (
        f"after {walk.candidates_considered} of {len(walk.candidates)} candidate(s) "
        f"and {walk.retries_used} retries (last status {walk.last_provider_status})"
    )
    reason = f"{what}: ended {phase} {progress}" if what else f"ended {phase} {progress}"
    return Failed(walk=walk, phase=phase, reason=reason)


class RecheckVerdict(StrEnum):
    """RecheckVerdict is what the volume re-read before a retried POST allows."""

    ADOPT = "Adopt"
    RETRY = "Retry"
    FAILED = "Failed"


@dataclass(frozen=True, slots=True, kw_only=True)
class RetryRecheck:
    verdict: RecheckVerdict
    reason: str
    pod_id: str | None = None


def recheck_after_wait(volume: VolumeLookup, *, stale_pod_ids: Collection[str]) -> RetryRecheck:
    """Adopt a pod that appeared on the volume, retry only on an affirmative answer, fail on anything else.

    A pod listed on our volume that is not one of the stale ids is the replacement a gateway 5xx hid from us:
    adopt it rather than bill a second pod. Only a readable answer may lead to another POST: Unreadable (and
    a self-contradicting answer) fails the wake, like the step-1 lookup.
    """
    stale = frozenset(stale_pod_ids)
    if volume.lookup is Lookup.UNREADABLE:
        return RetryRecheck(
            verdict=RecheckVerdict.FAILED,
            reason="volume lookup unreadable after a failed create; not posting again",
        )
    if volume.lookup is Lookup.NOT_FOUND and not volume.pod_ids:
        return RetryRecheck(verdict=RecheckVerdict.RETRY, reason="no pod on the volume; retrying the create")
    if volume.lookup is Lookup.FOUND and volume.pod_ids:
        for pod_id in volume.pod_ids:
            if pod_id not in stale:
                return RetryRecheck(
                    verdict=RecheckVerdict.ADOPT,
                    pod_id=pod_id,
                    reason=f"adopted {pod_id}, found on the volume after a failed create",
                )
        return RetryRecheck(verdict=RecheckVerdict.RETRY, reason="only stale pods on the volume; retrying")
    return RetryRecheck(
        verdict=RecheckVerdict.FAILED,
        reason=f"volume lookup {volume.lookup} with {len(volume.pod_ids)} pod(s) is inconsistent; not posting",
    )
