"""The PoolDispatcher servicer: auth and tenancy in the seed's order, options through the policies, then the
dispatcher. Thin: it resolves, decides with a policy and acts.

Checks run in the worker-pool seed's order: the token (UNAUTHENTICATED, 401) before the tenant header
(INVALID_ARGUMENT, 400) before the parameters (INVALID_ARGUMENT with `x-http-code: 422`). A token that is
missing or matches neither the API token nor the admin token is 401, as in the seed's service; tokens are
compared in constant time and never logged. Statuses gRPC has no code for are named with `x-http-code`,
which the edge's Lua filter applies (202, 413, 422, 502, 504, 409 with a body).
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NoReturn

import grpc
from google.api import httpbody_pb2

from thermostat.chassis import tracing
from thermostat.chassis.registry import POOL_DISPATCHER
from thermostat.chassis.text_fields import Refused
from thermostat.chassis.unexpected_errors import internal_error
from thermostat.policy.common.strict_json import BodyError, BodyField, JsonKind, read_json_object
from thermostat.policy.pool.cancel import BuildIdError, validate_build_id
from thermostat.policy.pool.job_batch import (
    BatchJob,
    answer_entry,
    carried_bytes,
    read_job_batch,
    result_left_out,
    results_carried,
)
from thermostat.policy.pool.jobs import TERMINAL_STATES, JobState
from thermostat.policy.pool.machine_type import Catalogue, catalogue_to_json, parse_catalogue_json
from thermostat.policy.pool.machines import MachineState
from thermostat.policy.pool.submit_options import SubmitError, SubmitOptions, parse_submit_query
from thermostat.pool.v1 import pool_pb2, pool_pb2_grpc

from .budget_gate import BudgetGate
from .dispatcher import Dispatcher
from .metering_repository import PoolMeteringRepository
from .orphan_sweep import OrphanSweeper
from .repository import Finished, JobView, UsageView, WorkerView
from .settings import GRPC_MESSAGE_BYTES

log = logging.getLogger("thermostat.pool_dispatcher.servicer")

TENANT_HEADER = "x-strata-tenant"
TRACE_HEADERS = ("traceparent", "tracestate")
MAX_TENANT_LENGTH = 256
DEFAULT_USAGE_PAGE = 100
MAX_USAGE_PAGE = 1000
JSON = "application/json"
# /health prints these states even at zero, so a reader need not know them
HEALTH_STATES = (MachineState.STARTING, MachineState.WARM, MachineState.BUSY, MachineState.STOPPING)
# the REST bodies, read strictly: a field they do not name is 400, never dropped
CANCEL_BODY = (BodyField("build_id", JsonKind.STRING),)
HINT_BODY = (BodyField("machine_type", JsonKind.STRING),)
STREAM_JOBS = 64
"""Requests of one RunJobs stream in flight (read, not yet answered): at the cap the stream is not read."""
INTERNAL_ERROR = internal_error(POOL_DISPATCHER.name)
"""A RunJobs message's answer to an unexpected error, worded as the chassis answers a call's."""
BATCH_RESULT_BYTES = GRPC_MESSAGE_BYTES - 2 * 1024 * 1024
"""The base64 results one batch's answer carries at first (job_batch.results_carried), 31 MiB: the answer's other
fields usually fit the message's last 2 MiB (64 entries, each a job JSON with a 1,000-character error and a
256-character tenant and session, every character escaped: under 20 KiB)."""
BATCH_ANSWER_BYTES = GRPC_MESSAGE_BYTES - 64 * 1024
"""The most a batch's JSON answer may be (the HttpBody's other fields fit the rest of the message): an answer over
it, the other fields having outgrown their 2 MiB (a refusal's detail lists the whole catalogue), carries fewer
results until it fits."""
_FAILED_STATUS = {JobState.FAILED: 502, JobState.TIMED_OUT: 504, JobState.CANCELLED: 409}
DEADLINE_ANSWER_SECONDS = 0.5
"""A sync wait bounded by the caller's deadline ends this much before it: the job's last read and the answer must
still reach the caller in time. 50 ms was missed on a loaded machine, and the caller then read DEADLINE_EXCEEDED
without the 202 entries naming its jobs."""


@dataclass(frozen=True, slots=True)
class Tokens:
    api: str | None
    admin: str | None


@dataclass(frozen=True, slots=True)
class Refusal:
    """A submit refused, nothing queued: the status a call ends with (a stream's job is answered with it), its
    REST status, and the failed job a budget refusal recorded."""

    code: grpc.StatusCode
    detail: str
    http: int
    job_id: str | None = None


@dataclass(frozen=True, slots=True)
class Caller:
    admin: bool
    metadata: Mapping[str, str]


def _epoch(value: datetime | None) -> float | None:
    return None if value is None else value.timestamp()


def job_json(job: JobView) -> dict[str, Any]:
    """The seed's job JSON: times as epoch seconds, unset values null."""
    return {
        "id": job.id,
        "tenant_id": job.tenant_id,
        "machine_type": job.machine_type,
        "state": job.state,
        "submitted_at": _epoch(job.submitted_at),
        "priority": job.priority,
        "session_id": job.session_id,
        "worker_id": job.worker_id,
        "timeout_seconds": job.timeout_seconds,
        "error": job.error,
        "started_at": _epoch(job.started_at),
        "completed_at": _epoch(job.completed_at),
        "has_result": job.has_result,
        "handed_to_machines": job.handed_to_machines,
    }


def worker_json(w: WorkerView) -> dict[str, Any]:
    """A machine as the REST listing prints it: never its endpoint, host or token."""
    return {
        "id": w.id,
        "tenant_id": w.tenant_id,
        "machine_type": w.machine_type,
        "image": w.image,
        "backend": w.backend,
        "state": w.state,
        "region": w.region,
        "session_id": w.session_id,
        "job_id": w.job_id,
        "created_at": _epoch(w.created_at),
        "warm_at": _epoch(w.warm_at),
        "last_active_at": _epoch(w.last_active_at),
        "health_misses": w.health_misses,
    }


def usage_json(e: UsageView) -> dict[str, Any]:
    return {
        "position": e.position,
        "job_id": e.job_id,
        "tenant_id": e.tenant_id,
        "machine_type": e.machine_type,
        "worker_id": e.worker_id,
        "terminal_state": e.terminal_state,
        "duration_seconds": e.duration_seconds,
        "started_at": _epoch(e.started_at),
        "ended_at": _epoch(e.ended_at),
    }


def job_message(job: JobView) -> pool_pb2.Job:
    message = pool_pb2.Job(
        id=job.id,
        tenant_id=job.tenant_id,
        machine_type=job.machine_type,
        state=job.state,
        submitted_at=job.submitted_at.timestamp(),
        priority=job.priority,
        timeout_seconds=job.timeout_seconds,
        has_result=job.has_result,
        handed_to_machines=job.handed_to_machines,
    )
    for name in ("session_id", "worker_id", "error"):
        if getattr(job, name) is not None:
            setattr(message, name, getattr(job, name))
    for name in ("started_at", "completed_at"):
        value = getattr(job, name)
        if value is not None:
            setattr(message, name, value.timestamp())
    return message


def _body(data: bytes, content_type: str = "application/octet-stream") -> httpbody_pb2.HttpBody:
    return httpbody_pb2.HttpBody(content_type=content_type, data=data)


def _json_body(value: Any) -> httpbody_pb2.HttpBody:
    return _body(json.dumps(value).encode(), JSON)


class PoolDispatcherServicer(pool_pb2_grpc.PoolDispatcherServicer):  # type: ignore[misc]
    def __init__(
        self,
        dispatcher: Dispatcher,
        tokens: Tokens,
        gate: BudgetGate | None = None,
        metering: PoolMeteringRepository | None = None,
        orphans: OrphanSweeper | None = None,
        *,
        stream_jobs: int = STREAM_JOBS,
        stream_full: Callable[[], Awaitable[None]] | None = None,
        batch_result_bytes: int = BATCH_RESULT_BYTES,
        batch_answer_bytes: int = BATCH_ANSWER_BYTES,
    ) -> None:
        self.d = dispatcher
        self.batch_result_bytes = batch_result_bytes
        self.batch_answer_bytes = batch_answer_bytes
        self.stream_jobs = stream_jobs
        self.stream_full = stream_full  # a test seam: awaited when a RunJobs stream's reader waits at its cap
        self.orphans = orphans
        self.tokens = tokens
        self.gate = gate or BudgetGate(None)
        self.metering = metering or PoolMeteringRepository(dispatcher.repo.pool)

    # checks, in the seed's order

    async def _caller(self, context: grpc.aio.ServicerContext) -> Caller:
        metadata = {k.lower(): v for k, v in context.invocation_metadata() if isinstance(v, str)}
        auth = metadata.get("authorization", "")
        presented = auth[7:].strip() if auth[:7].lower() == "bearer " else ""
        api_ok = _same(presented, self.tokens.api)
        admin_ok = _same(presented, self.tokens.admin)
        if not presented or not (api_ok or admin_ok):
            await _abort(context, grpc.StatusCode.UNAUTHENTICATED, "a valid bearer token is required", 401)
        return Caller(admin=admin_ok, metadata=metadata)

    async def _tenant(self, context: grpc.aio.ServicerContext, caller: Caller) -> str:
        tenant = caller.metadata.get(TENANT_HEADER, "").strip()
        if not tenant:
            await _abort(context, grpc.StatusCode.INVALID_ARGUMENT, "the X-Strata-Tenant header is required", 400)
        if len(tenant) > MAX_TENANT_LENGTH:
            await _abort(
                context,
                grpc.StatusCode.INVALID_ARGUMENT,
                f"X-Strata-Tenant: at most {MAX_TENANT_LENGTH} characters",
                400,
            )
        return tenant

    async def _job_id(self, context: grpc.aio.ServicerContext, raw: str) -> str:
        try:
            return str(uuid.UUID(raw))
        except ValueError:
            await _abort(context, grpc.StatusCode.NOT_FOUND, "no such job", 404)

    async def _submit(self, request: Any, context: grpc.aio.ServicerContext, *, sync: bool) -> tuple[JobView, Any]:
        caller = await self._caller(context)
        tenant = await self._tenant(context, caller)
        admitted = await self._admit(request, tenant, caller.metadata, sync=sync, remaining=context.time_remaining)
        if isinstance(admitted, Refusal):
            await _abort(context, admitted.code, admitted.detail, admitted.http)
        return admitted

    async def _admit(
        self,
        request: Any,
        tenant: str,
        metadata: Mapping[str, str],
        *,
        sync: bool,
        remaining: Callable[[], float | None],
    ) -> tuple[JobView, SubmitOptions] | Refusal:
        """The job queued for the tenant, or why not (nothing queued): every submit's checks past the caller's."""
        query = {
            name: getattr(request, name)
            for name in ("machine_type", "priority", "session_id", "timeout_seconds")
            if getattr(request, name)
        }
        if sync and request.wait_seconds:
            query["wait_seconds"] = request.wait_seconds
        if request.machine_type and self.d.catalogue.get(request.machine_type) is None:
            await self.d.type_named(request.machine_type)
        options = parse_submit_query(query, catalogue=self.d.catalogue, sync=sync)
        if isinstance(options, SubmitError):
            return Refusal(grpc.StatusCode.INVALID_ARGUMENT, options.detail, 422)
        refusal = self.d.backend_refusal(options.machine_type)
        if refusal is not None:  # nothing is queued that this deployment could never start a machine for
            return Refusal(grpc.StatusCode.FAILED_PRECONDITION, refusal, 503)
        payload = request.payload.data
        if len(payload) > self.d.max_payload_bytes:
            return Refusal(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"payload of {len(payload)} bytes is over the limit of {self.d.max_payload_bytes}",
                413,
            )
        over_budget = await self.gate.refusal(tenant)
        if over_budget is not None:  # nothing queued, nothing started; the refusal is a failed job on the record
            job_id = await self.metering.record_refused_submit(
                tenant_id=tenant,
                machine_type=options.machine_type.name,
                priority=options.priority,
                session_id=options.session_id,
                timeout_seconds=options.timeout_seconds,
                error=over_budget,
            )
            log.warning("submit refused for budget: job %s: %s", job_id, over_budget)
            return Refusal(grpc.StatusCode.FAILED_PRECONDITION, f"{over_budget} (job {job_id})", 409, job_id)
        # kept with the job: its later spans (queue, boot, execute) sit under this call's span, or the caller's
        trace = tracing.current_headers({n: metadata[n] for n in TRACE_HEADERS if metadata.get(n)})
        job = await self.d.submit(
            tenant_id=tenant, options=options, payload=payload, trace=trace, waiting=sync, remaining=remaining()
        )
        return job, options

    async def _submit_and_wait(
        self, request: Any, tenant: str, metadata: Mapping[str, str], remaining: Callable[[], float | None]
    ) -> Finished | Refusal:
        """A sync submit (SubmitJobSync, each job of RunJobs): the job once finished or as it stands when its wait
        runs out, which the call's deadline (`remaining` seconds, read once the job is queued) bounds too."""
        admitted = await self._admit(request, tenant, metadata, sync=True, remaining=remaining)
        if isinstance(admitted, Refusal):
            return admitted
        return await self._wait_admitted(*admitted, remaining)

    async def _wait_admitted(
        self, job: JobView, options: SubmitOptions, remaining: Callable[[], float | None]
    ) -> Finished:
        wait = options.wait_seconds or 0.0  # always set for a sync submit
        left = remaining()
        if left is not None:  # the caller's gRPC deadline bounds the wait too
            wait = max(0.0, min(wait, left - DEADLINE_ANSWER_SECONDS))
        return await self.d.wait_finished(job, wait)

    # jobs

    async def SubmitJob(self, request: pool_pb2.SubmitJobRequest, context: grpc.aio.ServicerContext) -> pool_pb2.Job:
        job, _ = await self._submit(request, context, sync=False)
        await _status(context, 202)
        return job_message(job)

    async def SubmitJobJson(
        self, request: pool_pb2.SubmitJobJsonRequest, context: grpc.aio.ServicerContext
    ) -> httpbody_pb2.HttpBody:
        job, _ = await self._submit(request, context, sync=False)
        await _status(context, 202)
        return _json_body(job_json(job))

    async def SubmitJobSync(
        self, request: pool_pb2.SubmitJobSyncRequest, context: grpc.aio.ServicerContext
    ) -> httpbody_pb2.HttpBody:
        caller = await self._caller(context)
        tenant = await self._tenant(context, caller)
        finished = await self._submit_and_wait(request, tenant, caller.metadata, context.time_remaining)
        if isinstance(finished, Refusal):
            await _abort(context, finished.code, finished.detail, finished.http)
        return await self._answer(context, finished.job, await_result=True, result=finished.result)

    async def _answer(
        self, context: grpc.aio.ServicerContext, job: JobView, *, await_result: bool, result: bytes | None = None
    ) -> httpbody_pb2.HttpBody:
        """The job's result (read unless given), its failure body, or 202 with the job while it runs. The job's id
        and state go in the trailing metadata: they ride with the answer's final batch, where initial metadata
        of their own would cost every completed job a batch more (bench/pool_dispatch_overhead.py: ~0.2 ms and
        ~8 % of a dispatcher's CPU per job). A non-200 answer sends initial metadata anyway (the edge's HTTP
        code), and the job's headers ride there too, so a REST caller of a 202/409/502/504 can name the job."""
        state = JobState(job.state)
        named = (("x-pool-job-id", job.id), ("x-pool-job-state", job.state))
        context.set_trailing_metadata(named)
        if state is JobState.COMPLETED:
            return _body(await self._result(job, result))
        if state in _FAILED_STATUS:
            body: dict[str, Any] = {"state": job.state}
            if state is not JobState.CANCELLED:
                body["error"] = job.error
            await _status(context, _FAILED_STATUS[state], extra=named)
            return _json_body(body)
        if not await_result:
            await _abort(context, grpc.StatusCode.ABORTED, f"job {job.id} is {job.state}, not finished", 409)
        await _status(context, 202, extra=named)
        return _json_body(job_json(job))

    async def _result(self, job: JobView, result: bytes | None) -> bytes:
        """A completed job's result bytes: as the wait brought them, else read."""
        if result is None:
            stored = await self.d.repo.get_result(job.id, job.tenant_id)
            result = stored.result if stored is not None else None
        return result if result is not None else b""

    async def RunJobs(
        self, requests: AsyncIterator[pool_pb2.RunJobsRequest | Refused], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pool_pb2.RunJobsResponse]:
        """Each request as SubmitJobSync, at most `stream_jobs` in flight, answered as each finishes. A slot is
        taken before a request is read and given back once its answer went out, so a caller that stops reading
        answers stops the reading of its requests too."""
        caller = await self._caller(context)
        tenant = await self._tenant(context, caller)
        answers: asyncio.Queue[pool_pb2.RunJobsResponse | _End] = asyncio.Queue()
        slots = asyncio.Semaphore(self.stream_jobs)
        jobs: set[asyncio.Task[None]] = set()

        async def answer(request: pool_pb2.RunJobsRequest | Refused) -> None:
            answers.put_nowait(await self._stream_answer(request, tenant, caller.metadata, context))

        async def read() -> None:
            end = _End()
            try:
                iterator = aiter(requests)
                while True:
                    if slots.locked() and self.stream_full is not None:
                        await self.stream_full()
                    await slots.acquire()
                    try:
                        request = await anext(iterator)
                    except StopAsyncIteration:  # the caller half-closed: the jobs in flight still answer
                        break
                    if isinstance(request, Refused) and request.request is None:
                        end = _End(unreadable=request.detail)
                        return
                    task = asyncio.create_task(answer(request), name="pool-run-jobs-job")
                    jobs.add(task)
                    task.add_done_callback(jobs.discard)
                if jobs:
                    await asyncio.wait(set(jobs))
            finally:
                answers.put_nowait(end)

        reader = asyncio.create_task(read(), name="pool-run-jobs-reader")
        try:
            while not isinstance(response := await answers.get(), _End):
                yield response
                slots.release()
            if response.unreadable is not None:  # answers may have gone out, with the initial metadata
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, response.unreadable)
            await reader  # its error, if it ended on one
        finally:
            # the caller gone (or the stream ended): the waits stop, as a SubmitJobSync's do; the jobs run on
            for task in (reader, *jobs):
                task.cancel()
            await asyncio.gather(reader, *jobs, return_exceptions=True)

    async def _stream_answer(
        self,
        request: pool_pb2.RunJobsRequest | Refused,
        tenant: str,
        metadata: Mapping[str, str],
        context: grpc.aio.ServicerContext,
    ) -> pool_pb2.RunJobsResponse:
        """One request's answer, by its tag (see _run_one)."""
        if isinstance(request, Refused):  # the text-field check's, naming the field
            return _refused(request.request.tag, grpc.StatusCode.INVALID_ARGUMENT, request.detail)
        ran = await self._run_one(request.job, tenant, metadata, context, "RunJobs", f"tag {request.tag}")
        if isinstance(ran, Refusal):
            return _refused(request.tag, ran.code, ran.detail, ran.job_id)
        job, result = ran
        if result is not None:
            return pool_pb2.RunJobsResponse(tag=request.tag, job_id=job.id, result=result)
        return pool_pb2.RunJobsResponse(tag=request.tag, job_id=job.id, job=job_message(job))

    async def _run_one(
        self,
        request: pool_pb2.SubmitJobSyncRequest,
        tenant: str,
        metadata: Mapping[str, str],
        context: grpc.aio.ServicerContext,
        method: str,
        place: str,
    ) -> Refusal | tuple[JobView, bytes | None]:
        """One job of a stream or a batch, as SubmitJobSync: the refusal, or the job and its result once completed
        (None for a job that ended another way or still runs). An unexpected error is this job's answer alone
        (UNKNOWN, as a unary call ends), with the job's id once it is queued so the caller can follow it; the error
        itself is logged here with the job's `place` in the call, never sent (its text may hold what a caller must
        not see). The other jobs go on."""
        job_id: str | None = None
        try:
            admitted = await self._admit(request, tenant, metadata, sync=True, remaining=context.time_remaining)
            if isinstance(admitted, Refusal):
                return admitted
            job_id = admitted[0].id
            finished = await self._wait_admitted(*admitted, context.time_remaining)
            job = finished.job
            if JobState(job.state) is JobState.COMPLETED:
                return job, await self._result(job, finished.result)
            return job, None
        except Exception:
            log.exception("%s: job %s (%s) failed in the pool", method, job_id or "(none queued)", place)
            return Refusal(grpc.StatusCode.UNKNOWN, INTERNAL_ERROR, 500, job_id)

    async def RunJobsJson(
        self, request: pool_pb2.RunJobsJsonRequest, context: grpc.aio.ServicerContext
    ) -> httpbody_pb2.HttpBody:
        """A batch of sync jobs over REST (policy/pool/job_batch.py): the body read whole before anything is
        queued (400 naming what was wrong), then every job as SubmitJobSync, all at once; 200 with each job's
        answer in the batch's order. A caller that goes away stops the waits; the jobs run to their end."""
        caller = await self._caller(context)
        tenant = await self._tenant(context, caller)
        batch = read_job_batch(request.payload.data)
        if isinstance(batch, BodyError):
            await _abort(context, grpc.StatusCode.INVALID_ARGUMENT, batch.detail, 400)
        ran = await asyncio.gather(
            *(self._batch_job(job, index, tenant, caller.metadata, context) for index, job in enumerate(batch))
        )
        sizes = [None if isinstance(one, Refusal) or one[1] is None else len(one[1]) for one in ran]
        budget = self.batch_result_bytes
        while True:
            carried = results_carried(sizes, budget)
            entries = [self._batch_entry(one, keep, budget) for one, keep in zip(ran, carried, strict=True)]
            answer = json.dumps(entries).encode()
            over = len(answer) - self.batch_answer_bytes
            if over <= 0 or not any(carried):
                return _body(answer, JSON)
            # the results carried shrink by what the answer is over (the details of those left out add a little)
            budget = max(0, carried_bytes(sizes, carried) - over)

    async def _batch_job(
        self, job: BatchJob, index: int, tenant: str, metadata: Mapping[str, str], context: grpc.aio.ServicerContext
    ) -> Refusal | tuple[JobView, bytes | None]:
        request = pool_pb2.SubmitJobSyncRequest(payload=httpbody_pb2.HttpBody(data=job.payload), **job.query)
        return await self._run_one(request, tenant, metadata, context, "RunJobsJson", f"jobs[{index}]")

    def _batch_entry(self, ran: Refusal | tuple[JobView, bytes | None], carried: bool, budget: int) -> dict[str, Any]:
        if isinstance(ran, Refusal):
            return answer_entry(ran.http, ran.job_id, detail=ran.detail)
        job, result = ran
        if result is not None and carried:
            return answer_entry(200, job.id, result=result)
        if result is not None:  # completed, its result past the answer's budget
            detail = result_left_out(job.id, len(result), budget)
            return answer_entry(200, job.id, job=job_json(job), detail=detail)
        return answer_entry(_FAILED_STATUS.get(JobState(job.state), 202), job.id, job=job_json(job))

    async def GetJob(self, request: pool_pb2.GetJobRequest, context: grpc.aio.ServicerContext) -> pool_pb2.Job:
        return job_message(await self._own_job(request.id, context))

    async def GetJobJson(
        self, request: pool_pb2.GetJobJsonRequest, context: grpc.aio.ServicerContext
    ) -> httpbody_pb2.HttpBody:
        return _json_body(job_json(await self._own_job(request.id, context)))

    async def _own_job(self, raw_id: str, context: grpc.aio.ServicerContext) -> JobView:
        tenant = await self._tenant(context, await self._caller(context))
        job = await self.d.repo.get_job(await self._job_id(context, raw_id), tenant)
        if job is None:  # another tenant's job is not found, so the id confirms nothing
            await _abort(context, grpc.StatusCode.NOT_FOUND, "no such job", 404)
        return job

    async def GetJobResult(
        self, request: pool_pb2.GetJobResultRequest, context: grpc.aio.ServicerContext
    ) -> httpbody_pb2.HttpBody:
        job = await self._own_job(request.id, context)
        return await self._answer(context, job, await_result=False)

    async def CancelJob(self, request: pool_pb2.CancelJobRequest, context: grpc.aio.ServicerContext) -> pool_pb2.Job:
        tenant = await self._tenant(context, await self._caller(context))
        return job_message(await self._cancel(tenant, request.id, request.build_id, context))

    async def CancelJobJson(
        self, request: pool_pb2.CancelJobJsonRequest, context: grpc.aio.ServicerContext
    ) -> httpbody_pb2.HttpBody:
        tenant = await self._tenant(context, await self._caller(context))
        if request.build_id:  # the field the body's build_id once filled, now reachable only as a query parameter
            await _abort(
                context,
                grpc.StatusCode.INVALID_ARGUMENT,
                "build_id: give it in the JSON body, not as a query parameter",
                400,
            )
        body = await _read_body(request.payload.data, CANCEL_BODY, {"id": request.id}, context)
        job = await self._cancel(tenant, request.id, str(body.get("build_id", "")), context)
        return _json_body(job_json(job))

    async def _cancel(self, tenant: str, raw_id: str, raw_build_id: str, context: grpc.aio.ServicerContext) -> JobView:
        job_id = await self._job_id(context, raw_id)
        build_id = validate_build_id(raw_build_id or None)
        if isinstance(build_id, BuildIdError):
            await _abort(context, grpc.StatusCode.INVALID_ARGUMENT, build_id.detail, 400)
        outcome = await self.d.cancel(job_id, tenant, build_id)
        if outcome is None:
            await _abort(context, grpc.StatusCode.NOT_FOUND, "no such job", 404)
        if outcome.status_code == 409:
            await _abort(context, grpc.StatusCode.ABORTED, f"job {job_id} already finished as {outcome.job.state}", 409)
        return outcome.job

    async def WaitJob(
        self, request: pool_pb2.WaitJobRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pool_pb2.Job]:
        job = await self._own_job(request.id, context)
        yield job_message(job)
        while JobState(job.state) not in TERMINAL_STATES:
            latest = await self.d.wait(job.id, job.tenant_id, 30.0, since_state=job.state)
            if latest is None:
                return
            if latest.state != job.state:
                yield job_message(latest)
            job = latest

    # hints and the catalogue

    async def SendHint(
        self, request: pool_pb2.SendHintRequest, context: grpc.aio.ServicerContext
    ) -> pool_pb2.SendHintResponse:
        tenant = await self._tenant(context, await self._caller(context))
        return await self._hint(tenant, request.machine_type, context)

    async def SendHintJson(
        self, request: pool_pb2.SendHintJsonRequest, context: grpc.aio.ServicerContext
    ) -> pool_pb2.SendHintResponse:
        tenant = await self._tenant(context, await self._caller(context))
        # no body at all is the empty object: its missing machine_type is then the seed's 422, as before
        raw = request.payload.data if request.payload.data.strip() else b"{}"
        body = await _read_body(raw, HINT_BODY, {}, context)
        return await self._hint(tenant, str(body.get("machine_type", "")), context)

    async def _hint(
        self, tenant: str, machine_type: str, context: grpc.aio.ServicerContext
    ) -> pool_pb2.SendHintResponse:
        kind = await self.d.type_named(machine_type.strip())
        refusal = None if kind is None else self.d.backend_refusal(kind)
        if refusal is not None:
            await _abort(context, grpc.StatusCode.FAILED_PRECONDITION, refusal, 503)
        if kind is not None and (over_budget := await self.gate.refusal(tenant)) is not None:
            log.warning("hint refused for budget: %s", over_budget)
            await _status(context, 409)
            return pool_pb2.SendHintResponse(started=False, reason="budget")
        decision = await self.d.hint(tenant, machine_type.strip())
        if isinstance(decision, SubmitError):
            await _abort(context, grpc.StatusCode.INVALID_ARGUMENT, decision.detail, 422)
        response = pool_pb2.SendHintResponse(started=decision.started)
        if decision.reason is not None:
            response.reason = str(decision.reason)
        await _status(context, 202, nulls=() if decision.reason is not None else ("reason",))
        return response

    async def GetMachineTypes(
        self, request: pool_pb2.GetMachineTypesRequest, context: grpc.aio.ServicerContext
    ) -> httpbody_pb2.HttpBody:
        caller = await self._caller(context)
        await self.d.refresh_catalogue()
        return _json_body(catalogue_to_json(self.d.catalogue, admin=caller.admin))

    async def PutMachineTypes(
        self, request: pool_pb2.PutMachineTypesRequest, context: grpc.aio.ServicerContext
    ) -> httpbody_pb2.HttpBody:
        caller = await self._caller(context)
        if self.tokens.admin is None:
            await _abort(
                context,
                grpc.StatusCode.PERMISSION_DENIED,
                "catalogue writes are disabled: no admin token is configured",
                403,
            )
        if not caller.admin:
            await _abort(
                context, grpc.StatusCode.PERMISSION_DENIED, "replacing the catalogue needs the admin token", 403
            )
        parsed = parse_catalogue_json(request.catalogue.data)
        if not isinstance(parsed, Catalogue):
            await _abort(context, grpc.StatusCode.INVALID_ARGUMENT, parsed.detail, 400)
        servable = self.d.check_catalogue(parsed)  # backends configured here, RunPod's 100 s proxy limit
        if not isinstance(servable, Catalogue):
            await _abort(context, grpc.StatusCode.INVALID_ARGUMENT, servable.detail, 400)
        await self.d.replace_catalogue(parsed)
        return _json_body(catalogue_to_json(parsed, admin=True))

    # listings and health

    async def ListOrphans(
        self, request: pool_pb2.ListOrphansRequest, context: grpc.aio.ServicerContext
    ) -> httpbody_pb2.HttpBody:
        caller = await self._caller(context)
        if not caller.admin:
            await _abort(context, grpc.StatusCode.PERMISSION_DENIED, "listing orphans needs the admin token", 403)
        sweeper = self.orphans
        if sweeper is None:
            return _json_body({"mode": None, "found_total": 0, "orphans": []})
        return _json_body({
            "mode": str(sweeper.mode),
            "found_total": sweeper.found_total,
            "orphans": [
                {
                    "backend": found.backend,
                    "provider_id": found.orphan.provider_id,
                    "name": found.orphan.name,
                    "machine_id": found.orphan.machine_id,
                    "terminated": found.terminated,
                }
                for found in sweeper.last
            ],
        })  # fmt: skip

    async def ListWorkers(
        self, request: pool_pb2.ListWorkersRequest, context: grpc.aio.ServicerContext
    ) -> pool_pb2.ListWorkersResponse:
        tenant = await self._scope(request.tenant_id, context)
        response = pool_pb2.ListWorkersResponse()
        for w in await self.d.repo.list_workers(tenant):
            item = response.workers.add(
                id=w.id,
                tenant_id=w.tenant_id,
                machine_type=w.machine_type,
                image=w.image,
                backend=w.backend,
                state=w.state,
                created_at=w.created_at.timestamp(),
                health_misses=w.health_misses,
            )
            for name in ("region", "session_id", "job_id"):
                if getattr(w, name) is not None:
                    setattr(item, name, getattr(w, name))
            for name in ("warm_at", "last_active_at"):
                if getattr(w, name) is not None:
                    setattr(item, name, getattr(w, name).timestamp())
        return response

    async def ListWorkersJson(
        self, request: pool_pb2.ListWorkersJsonRequest, context: grpc.aio.ServicerContext
    ) -> httpbody_pb2.HttpBody:
        tenant = await self._scope(request.tenant_id, context)
        return _json_body([worker_json(w) for w in await self.d.repo.list_workers(tenant)])

    async def ListUsageJson(
        self, request: pool_pb2.ListUsageJsonRequest, context: grpc.aio.ServicerContext
    ) -> httpbody_pb2.HttpBody:
        events = await self._usage(request, context)
        return _json_body([usage_json(e) for e in events])

    async def _usage(self, request: Any, context: grpc.aio.ServicerContext) -> list[UsageView]:
        tenant = await self._scope(request.tenant_id, context)
        if request.after_position < 0 or request.page_size < 0:
            await _abort(
                context, grpc.StatusCode.INVALID_ARGUMENT, "after_position and page_size must not be negative", 422
            )
        size = min(request.page_size or DEFAULT_USAGE_PAGE, MAX_USAGE_PAGE)
        return await self.d.repo.list_usage(tenant, request.after_position, size)

    async def ListUsage(
        self, request: pool_pb2.ListUsageRequest, context: grpc.aio.ServicerContext
    ) -> pool_pb2.ListUsageResponse:
        events = await self._usage(request, context)
        response = pool_pb2.ListUsageResponse(next_position=events[-1].position if events else request.after_position)
        for e in events:
            response.events.add(
                position=e.position,
                job_id=e.job_id,
                tenant_id=e.tenant_id,
                machine_type=e.machine_type,
                worker_id=e.worker_id,
                terminal_state=e.terminal_state,
                duration_seconds=e.duration_seconds,
                started_at=e.started_at.timestamp(),
                ended_at=e.ended_at.timestamp(),
            )
        return response

    async def _scope(self, requested: str, context: grpc.aio.ServicerContext) -> str | None:
        """The tenant a listing shows: the caller's own, unless the admin token asks for all or one."""
        caller = await self._caller(context)
        if caller.admin:
            return requested.strip() or None
        return await self._tenant(context, caller)

    async def GetPoolHealth(
        self, request: pool_pb2.GetPoolHealthRequest, context: grpc.aio.ServicerContext
    ) -> pool_pb2.PoolHealth:
        counts = await self.d.repo.machine_counts()
        return pool_pb2.PoolHealth(machine_types=list(self.d.catalogue.names), machines=counts)

    async def GetPoolHealthJson(
        self, request: pool_pb2.GetPoolHealthJsonRequest, context: grpc.aio.ServicerContext
    ) -> httpbody_pb2.HttpBody:
        counts = await self.d.repo.machine_counts()
        machines = {**{str(state): 0 for state in HEALTH_STATES}, **counts}
        return _json_body({"machine_types": list(self.d.catalogue.names), "machines": machines})


@dataclass(frozen=True, slots=True)
class _End:
    """A RunJobs stream's reader is done: every job read was answered, or a request was `unreadable` (nothing of
    it parsed: with no tag to answer it by, it ends the stream)."""

    unreadable: str | None = None


def _refused(tag: int, code: grpc.StatusCode, detail: str, job_id: str | None = None) -> pool_pb2.RunJobsResponse:
    error = pool_pb2.RunJobsError(code=code.value[0], detail=detail)
    return pool_pb2.RunJobsResponse(tag=tag, job_id=job_id or "", error=error)


def _same(presented: str, token: str | None) -> bool:
    # always compare, so timing does not reveal which token is configured
    return hmac.compare_digest(presented.encode(), (token or "\0unset").encode()) and token is not None


async def _status(
    context: grpc.aio.ServicerContext,
    code: int | None,
    *,
    nulls: tuple[str, ...] = (),
    extra: tuple[tuple[str, str], ...] = (),
) -> None:
    metadata = list(extra)
    if code is not None:
        metadata.append(("x-http-code", str(code)))
    if nulls:
        metadata.append(("x-json-nulls", ",".join(nulls)))
    if metadata:
        await context.send_initial_metadata(tuple(metadata))


async def _read_body(
    data: bytes, fields: tuple[BodyField, ...], bound: Mapping[str, str], context: grpc.aio.ServicerContext
) -> Mapping[str, float | str]:
    """A REST route's JSON body read strictly (policy/common/strict_json.py): 400 naming what was wrong, before
    anything acts (the transcoder would have dropped an unknown field and acted on the rest)."""
    read = read_json_object(data, fields, bound=bound)
    if isinstance(read, BodyError):
        await _abort(context, grpc.StatusCode.INVALID_ARGUMENT, read.detail, 400)
    return read.values


async def _abort(context: grpc.aio.ServicerContext, code: grpc.StatusCode, message: str, http: int) -> NoReturn:
    await context.send_initial_metadata((("x-http-code", str(http)),))
    await context.abort(code, message)
    raise AssertionError("unreachable")  # abort raises
