"""The PoolDispatcher servicer: each call resolved, decided by a policy, carried out by the dispatcher, answered.

Its caller was checked before it runs: the chassis enforces the pool's token and tenant rules (access.py) in
the worker-pool seed's order, the token (401) before the tenant header (400), and hands over who was admitted
(`chassis.auth.caller()`). The parameters come next (INVALID_ARGUMENT with `x-http-code: 422`), a submit's
through admission (admission.py). The seed's JSON is written by views.py; statuses gRPC has no code for are
named with `x-http-code`, which the edge's Lua filter applies (replies.py).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from typing import NoReturn

import grpc
from google.api import httpbody_pb2

from thermostat.chassis.auth import caller
from thermostat.chassis.tenancy import scope
from thermostat.chassis.text_fields import Refused
from thermostat.policy.common.strict_json import BodyError, BodyField, JsonKind
from thermostat.policy.pool.admission import SubmitRefusal
from thermostat.policy.pool.cancel import BuildIdError, validate_build_id
from thermostat.policy.pool.job_batch import read_job_batch
from thermostat.policy.pool.jobs import TERMINAL_STATES, JobState
from thermostat.policy.pool.machine_type import Catalogue, catalogue_to_json, parse_catalogue_json
from thermostat.policy.pool.redaction import keep_redacted
from thermostat.policy.pool.retention import DEFAULT_RETENTION_HOURS, missing_job_detail
from thermostat.policy.pool.submit_options import SubmitError, SubmitErrorKind
from thermostat.pool.v1 import pool_pb2, pool_pb2_grpc

from .admission import TRACE_HEADERS, Admission, SubmitRequest, grpc_code
from .budget_gate import BudgetGate
from .dispatcher import Dispatcher, ShuttingDown
from .metering_repository import PoolMeteringRepository
from .orphan_sweep import OrphanSweeper
from .replies import abort, read_body, status
from .repository import JobView, UsageView
from .settings import GRPC_MESSAGE_BYTES
from .sync_jobs import FAILED_STATUS, StreamLimits, SyncJobs
from .typed import machine_type_message, submit_request, sync_request, typed_detail
from .views import (
    body,
    health_json,
    job_json,
    job_message,
    json_body,
    orphans_json,
    usage_json,
    usage_message,
    worker_json,
    workers_message,
)

log = logging.getLogger("thermostat.pool_dispatcher.servicer")

DEFAULT_USAGE_PAGE = 100
MAX_USAGE_PAGE = 1000
# the REST bodies, read strictly: a field they do not name is 400, never dropped
CANCEL_BODY = (BodyField("build_id", JsonKind.STRING),)
HINT_BODY = (BodyField("machine_type", JsonKind.STRING),)
STREAM_JOBS = 64
"""Requests of one RunJobs stream in flight (read, not yet answered): at the cap the stream is not read."""
BATCH_RESULT_BYTES = GRPC_MESSAGE_BYTES - 2 * 1024 * 1024
"""The base64 results one batch's answer carries at first (job_batch.results_carried), 31 MiB: the answer's other
fields usually fit the message's last 2 MiB (64 entries, each a job JSON with a 1,000-character error and a
256-character tenant and session, every character escaped: under 20 KiB)."""
BATCH_ANSWER_BYTES = GRPC_MESSAGE_BYTES - 64 * 1024
"""The most a batch's JSON answer may be (the HttpBody's other fields fit the rest of the message): an answer over
it, the other fields having outgrown their 2 MiB (a refusal's detail lists the whole catalogue), carries fewer
results until it fits."""

UsageRequest = pool_pb2.ListUsageRequest | pool_pb2.ListUsageJsonRequest


def _tenant() -> str:
    """The tenant the chassis's tenant rule read for this call (every method acting for a tenant has one)."""
    tenant = caller().tenant
    if tenant is None:
        raise LookupError("this method has no tenant rule: declare one in access.py")
    return tenant


def _trace_headers(context: grpc.aio.ServicerContext) -> dict[str, str]:
    """The caller's trace headers, all a submit keeps of its metadata (the chassis read the token and tenant)."""
    return {k.lower(): v for k, v in context.invocation_metadata() if isinstance(v, str) and k.lower() in TRACE_HEADERS}


class PoolDispatcherServicer(pool_pb2_grpc.PoolDispatcherServicer):  # type: ignore[misc]
    def __init__(
        self,
        dispatcher: Dispatcher,
        gate: BudgetGate | None = None,
        metering: PoolMeteringRepository | None = None,
        orphans: OrphanSweeper | None = None,
        *,
        stream_jobs: int = STREAM_JOBS,
        stream_full: Callable[[], Awaitable[None]] | None = None,
        batch_result_bytes: int = BATCH_RESULT_BYTES,
        batch_answer_bytes: int = BATCH_ANSWER_BYTES,
        retention: timedelta = timedelta(hours=DEFAULT_RETENTION_HOURS),
    ) -> None:
        self.dispatcher = dispatcher
        self.jobs, self.machines = dispatcher.repo.jobs, dispatcher.repo.machines  # what it reads, by aggregate
        self.retention = retention
        self.orphans = orphans
        self.gate = gate or BudgetGate(None)
        self.admission = Admission(dispatcher, self.gate, metering or PoolMeteringRepository(dispatcher.repo.pool))
        limits = StreamLimits(
            stream_jobs=stream_jobs,
            stream_full=stream_full,
            batch_result_bytes=batch_result_bytes,
            batch_answer_bytes=batch_answer_bytes,
        )
        self.sync_jobs = SyncJobs(dispatcher, self.admission, limits)

    async def _job_id(self, context: grpc.aio.ServicerContext, raw: str) -> str:
        try:
            return str(uuid.UUID(raw))
        except ValueError:
            await abort(context, grpc.StatusCode.NOT_FOUND, "no such job", 404)

    async def _missing(self, context: grpc.aio.ServicerContext, job_id: str) -> NoReturn:
        """404 for a job the store does not hold (for this tenant): expired when retention may have pruned it."""
        detail = missing_job_detail(uuid.UUID(job_id), now=self.dispatcher.clock.now(), retention=self.retention)
        await abort(context, grpc.StatusCode.NOT_FOUND, detail, 404)

    async def _submit(self, request: SubmitRequest, context: grpc.aio.ServicerContext) -> JobView:
        admitted = await self.admission.admit(
            request, _tenant(), _trace_headers(context), sync=False, remaining=context.time_remaining
        )
        if isinstance(admitted, SubmitRefusal):
            await abort(context, grpc_code(admitted), admitted.detail, admitted.http)
        return admitted[0]

    # jobs: the typed contract (typed.py), then the deprecated gRPC submits and the REST ones

    async def CreateJob(self, request: pool_pb2.CreateJobRequest, context: grpc.aio.ServicerContext) -> pool_pb2.Job:
        admitted = await self.admission.admit(
            submit_request(request), _tenant(), _trace_headers(context), sync=False, remaining=context.time_remaining
        )
        if isinstance(admitted, SubmitRefusal):
            await abort(context, grpc_code(admitted), typed_detail(admitted.detail), admitted.http)
        return job_message(admitted[0])

    async def RunJob(
        self, request: pool_pb2.RunJobRequest, context: grpc.aio.ServicerContext
    ) -> pool_pb2.RunJobResponse:
        tenant = _tenant()
        finished = await self.sync_jobs.submit_and_wait(
            sync_request(request), tenant, _trace_headers(context), context.time_remaining
        )
        if isinstance(finished, SubmitRefusal):
            await abort(context, grpc_code(finished), typed_detail(finished.detail), finished.http)
        job = finished.job
        if job.state in TERMINAL_STATES and job.completed_at is None:
            job = await self.jobs.get_job(job.id, tenant) or job  # another replica's notice names only the state
        if job.state is not JobState.COMPLETED:
            return pool_pb2.RunJobResponse(job=job_message(job))
        result = await self.sync_jobs.result(job, finished.result)
        return pool_pb2.RunJobResponse(job=job_message(job), result=result)

    async def ListMachineTypes(
        self, request: pool_pb2.ListMachineTypesRequest, context: grpc.aio.ServicerContext
    ) -> pool_pb2.ListMachineTypesResponse:
        await self.dispatcher.catalogues.refresh()
        entries = catalogue_to_json(self.dispatcher.catalogues.catalogue, admin=caller().elevated)
        return pool_pb2.ListMachineTypesResponse(machine_types=[machine_type_message(e) for e in entries])

    async def SubmitJob(self, request: pool_pb2.SubmitJobRequest, context: grpc.aio.ServicerContext) -> pool_pb2.Job:
        job = await self._submit(request, context)
        await status(context, 202)
        return job_message(job)

    async def SubmitJobJson(
        self, request: pool_pb2.SubmitJobJsonRequest, context: grpc.aio.ServicerContext
    ) -> httpbody_pb2.HttpBody:
        job = await self._submit(request, context)
        await status(context, 202)
        return json_body(job_json(job))

    async def SubmitJobSync(
        self, request: pool_pb2.SubmitJobSyncRequest, context: grpc.aio.ServicerContext
    ) -> httpbody_pb2.HttpBody:
        finished = await self.sync_jobs.submit_and_wait(
            request, _tenant(), _trace_headers(context), context.time_remaining
        )
        if isinstance(finished, SubmitRefusal):
            await abort(context, grpc_code(finished), finished.detail, finished.http)
        return await self._answer(context, finished.job, await_result=True, result=finished.result)

    async def _answer(
        self, context: grpc.aio.ServicerContext, job: JobView, *, await_result: bool, result: bytes | None = None
    ) -> httpbody_pb2.HttpBody:
        """The job's result (read unless given), its failure body, or 202 with the job while it runs. The job's id
        and state go in the trailing metadata: they ride with the answer's final batch, where initial metadata
        of their own would cost every completed job a batch more (bench/pool_dispatch_overhead.py: ~0.2 ms and
        ~8 % of a dispatcher's CPU per job). A non-200 answer sends initial metadata anyway (the edge's HTTP
        code), and the job's headers ride there too, so a REST caller of a 202/409/502/504 can name the job."""
        state = job.state
        named = (("x-pool-job-id", job.id), ("x-pool-job-state", job.state))
        context.set_trailing_metadata(named)
        if state is JobState.COMPLETED:
            return body(await self.sync_jobs.result(job, result))
        if state in FAILED_STATUS:
            failure: dict[str, str | None] = {"state": job.state}
            if state is not JobState.CANCELLED:
                failure["error"] = job.error
            await status(context, FAILED_STATUS[state], extra=named)
            return json_body(failure)
        if not await_result:
            await abort(context, grpc.StatusCode.ABORTED, f"job {job.id} is {job.state}, not finished", 409)
        await status(context, 202, extra=named)
        return json_body(job_json(job))

    async def RunJobs(
        self, requests: AsyncIterator[pool_pb2.RunJobsRequest | Refused], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pool_pb2.RunJobsResponse]:
        """Each request as SubmitJobSync, at most `stream_jobs` in flight, answered as each finishes (sync_jobs.py)."""
        async for response in self.sync_jobs.stream(requests, _tenant(), _trace_headers(context), context):
            yield response

    async def RunJobsJson(
        self, request: pool_pb2.RunJobsJsonRequest, context: grpc.aio.ServicerContext
    ) -> httpbody_pb2.HttpBody:
        """A batch of sync jobs over REST (policy/pool/job_batch.py): the body read whole before anything is
        queued (400 naming what was wrong), then every job as SubmitJobSync, all at once; 200 with each job's
        answer in the batch's order. A caller that goes away stops the waits; the jobs run to their end."""
        tenant = _tenant()
        batch = read_job_batch(request.payload.data)
        if isinstance(batch, BodyError):
            await abort(context, grpc.StatusCode.INVALID_ARGUMENT, batch.detail, 400)
        return await self.sync_jobs.batch(batch, tenant, _trace_headers(context), context)

    async def GetJob(self, request: pool_pb2.GetJobRequest, context: grpc.aio.ServicerContext) -> pool_pb2.Job:
        return job_message(await self._own_job(request.id, context))

    async def GetJobJson(
        self, request: pool_pb2.GetJobJsonRequest, context: grpc.aio.ServicerContext
    ) -> httpbody_pb2.HttpBody:
        return json_body(job_json(await self._own_job(request.id, context)))

    async def _own_job(self, raw_id: str, context: grpc.aio.ServicerContext) -> JobView:
        tenant = _tenant()
        job_id = await self._job_id(context, raw_id)
        job = await self.jobs.get_job(job_id, tenant)
        if job is None:  # another tenant's job is not found; the detail reads only the id, so it confirms nothing
            await self._missing(context, job_id)
        return job

    async def GetJobResult(
        self, request: pool_pb2.GetJobResultRequest, context: grpc.aio.ServicerContext
    ) -> httpbody_pb2.HttpBody:
        job = await self._own_job(request.id, context)
        return await self._answer(context, job, await_result=False)

    async def CancelJob(self, request: pool_pb2.CancelJobRequest, context: grpc.aio.ServicerContext) -> pool_pb2.Job:
        return job_message(await self._cancel(_tenant(), request.id, request.build_id, context))

    async def CancelJobJson(
        self, request: pool_pb2.CancelJobJsonRequest, context: grpc.aio.ServicerContext
    ) -> httpbody_pb2.HttpBody:
        tenant = _tenant()
        if request.build_id:  # the field the body's build_id once filled, now reachable only as a query parameter
            await abort(
                context,
                grpc.StatusCode.INVALID_ARGUMENT,
                "build_id: give it in the JSON body, not as a query parameter",
                400,
            )
        read = await read_body(request.payload.data, CANCEL_BODY, {"id": request.id}, context)
        job = await self._cancel(tenant, request.id, str(read.get("build_id", "")), context)
        return json_body(job_json(job))

    async def _cancel(self, tenant: str, raw_id: str, raw_build_id: str, context: grpc.aio.ServicerContext) -> JobView:
        job_id = await self._job_id(context, raw_id)
        build_id = validate_build_id(raw_build_id or None)
        if isinstance(build_id, BuildIdError):
            await abort(context, grpc.StatusCode.INVALID_ARGUMENT, build_id.detail, 400)
        outcome = await self.dispatcher.cancel(job_id, tenant, build_id)
        if outcome is None:
            await self._missing(context, job_id)
        if outcome.status_code == 409:
            await abort(context, grpc.StatusCode.ABORTED, f"job {job_id} already finished as {outcome.job.state}", 409)
        return outcome.job

    async def WaitJob(
        self, request: pool_pb2.WaitJobRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pool_pb2.Job]:
        job = await self._own_job(request.id, context)
        yield job_message(job)
        while job.state not in TERMINAL_STATES:
            latest = await self.dispatcher.waits.wait(job.id, job.tenant_id, 30.0, since_state=job.state)
            if latest is None:
                return
            if latest.state != job.state:
                yield job_message(latest)
            job = latest

    # hints and the catalogue

    async def SendHint(
        self, request: pool_pb2.SendHintRequest, context: grpc.aio.ServicerContext
    ) -> pool_pb2.SendHintResponse:
        return await self._hint(_tenant(), request.machine_type, context)

    async def SendHintJson(
        self, request: pool_pb2.SendHintJsonRequest, context: grpc.aio.ServicerContext
    ) -> pool_pb2.SendHintResponse:
        tenant = _tenant()
        # no body at all is the empty object: its missing machine_type is then the seed's 422, as before
        raw = request.payload.data if request.payload.data.strip() else b"{}"
        read = await read_body(raw, HINT_BODY, {}, context)
        return await self._hint(tenant, str(read.get("machine_type", "")), context)

    async def _hint(
        self, tenant: str, machine_type: str, context: grpc.aio.ServicerContext
    ) -> pool_pb2.SendHintResponse:
        kind = await self.dispatcher.catalogues.type_named(machine_type.strip())
        refusal = None if kind is None else self.dispatcher.kinds.refusal(kind)
        if refusal is not None:
            await abort(context, grpc.StatusCode.FAILED_PRECONDITION, refusal, 503)
        if kind is not None and (over_budget := await self.gate.refusal(tenant)) is not None:
            log.warning("hint refused for budget: %s", over_budget)
            await status(context, 409)
            return pool_pb2.SendHintResponse(started=False, reason="budget")
        try:
            decision = await self.dispatcher.hint(tenant, machine_type.strip())
        except ShuttingDown as refused:  # a deploy's shutdown began here: retry, another replica takes it
            await abort(context, grpc.StatusCode.UNAVAILABLE, str(refused), 503)
        if isinstance(decision, SubmitError):
            # an unknown type is a job's answer, 400 in the original package's words; the rest the seed's 422
            if decision.kind is SubmitErrorKind.UNKNOWN_MACHINE_TYPE:
                await abort(context, grpc.StatusCode.INVALID_ARGUMENT, decision.message, 400)
            await abort(context, grpc.StatusCode.INVALID_ARGUMENT, decision.detail, 422)
        response = pool_pb2.SendHintResponse(started=decision.started)
        if decision.reason is not None:
            response.reason = str(decision.reason)
        await status(context, 202, nulls=() if decision.reason is not None else ("reason",))
        return response

    async def GetMachineTypes(
        self, request: pool_pb2.GetMachineTypesRequest, context: grpc.aio.ServicerContext
    ) -> httpbody_pb2.HttpBody:
        await self.dispatcher.catalogues.refresh()
        return json_body(catalogue_to_json(self.dispatcher.catalogues.catalogue, admin=caller().elevated))

    async def PutMachineTypes(
        self, request: pool_pb2.PutMachineTypesRequest, context: grpc.aio.ServicerContext
    ) -> httpbody_pb2.HttpBody:
        # the admin token's alone (access.py): the chassis refused every other caller
        parsed = parse_catalogue_json(request.catalogue.data, default_backend=self.dispatcher.kinds.choice.default)
        if not isinstance(parsed, Catalogue):
            await abort(context, grpc.StatusCode.INVALID_ARGUMENT, parsed.detail, 400)
        # a `<redacted>` keeps the newest stored value (policy/pool/redaction.py)
        await self.dispatcher.catalogues.refresh()
        parsed = keep_redacted(parsed, self.dispatcher.catalogues.catalogue)
        if not isinstance(parsed, Catalogue):
            await abort(context, grpc.StatusCode.INVALID_ARGUMENT, parsed.detail, 400)
        # backends here, RunPod's 100 s limit, the daemon's runtimes
        servable = await self.dispatcher.kinds.servable(parsed)
        if not isinstance(servable, Catalogue):
            await abort(context, grpc.StatusCode.INVALID_ARGUMENT, servable.detail, 400)
        await self.dispatcher.catalogues.replace(parsed)
        return json_body(catalogue_to_json(parsed, admin=True))

    # listings and health

    async def ListOrphans(
        self, request: pool_pb2.ListOrphansRequest, context: grpc.aio.ServicerContext
    ) -> httpbody_pb2.HttpBody:
        return json_body(orphans_json(self.orphans))  # the admin token's alone (access.py)

    async def ListWorkers(
        self, request: pool_pb2.ListWorkersRequest, context: grpc.aio.ServicerContext
    ) -> pool_pb2.ListWorkersResponse:
        return workers_message(await self.machines.list_workers(scope(caller(), request.tenant_id)))

    async def ListWorkersJson(
        self, request: pool_pb2.ListWorkersJsonRequest, context: grpc.aio.ServicerContext
    ) -> httpbody_pb2.HttpBody:
        workers = await self.machines.list_workers(scope(caller(), request.tenant_id))
        return json_body([worker_json(w) for w in workers])

    async def ListUsageJson(
        self, request: pool_pb2.ListUsageJsonRequest, context: grpc.aio.ServicerContext
    ) -> httpbody_pb2.HttpBody:
        events = await self._usage(request, context)
        return json_body([usage_json(e) for e in events])

    async def ListUsage(
        self, request: pool_pb2.ListUsageRequest, context: grpc.aio.ServicerContext
    ) -> pool_pb2.ListUsageResponse:
        return usage_message(await self._usage(request, context), request.after_position)

    async def _usage(self, request: UsageRequest, context: grpc.aio.ServicerContext) -> list[UsageView]:
        tenant = scope(caller(), request.tenant_id)
        if request.after_position < 0 or request.page_size < 0:
            await abort(
                context, grpc.StatusCode.INVALID_ARGUMENT, "after_position and page_size must not be negative", 422
            )
        size = min(request.page_size or DEFAULT_USAGE_PAGE, MAX_USAGE_PAGE)
        return await self.jobs.list_usage(tenant, request.after_position, size)

    async def GetPoolHealth(
        self, request: pool_pb2.GetPoolHealthRequest, context: grpc.aio.ServicerContext
    ) -> pool_pb2.PoolHealth:
        counts = await self.machines.machine_counts()
        return pool_pb2.PoolHealth(machine_types=list(self.dispatcher.catalogues.catalogue.names), machines=counts)

    async def GetPoolHealthJson(
        self, request: pool_pb2.GetPoolHealthJsonRequest, context: grpc.aio.ServicerContext
    ) -> httpbody_pb2.HttpBody:
        counts = await self.machines.machine_counts()
        return json_body(health_json(self.dispatcher.catalogues.catalogue.names, counts))
