"""Sync jobs: a submit and its wait (SubmitJobSync), and the many-job calls built of it (a RunJobs stream, a
RunJobsJson batch).

Each job of a stream or a batch is one SubmitJobSync: admitted (admission.py), queued, waited for within the
caller's deadline, answered with its result once completed. An unexpected error is that job's answer alone;
the other jobs go on.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass

import grpc
from google.api import httpbody_pb2

from thermostat.chassis.registry import POOL_DISPATCHER
from thermostat.chassis.text_fields import Refused
from thermostat.chassis.unexpected_errors import internal_error
from thermostat.policy.pool.admission import RefusalKind, SubmitRefusal
from thermostat.policy.pool.job_batch import BatchJob, answer_entry, carried_bytes, result_left_out, results_carried
from thermostat.policy.pool.jobs import JobState
from thermostat.policy.pool.submit_options import SubmitOptions
from thermostat.pool.v1 import pool_pb2

from .admission import Admission, grpc_code
from .dispatcher import Dispatcher
from .replies import abort
from .repository import Finished, JobView
from .typed import sync_request, typed_detail
from .views import JSON, JsonObject, body, job_json, job_message

# the servicer's log: an operator reads every failure of the pool's calls under one name
log = logging.getLogger("thermostat.pool_dispatcher.servicer")

INTERNAL_ERROR = internal_error(POOL_DISPATCHER.name)
"""A RunJobs message's answer to an unexpected error, worded as the chassis answers a call's."""
FAILED_STATUS = {JobState.FAILED: 502, JobState.TIMED_OUT: 504, JobState.CANCELLED: 409}
DEADLINE_ANSWER_SECONDS = 0.5
"""A sync wait bounded by the caller's deadline ends this much before it: the job's last read and the answer must
still reach the caller in time. 50 ms was missed on a loaded machine, and the caller then read DEADLINE_EXCEEDED
without the 202 entries naming its jobs."""

Ran = SubmitRefusal | tuple[JobView, bytes | None]
"""One job of a stream or a batch: its refusal, or the job and its result once completed (None: not completed)."""


@dataclass(frozen=True, slots=True)
class _End:
    """A RunJobs stream's reader is done: every job read was answered, or a request was `unreadable` (nothing of
    it parsed: with no tag to answer it by, it ends the stream)."""

    unreadable: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamLimits:
    """How much a many-job call holds: requests of one stream in flight, and what a batch's answer carries."""

    stream_jobs: int
    stream_full: Callable[[], Awaitable[None]] | None  # a test seam: awaited when a stream's reader waits at its cap
    batch_result_bytes: int
    batch_answer_bytes: int


