"""ORPHAN_SWEEP, shared by the services that own a provider (issue 12, "Orphan sweep")."""

from __future__ import annotations

from enum import StrEnum


class OrphanSweep(StrEnum):
    """ORPHAN_SWEEP: `report` (the default) logs and counts orphans; `terminate` also ends them."""

    REPORT = "report"
    TERMINATE = "terminate"
