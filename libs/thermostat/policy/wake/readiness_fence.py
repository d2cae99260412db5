"""Whether the idle monitor's readiness report is still about the pod's current process.

The monitor publishes readySince for the process it saw answer, but its report travels on its own: one
observed before a stop can land after RunPod accepted that stop (and after the stop cleared readiness), or
after the same pod id was woken again — RunPod reuses ids across stop/start. Taken, it would show the old
readySince for a stopped pod, or "usable" while the new process still loads the model, until the monitor's
next tick noticed. The report carries the pod's incarnation on the observe that saw it answer (the position
of the newest start, create, stop or terminate RunPod accepted for the id); the controller compares it with
the incarnation on record when it writes:

    reported incarnation           on record      → the publish
    -----------------------------  -------------  ---------------------------------------------------------
    n                              n              stands (nothing began or ended the process since)
    n                              m > n          refused: the process it is about ended (stopped, restarted)
    n                              m < n          stands (no newer action on record than the report's)
    unset                          any            stands, unchecked: a monitor that predates the field, or an
                                                  observe made while the controller could not read its
                                                  records; the monitor's own incarnation check clears a stale
                                                  one on its next tick, as before the fence
"""

from __future__ import annotations


def readiness_report_stands(reported: int | None, on_record: int) -> bool:
    """Whether a readiness publish observed at incarnation `reported` may be written (module table)."""
    return reported is None or on_record <= reported