class SyncJobs:
    def __init__(self, dispatcher: Dispatcher, admission: Admission, limits: StreamLimits) -> None:
        self.dispatcher = dispatcher
        self.jobs = dispatcher.repo.jobs  # a larger result is read here
        self.admission = admission
        self.limits = limits

    async def submit_and_wait(
        self,
        request: pool_pb2.SubmitJobSyncRequest,
        tenant: str,
        metadata: Mapping[str, str],
        remaining: Callable[[], float | None],
    ) -> Finished | SubmitRefusal:
        """A sync submit: the job once finished or as it stands when its wait runs out, which the call's deadline
        (`remaining` seconds, read once the job is queued) bounds too."""
        admitted = await self.admission.admit(request, tenant, metadata, sync=True, remaining=remaining)
        if isinstance(admitted, SubmitRefusal):
            return admitted
        return await self._wait_admitted(*admitted, remaining)

    async def _wait_admitted(
        self, job: JobView, options: SubmitOptions, remaining: Callable[[], float | None]
    ) -> Finished:
        wait = options.wait_seconds or 0.0  # always set for a sync submit
        left = remaining()
        if left is not None:  # the caller's gRPC deadline bounds the wait too
            wait = max(0.0, min(wait, left - DEADLINE_ANSWER_SECONDS))
        return await self.dispatcher.waits.wait_finished(job, wait)

    async def result(self, job: JobView, result: bytes | None) -> bytes:
        """A completed job's result bytes: as the wait brought them, else read."""
        if result is None:
            stored = await self.jobs.get_result(job.id, job.tenant_id)
            result = stored.result if stored is not None else None
        return result if result is not None else b""

    async def run_one(
        self,
        request: pool_pb2.SubmitJobSyncRequest,
        tenant: str,
        metadata: Mapping[str, str],
        context: grpc.aio.ServicerContext,
        method: str,
        place: str,
    ) -> Ran:
        """One job of a stream or a batch, as SubmitJobSync. An unexpected error is this job's answer alone
        (UNKNOWN, as a unary call ends), with the job's id once it is queued so the caller can follow it; the error
        itself is logged here with the job's `place` in the call, never sent (its text may hold what a caller must
        not see)."""
        job_id: str | None = None
        try:
            admitted = await self.admission.admit(
                request, tenant, metadata, sync=True, remaining=context.time_remaining
            )
            if isinstance(admitted, SubmitRefusal):
                return admitted
            job_id = admitted[0].id
            finished = await self._wait_admitted(*admitted, context.time_remaining)
            job = finished.job
            if job.state is JobState.COMPLETED:
                return job, await self.result(job, finished.result)
            return job, None
        except Exception:
            log.exception("%s: job %s (%s) failed in the pool", method, job_id or "(none queued)", place)
            return SubmitRefusal(RefusalKind.INTERNAL, INTERNAL_ERROR, job_id)

    async def stream(
        self,
        requests: AsyncIterator[pool_pb2.RunJobsRequest | Refused],
        tenant: str,
        metadata: Mapping[str, str],
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[pool_pb2.RunJobsResponse]:
        """Each request as SubmitJobSync, at most `stream_jobs` in flight, answered as each finishes. A slot is
        taken before a request is read and given back once its answer went out, so a caller that stops reading
        answers stops the reading of its requests too."""
        answers: asyncio.Queue[pool_pb2.RunJobsResponse | _End] = asyncio.Queue()
        slots = asyncio.Semaphore(self.limits.stream_jobs)
        jobs: set[asyncio.Task[None]] = set()

        async def answer(request: pool_pb2.RunJobsRequest | Refused) -> None:
            answers.put_nowait(await self._stream_answer(request, tenant, metadata, context))

        async def read() -> None:
            end = _End()
            try:
                iterator = aiter(requests)
                while True:
                    if slots.locked() and self.limits.stream_full is not None:
                        await self.limits.stream_full()
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
                await abort(context, grpc.StatusCode.INVALID_ARGUMENT, response.unreadable)
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
        """One request's answer, by its tag (see run_one)."""
        if isinstance(request, Refused):  # the text-field check's, naming the field
            return _refused(request.request.tag, grpc.StatusCode.INVALID_ARGUMENT, request.detail)
        typed = request.HasField("run")
        job_request = sync_request(request.run) if typed else request.job
        ran = await self.run_one(job_request, tenant, metadata, context, "RunJobs", f"tag {request.tag}")
        if isinstance(ran, SubmitRefusal):
            return _refused(request.tag, grpc_code(ran), typed_detail(ran.detail) if typed else ran.detail, ran.job_id)
        job, result = ran
        if result is not None:
            return pool_pb2.RunJobsResponse(tag=request.tag, job_id=job.id, result=result)
        return pool_pb2.RunJobsResponse(tag=request.tag, job_id=job.id, job=job_message(job))

    async def batch(
        self, batch: Sequence[BatchJob], tenant: str, metadata: Mapping[str, str], context: grpc.aio.ServicerContext
    ) -> httpbody_pb2.HttpBody:
        """A REST batch read whole (policy/pool/job_batch.py): every job as SubmitJobSync, all at once; each job's
        answer in the batch's order, in one answer of at most `batch_answer_bytes`."""
        ran = await asyncio.gather(
            *(self._batch_job(job, index, tenant, metadata, context) for index, job in enumerate(batch))
        )
        sizes = [None if isinstance(one, SubmitRefusal) or one[1] is None else len(one[1]) for one in ran]
        budget = self.limits.batch_result_bytes
        while True:
            carried = results_carried(sizes, budget)
            entries = [_batch_entry(one, keep, budget) for one, keep in zip(ran, carried, strict=True)]
            answer = json.dumps(entries).encode()
            over = len(answer) - self.limits.batch_answer_bytes
            if over <= 0 or not any(carried):
                return body(answer, JSON)
            # the results carried shrink by what the answer is over (the details of those left out add a little)
            budget = max(0, carried_bytes(sizes, carried) - over)

    async def _batch_job(
        self, job: BatchJob, index: int, tenant: str, metadata: Mapping[str, str], context: grpc.aio.ServicerContext
    ) -> Ran:
        request = pool_pb2.SubmitJobSyncRequest(payload=httpbody_pb2.HttpBody(data=job.payload), **job.query)
        return await self.run_one(request, tenant, metadata, context, "RunJobsJson", f"jobs[{index}]")


def _batch_entry(ran: Ran, carried: bool, budget: int) -> JsonObject:
    if isinstance(ran, SubmitRefusal):
        return answer_entry(ran.http, ran.job_id, detail=ran.detail)
    job, result = ran
    if result is not None and carried:
        return answer_entry(200, job.id, result=result)
    if result is not None:  # completed, its result past the answer's budget
        detail = result_left_out(job.id, len(result), budget)
        return answer_entry(200, job.id, job=job_json(job), detail=detail)
    return answer_entry(FAILED_STATUS.get(job.state, 202), job.id, job=job_json(job))


def _refused(tag: int, code: grpc.StatusCode, detail: str, job_id: str | None = None) -> pool_pb2.RunJobsResponse:
    error = pool_pb2.RunJobsError(code=code.value[0], detail=detail)
    return pool_pb2.RunJobsResponse(tag=tag, job_id=job_id or "", error=error)
