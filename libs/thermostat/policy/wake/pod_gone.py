"""A pod on the record that no longer exists: confirmed gone, its billing is closed (issue 35).

Restarting `make run` while a pod ran, the RunPod simulator forgot it; in production someone terminates a pod in
RunPod's console. Either way no call of ours stopped it, so the billable-action record kept it billing, and
metering's interval stayed open for ever (0.38 of a 0.48 USD quick-start budget in 14 minutes). A pod is judged
gone only on two affirmative answers, never on a failed read (pod-control seed: "a failed lookup is Unreadable,
never NotFound"):

    the record bills it      a readable volume lookup lists it      its observe by id      verdict
    yes                      no (FOUND without it, or NOT_FOUND)    NOT_FOUND              gone: record it
    yes                      no                                     anything else          not judged
    yes                      yes, or the lookup is UNREADABLE       —                      not judged (not asked)
    no                       —                                      —                      nothing to close

The two answers guard each other: a pod just created may not be listed yet (the seed's "not-yet-listed"), and a
permission-scoped key or a misrouted 404 answers an observe NotFound for a live pod (the seed's 2a invariant).
"Gone" is then a record of its own in the billable-action feed, appended at the observation; the record writes it
only while the pod's last billing call on record opens its billing, so it closes the interval exactly once
(metering's pod_spend reads it as a close).
"""

from __future__ import annotations

from collections.abc import Iterable

from thermostat.policy.common.pod_model import Lookup, PodObservation, VolumeLookup

GONE = "Gone"
"""The billable-action record of a pod confirmed gone."""
OBSERVED = "observe"
"""Its trigger: a reading of the volume found it gone, no call of ours."""
GONE_DETAIL = "gone: a readable volume lookup did not list it and RunPod answered its id NotFound"


def unlisted(volume: VolumeLookup, billing: Iterable[str]) -> tuple[str, ...]:
    """The pods the record bills that a readable lookup of the volume does not list: each to be observed by id.
    Nothing after an unreadable lookup (a failed read says nothing about a pod)."""
    if volume.lookup is Lookup.UNREADABLE:
        return ()
    listed = set(volume.pod_ids)
    return tuple(dict.fromkeys(pod_id for pod_id in billing if pod_id and pod_id not in listed))


def confirmed_gone(observation: PodObservation) -> bool:
    """An unlisted pod whose observe by id answers NotFound (RunPod's problem-details 404) is gone."""
    return observation.lookup is Lookup.NOT_FOUND
