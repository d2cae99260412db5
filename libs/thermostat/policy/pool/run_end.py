"""Run end: what follows when one machine's run ends (the runner carries it out; rules in `after_run`).

- freed: the key's next submit may claim the machine, and under a fleet cap placement runs now (the slot may be a
  waiting tenant's); after a completion a
  batch of the key raced, placement runs once the batch answered; freed before its job was sent (a cancel or a
  takeover won), it takes its next job itself while its image is the type's;
- retired: stopped and forgotten; placement runs after if its slot went to a tenant waiting at the fleet cap;
- handed back (thermostat.policy.pool.hand_back): placement runs, the machine stops, placement runs again;
- lost (no longer this process's) or requeued (its job not sent): nothing follows here.
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
    place_after_batches: bool = False  # placement runs once the key's batches out answered
    offer: bool = False  # the key's next submit may claim it
    place_now: bool = False
    take_next: bool = False  # it asks for its next job itself and runs on
    stop: bool = False  # stopped at its provider and forgotten
    place_after_stop: bool = False


def after_run(
    ended: Ended,
    *,
    unsent: bool = False,
    batch_raced: bool = False,
    yielded: bool = False,
    image_current: bool = True,
    capped: bool = False,
) -> AfterRun:
    """What follows a run that ended so, in the order of AfterRun's fields. `unsent`: freed before its job went out;
    `batch_raced`: a batch of the key went out during its completion; `yielded`: its slot went to a waiting tenant;
    `image_current`: the type's image is still the machine's; `capped`: the pool has a fleet cap."""
    if ended is Ended.FREED:
        if unsent:
            return AfterRun(offer=True, place_now=capped, take_next=image_current)
        return AfterRun(place_after_batches=batch_raced, offer=True, place_now=capped)
    if ended is Ended.RETIRED:
        return AfterRun(stop=True, place_after_stop=yielded)
    if ended is Ended.HANDED_BACK:
        return AfterRun(place_now=True, stop=True, place_after_stop=True)
    return AfterRun()
