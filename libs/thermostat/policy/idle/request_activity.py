"""Requests through the inference gateway as evidence of work, beside what the engine's /metrics says (issue 34).

The monitor samples the engine's gauges once a tick, and the work counter (#2075) closes the hole only where the
exposition has one. The gateway sees every request it forwards, so it reports exact counts (per gateway replica, in
the store, for every monitor replica): how many are in flight now and how many starts and ends it has seen. On a
tick:

- a request in flight through the gateway ⇒ busy, whatever the gauges sampled;
- starts or ends seen since the previous tick ⇒ busy: a chat turn that began and ended between two ticks;
- no baseline yet but requests already seen ⇒ busy, once: the tick seeds the baseline and banks no idle evidence;
- the counts unreadable (store or gateway absent) ⇒ no evidence either way; the baseline is kept, so requests made
  meanwhile still count on the next readable tick.

The evidence only ever turns an answering pod's Idle into Busy, and UnreachableButRunning (the engine answered the
gateway, not the scrape) only while the pod is Ready; it never makes a pod that is down or booting look up. A running
pod whose engine still loads reads UnreachableButRunning too, and a request counted while it loads (a warm forward
that met the stopped pod's proxy, a stream the engine refused) did not reach an engine: read as Busy there it took a
loading pod to Ready, and its idle window then stopped it mid-load (CI, stop 39). Only the direction of the count is
used.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from thermostat.policy.idle.pod_signal import AggregateSignal, PodSignal


class RequestReason(StrEnum):
    """RequestReason names the rule that read the gateway's counts."""

    IN_FLIGHT = "REQUESTS_IN_FLIGHT"
    SINCE_LAST_TICK = "REQUESTS_SINCE_LAST_TICK"
    NO_BASELINE = "REQUESTS_NO_BASELINE"
    NONE_SINCE_LAST_TICK = "NO_REQUESTS_SINCE_LAST_TICK"
    UNREAD = "REQUESTS_UNREAD"


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestCounts:
    """RequestCounts is every gateway replica's report for one pod: requests in flight now (reports still live)
    and the starts and ends seen in all."""

    in_flight: int
    events: int


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestVerdict:
    """RequestVerdict is the gateway's evidence for one tick and the baseline the next tick compares to."""

    busy: bool
    reason: RequestReason
    baseline: int | None


def classify_requests(counts: RequestCounts | None, baseline: int | None) -> RequestVerdict:
    """Read the gateway's counts against the previous tick's (`baseline`; None when none was taken)."""
    if counts is None:
        return RequestVerdict(busy=False, reason=RequestReason.UNREAD, baseline=baseline)
    if counts.in_flight > 0:
        return RequestVerdict(busy=True, reason=RequestReason.IN_FLIGHT, baseline=counts.events)
    if baseline is None:
        busy = counts.events > 0
        reason = RequestReason.NO_BASELINE if busy else RequestReason.NONE_SINCE_LAST_TICK
        return RequestVerdict(busy=busy, reason=reason, baseline=counts.events)
    if counts.events != baseline:
        return RequestVerdict(busy=True, reason=RequestReason.SINCE_LAST_TICK, baseline=counts.events)
    return RequestVerdict(busy=False, reason=RequestReason.NONE_SINCE_LAST_TICK, baseline=baseline)


def with_requests(aggregate: AggregateSignal, verdict: RequestVerdict, *, ready: bool) -> AggregateSignal:
    """The volume's signal with the gateway's evidence (`ready`: the phase is Ready): an answering pod read idle is
    busy when requests say so, and an unscraped one only once it is Ready."""
    answering = aggregate.signal is PodSignal.IDLE or (ready and aggregate.signal is PodSignal.UNREACHABLE_BUT_RUNNING)
    if verdict.busy and answering:
        return AggregateSignal(signal=PodSignal.BUSY, pod_id=aggregate.pod_id)
    return aggregate
