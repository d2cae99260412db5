"""Job ids as the pool mints them: UUIDv7 (thermostat.policy.pool.retention.mint_job_id), so an id says when it was
minted (a pruned job's lookup answers that it expired) and the primary key grows at its right edge."""

from __future__ import annotations

import os
from datetime import UTC, datetime

from thermostat.policy.pool.retention import mint_job_id


def new_job_id() -> str:
    """A fresh job id: the wall time's millisecond and 74 random bits."""
    return str(mint_job_id(now=datetime.now(UTC), random=os.urandom(10)))
