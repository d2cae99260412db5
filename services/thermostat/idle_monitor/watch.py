"""This replica's watch of one named pod: ask the pod controller until it reports the pod configured, then start
the pod's ticker. What an answer means is decided by `thermostat.policy.idle.monitor_watch`; this is the shell.

The monitor never reads RUNPOD_API_KEY or a volume id itself: the controller is the one judge of configuration.
The controller reads its configuration once at start, so a secret provisioned later reaches it by a restart of
the controller (under Kubernetes, a Secret's environment is resolved when the container starts); the monitor
needs none — it asks again every MONITOR_RECHECK_SECONDS, and asking about an unconfigured pod costs no RunPod
call. Once ticking, every tick's observation is the controller's answer, so the watch follows a controller that
later loses or regains its configuration without a second loop.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import grpc

from thermostat.chassis.clock import SYSTEM_CLOCK, Clock
from thermostat.chassis.request_context import outgoing_metadata
from thermostat.pods.v1 import pods_pb2, pods_pb2_grpc
from thermostat.policy.idle.monitor_watch import ControllerAnswer, LineLevel, PodWatchState, Watch, after_answer

log = logging.getLogger("thermostat.idle_monitor")

_LEVELS = {LineLevel.INFO: logging.INFO, LineLevel.WARNING: logging.WARNING, LineLevel.ERROR: logging.ERROR}


def answer_of_error(error: grpc.aio.AioRpcError) -> ControllerAnswer:
    """NOT_FOUND is an answer (the controller has no pod of this name); anything else is no answer."""
    return ControllerAnswer.UNKNOWN_NAME if error.code() is grpc.StatusCode.NOT_FOUND else ControllerAnswer.UNREACHABLE


class PodWatch:
    """Whether this replica watches `pod_name`; `start_ticking` runs once, the first time it is configured."""

    def __init__(
        self,
        pod_name: str,
        controller: pods_pb2_grpc.PodControllerInternalStub,
        *,
        recheck_seconds: float,
        controller_timeout: float,
        start_ticking: Callable[[], None],
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.pod_name = pod_name
        self.controller = controller
        self.recheck_seconds = recheck_seconds
        self.controller_timeout = controller_timeout
        self.start_ticking = start_ticking
        self.clock = clock
        self.state = PodWatchState()
        self.asks = 0  # how often this loop asked (tests wait on it instead of sleeping)

    @property
    def watch(self) -> Watch:
        return self.state.watch

    def heard(self, answer: ControllerAnswer, detail: str = "") -> None:
        """Apply one answer (from this loop or from a tick); synchronous, so two answers never interleave."""
        step = after_answer(self.state, answer, self.pod_name, detail)
        self.state = step.state
        if step.line is not None:
            log.log(_LEVELS[step.line.level], "%s", step.line.message)
        if step.start_ticking:
            self.start_ticking()

    async def ask(self) -> None:
        """Ask the controller once. For a configured pod that is one RunPod list call; for any other, none."""
        try:
            reply = await self.controller.ObserveVolume(
                pods_pb2.ObserveVolumeRequest(name=self.pod_name),
                timeout=self.controller_timeout,
                metadata=outgoing_metadata(),
            )
        except grpc.aio.AioRpcError as error:
            self.heard(answer_of_error(error), error.code().name)
        else:
            self.heard(ControllerAnswer.CONFIGURED if reply.configured else ControllerAnswer.UNCONFIGURED)
        finally:
            self.asks += 1

    async def run(self) -> None:
        """Ask every `recheck_seconds` until ticking has begun; the ticks answer from then on."""
        while not self.state.ticking:
            await self.ask()
            if self.state.ticking:
                return
            await self.clock.sleep(self.recheck_seconds)
