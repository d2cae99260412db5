"""Whether the idle monitor watches a named pod: only once the pod controller reports it configured.

The pod-control seed's monitor "exits at startup" while RUNPOD_API_KEY is unset or RUNPOD_VOLUME_ID is blank. In a
service of its own that means its watching stops, not its process: the monitor stays up and SERVING, watches nothing
for the pod, says so once, and keeps asking the controller until the pod is configured (a controller restarted
with the secret in place). Each pod is judged on its own, so a complete pod is watched while an incomplete one
waits.

Every answer of the controller moves the pod's watch along. A line is logged only when the watch changes, so
an operator reads each change once, not once per re-check. Ticking starts the first time the pod is configured
and is never torn down: a controller that later answers unconfigured (restarted without the secret) turns the
watch back to disabled while the ticks decide nothing, and its next configured answer resumes watching.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum


class ControllerAnswer(StrEnum):
    """What the pod controller said when asked about the pod."""

    CONFIGURED = "CONFIGURED"
    UNCONFIGURED = "UNCONFIGURED"
    UNKNOWN_NAME = "UNKNOWN_NAME"  # NOT_FOUND: the two services were given different pod lists
    UNREACHABLE = "UNREACHABLE"  # no answer (down, starting, a blip)


class Watch(StrEnum):
    """Whether the pod is watched; the values are GetMonitorState's `watch`."""

    WAITING = "WaitingForController"
    DISABLED = "DisabledUntilConfigured"
    UNKNOWN_NAME = "UnknownToController"
    WATCHING = "Watching"


class LineLevel(StrEnum):
    INFO = "INFO"
    WARNING = "WARNING"
    ERROR = "ERROR"


_REASONS = {
    Watch.WAITING: "waiting for the pod controller to answer",
    Watch.DISABLED: "disabled until configured: the pod controller reports RUNPOD_API_KEY unset or the pod's "
    "volume id blank",
    Watch.UNKNOWN_NAME: "the pod controller does not know this name (is RUNPOD_PODS the same for both services?)",
    Watch.WATCHING: "",
}


def watch_reason(watch: Watch) -> str:
    """Why the pod is not watched, in words; empty while it is."""
    return _REASONS[watch]


@dataclass(frozen=True, slots=True, kw_only=True)
class PodWatchState:
    """One pod's watch: where it stands, whether ticking has begun, whether the last ask got an answer."""

    watch: Watch = Watch.WAITING
    ticking: bool = False
    reachable: bool = True
    unanswered: int = 0  # asks in a row without an answer, counted before the first answer only


QUIET_ASKS_AT_START = 6
"""Before the controller has ever answered, this many unanswered asks in a row (about 30 s at the monitor's 5 s)
pass without a line: the services start side by side, so the first asks find the controller not yet listening,
and a warning at every start alarmed for nothing (issue 35). A controller still silent after them is said once."""


@dataclass(frozen=True, slots=True, kw_only=True)
class WatchLine:
    """A line for the service to log; it never carries a secret."""

    level: LineLevel
    message: str


@dataclass(frozen=True, slots=True, kw_only=True)
class WatchStep:
    """An answer applied: the new state, whether to start ticking the pod now, and what to log (if anything)."""

    state: PodWatchState
    start_ticking: bool = False
    line: WatchLine | None = None


def after_answer(state: PodWatchState, answer: ControllerAnswer, pod_name: str, detail: str = "") -> WatchStep:
    """Apply one answer of the controller about `pod_name` (`detail`: the gRPC code of an unanswered ask)."""
    if answer is ControllerAnswer.UNREACHABLE:
        # the watch stands as it was: no answer says nothing about configuration. Once ticking, the ticker logs
        # every unanswered tick itself; before, say it once per outage
        line = None
        unanswered = state.unanswered + 1 if state.watch is Watch.WAITING else 0
        starting = state.watch is Watch.WAITING and unanswered < QUIET_ASKS_AT_START
        if state.reachable and not state.ticking and not starting:
            line = WatchLine(
                level=LineLevel.WARNING,
                message=f"pod {pod_name}: the pod controller is not reachable ({detail or 'no answer'}); asking again",
            )
        return WatchStep(state=replace(state, reachable=starting, unanswered=unanswered), line=line)
    watch = {
        ControllerAnswer.CONFIGURED: Watch.WATCHING,
        ControllerAnswer.UNCONFIGURED: Watch.DISABLED,
        ControllerAnswer.UNKNOWN_NAME: Watch.UNKNOWN_NAME,
    }[answer]
    start = watch is Watch.WATCHING and not state.ticking
    after = PodWatchState(watch=watch, ticking=state.ticking or start, reachable=True)
    if watch is state.watch:
        return WatchStep(state=after)
    return WatchStep(state=after, start_ticking=start, line=_changed(pod_name, state.watch, watch))


def _changed(pod_name: str, before: Watch, watch: Watch) -> WatchLine:
    if watch is Watch.WATCHING:
        since = " (configuration appeared)" if before is Watch.DISABLED else ""
        return WatchLine(level=LineLevel.INFO, message=f"pod {pod_name}: configured; watching it{since}")
    if watch is Watch.DISABLED:
        return WatchLine(
            level=LineLevel.WARNING,
            message=f"pod {pod_name}: {watch_reason(watch)}; watching nothing for it until then",
        )
    return WatchLine(level=LineLevel.ERROR, message=f"pod {pod_name}: {watch_reason(watch)}; not watching it")
