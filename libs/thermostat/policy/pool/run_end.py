"""Run end: what follows when one machine's run ends (the runner's coordinator carries it out).

A run sends jobs to one machine until it has no next one, and says how it ended:

    freed         the machine is warm here with no next job: the key's next submit may claim it (a batch of it
                  still gathering goes out now), and under a fleet cap placement runs (the slot may be a waiting
                  tenant's). Freed after its completion while a batch of the key was out: placement runs once the
                  batch answered (each statement committed unseen by the other). Freed before its job was sent (a
                  cancel or a takeover won the send): it asks for the next job itself, while its image is the type's.
    retired       the completion set it stopping: it is stopped and forgotten; if its slot went to a tenant waiting
                  at the fleet cap (fair share), placement runs once the row is gone.
    handed back   its machine could not be reached before the job went out, and the job is queued again in its
                  place (thermostat.policy.pool.hand_back): placement runs at once (the tenant's slot is free), the
                  machine is stopped, and placement runs again (the fleet's slot, once the row is gone).
    lost          this process no longer holds it (reclaimed, or its address is gone): nothing follows here.
    requeued      its job was not sent (the lease's trust lapsed) and waits in the queue again: nothing follows.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Ended(StrEnum):
    FREED = "freed"
    RETIRED = "retired"
    HANDED_BACK = "handed_back"
    LOST = "lost"
    REQUEUED = "requeued"


@dataclass(frozen=True, slots=True, kw_only=True)
class AfterRun:
    offer: bool = False  # the key's next submit may claim it; under a fleet cap placement runs
    place_after_batches: bool = False  # placement runs once the key's batches out answered
    take_next: bool = False  # it asks for its next job itself and runs on
    stop: bool = False  # stopped at its provider and forgotten
    place_before_stop: bool = False
    place_after_stop: bool = False


NOTHING = AfterRun()


def after_run(
    ended: Ended, *, unsent: bool = False, batch_raced: bool = False, yielded: bool = False, image_current: bool = True
) -> AfterRun:
    """What follows a run that ended so. `unsent`: freed before its job went out; `batch_raced`: a batch of the key
    went out during its completion; `yielded`: its slot went to a waiting tenant; `image_current`: the type's image
    is still the machine's."""
    if ended is Ended.FREED:
        if unsent:
            return AfterRun(offer=True, take_next=image_current)
        return AfterRun(offer=True, place_after_batches=batch_raced)
    if ended is Ended.RETIRED:
        return AfterRun(stop=True, place_after_stop=yielded)
    if ended is Ended.HANDED_BACK:
        return AfterRun(stop=True, place_before_stop=True, place_after_stop=True)
    return NOTHING
