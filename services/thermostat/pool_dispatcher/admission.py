"""A submit from the wire to the queue: the catalogue resolved, admission decided (policy/pool/admission.py), the
tenant's budget asked, then the dispatcher's submit. Nothing is queued for a refused submit; a refusal for
budget is recorded as a failed job, so the tenant's record shows what was turned away.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

import grpc

from thermostat.chassis import tracing
from thermostat.policy.pool.admission import RefusalKind, SubmitAsk, SubmitRefusal, admit_submit, over_budget
from thermostat.policy.pool.submit_options import SubmitOptions
from thermostat.pool.v1 import pool_pb2

from .budget_gate import BudgetGate
from .dispatcher import Dispatcher, ShuttingDown
from .metering_repository import PoolMeteringRepository
from .repository import JobView

log = logging.getLogger("thermostat.pool_dispatcher.admission")

TRACE_HEADERS = ("traceparent", "tracestate")
SubmitRequest = pool_pb2.SubmitJobRequest | pool_pb2.SubmitJobJsonRequest | pool_pb2.SubmitJobSyncRequest


def grpc_code(refusal: SubmitRefusal) -> grpc.StatusCode:
    """The status a refused submit's call ends with (a stream's job is answered with it)."""
    return grpc.StatusCode[refusal.kind.grpc_code]


def ask_of(request: SubmitRequest, *, sync: bool) -> SubmitAsk:
    """A submit request's parameters as admission reads them (only a sync request has wait_seconds)."""
    return SubmitAsk(
        machine_type=request.machine_type,
        priority=request.priority,
        session_id=request.session_id,
        timeout_seconds=request.timeout_seconds,
        wait_seconds=request.wait_seconds if isinstance(request, pool_pb2.SubmitJobSyncRequest) else "",
        payload_bytes=len(request.payload.data),
        sync=sync,
    )


class Admission:
    """Admits and queues submits for the dispatcher, asking the budget gate and recording its refusals."""

    def __init__(self, dispatcher: Dispatcher, gate: BudgetGate, metering: PoolMeteringRepository) -> None:
        self.dispatcher = dispatcher
        self.gate = gate
        self.metering = metering

    async def admit(
        self,
        request: SubmitRequest,
        tenant: str,
        metadata: Mapping[str, str],
        *,
        sync: bool,
        remaining: Callable[[], float | None],
    ) -> tuple[JobView, SubmitOptions] | SubmitRefusal:
        """The job queued for the tenant, or why not (nothing queued): every submit's checks past the caller's."""
        if self.dispatcher.draining:  # a deploy's shutdown began here: the caller retries, another replica takes it
            return SubmitRefusal(RefusalKind.SHUTTING_DOWN, str(ShuttingDown(self.dispatcher.instance_id)))
        ask = ask_of(request, sync=sync)
        if ask.machine_type and self.dispatcher.catalogues.catalogue.get(ask.machine_type) is None:
            # another replica's catalogue write may name it
            await self.dispatcher.catalogues.type_named(ask.machine_type)
        admitted = admit_submit(
            ask,
            catalogue=self.dispatcher.catalogues.catalogue,
            unservable=self.dispatcher.kinds.refusal,
            max_payload_bytes=self.dispatcher.max_payload_bytes,
        )
        if isinstance(admitted, SubmitRefusal):
            return admitted
        options = admitted.options
        reason = await self.gate.refusal(tenant)
        if reason is not None:  # nothing queued, nothing started; the refusal is a failed job on the record
            job_id = await self.metering.record_refused_submit(
                tenant_id=tenant,
                machine_type=options.machine_type.name,
                priority=options.priority,
                session_id=options.session_id,
                timeout_seconds=options.timeout_seconds,
                error=reason,
            )
            log.warning("submit refused for budget: job %s: %s", job_id, reason)
            return over_budget(reason, job_id)
        # kept with the job: its later spans (queue, boot, execute) sit under this call's span, or the caller's
        trace = tracing.current_headers({n: metadata[n] for n in TRACE_HEADERS if metadata.get(n)})
        try:
            job = await self.dispatcher.submit(
                tenant_id=tenant,
                options=options,
                payload=request.payload.data,
                trace=trace,
                waiting=sync,
                remaining=remaining(),
            )
        except ShuttingDown as refused:  # the drain began while this submit was being admitted
            return SubmitRefusal(RefusalKind.SHUTTING_DOWN, str(refused))
        return job, options
