"""Adoption: which billable call the record misses for a pod RunPod bills, after a wake was abandoned.

A replica killed between issuing a start or a create and recording it leaves RunPod billing a pod no call on
record started: the next wake (the one that closed the abandoned wake) finds the pod serving and answers with
it, and would otherwise leave the ledger blind to its billing. Judged from the last accepted call on record
naming the pod:

    none            the pod was never on record: the abandoned wake created it  → record a Create
    Stop/Terminate  the record says it stopped: the abandoned wake started it   → record a Start
    (or Gone)
    Create/Start    the record already says it bills                             → nothing

Only after an abandoned wake: a pod running with no call on record otherwise (made by hand, or before
Thermostat) stays off the record, which lists the calls issued. A wake abandoned without a call in flight (its
store stopped answering, so it never completed) cannot be told apart: a hand-made pod it answered with is then
adopted too, and bills on the record from then on, which is what RunPod charges; the detail says it was adopted.
"""

from __future__ import annotations

from enum import StrEnum

ADOPTED_DETAIL = (
    "adopted: RunPod bills this pod and no call on record started it; the wake before this one was abandoned "
    "(its replica or its store stopped) and may have issued it"
)


class Adopted(StrEnum):
    CREATE = "Create"
    START = "Start"


def unrecorded_call(last_accepted_action: str | None) -> Adopted | None:
    """The call to record for a billing pod, given the last accepted call on record naming it; None: none."""
    if last_accepted_action is None:
        return Adopted.CREATE
    if last_accepted_action in ("Stop", "Terminate", "Gone"):
        return Adopted.START
    return None
