"""The worker pool (thermostat.pool.v1.PoolDispatcher): jobs for a tenant on a machine type, the catalogue,
workers and usage. Job calls carry the pool token and the tenant (config, or per call `tenant=`); the listings
use the admin token when one is configured (it sees every tenant, or the one `tenant_id` names)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncGenerator, AsyncIterable, Iterable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import grpc
from google.protobuf import duration_pb2, json_format

from thermostat.pool.v1 import pool_pb2, pool_pb2_grpc

from . import errors
from ._calls import TENANT_HEADER, Calls, bearer
from .transport import Metadata

TERMINAL = frozenset({"completed", "failed", "timed_out", "cancelled"})
TERMINAL_STATES = frozenset(
    {
        pool_pb2.JOB_STATE_COMPLETED,
        pool_pb2.JOB_STATE_FAILED,
        pool_pb2.JOB_STATE_TIMED_OUT,
        pool_pb2.JOB_STATE_CANCELLED,
    }
)
JOB_STATE_HEADER = "x-pool-job-state"  # GetJobResult's trailing metadata


def run_job_request(
    machine_type: str,
    payload: bytes,
    *,
    priority: int | None,
    session_id: str | None,
    timeout_seconds: float | None,
    wait_seconds: float | None,
) -> pool_pb2.RunJobRequest:
    """RunJob's typed request (RunJobs' too): unset options are left unset, the pool's defaults."""
    request = pool_pb2.RunJobRequest(
        machine_type=machine_type, payload=payload, priority=priority or 0, session_id=session_id or ""
    )
    if timeout_seconds is not None:
        request.timeout.CopyFrom(_duration(timeout_seconds))
    if wait_seconds is not None:
        request.wait.CopyFrom(_duration(wait_seconds))
    return request


def _duration(seconds: float) -> duration_pb2.Duration:
    duration = duration_pb2.Duration()
    duration.FromTimedelta(timedelta(seconds=seconds))
    return duration


def _seconds(duration: duration_pb2.Duration) -> float:
    return duration.ToTimedelta().total_seconds()


def _whole(value: Any) -> Any:
    """A Struct's number as JSON had it: a google.protobuf.Struct holds every number as a double."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _whole(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_whole(v) for v in value]
    return value


def catalogue_entry(machine_type: pool_pb2.MachineType) -> dict[str, Any]:
    """A typed MachineType in the catalogue's JSON shape (what PUT takes back, and the CLI prints)."""

    def present(name: str) -> Any:
        return getattr(machine_type, name) if machine_type.HasField(name) else None

    return {
        "name": machine_type.name,
        "image": machine_type.image,
        "backend": machine_type.backend,
        "cpus": present("cpus"),
        "memory_mb": present("memory_mb"),
        "disk_gb": present("disk_gb"),
        "gpu_type": present("gpu_type"),
        "gpu_count": machine_type.gpu_count,
        "max_workers": present("max_workers"),
        "cool_down_seconds": _seconds(machine_type.cool_down),
        "health_check_failures": machine_type.health_check_failures,
        "boot_timeout_seconds": _seconds(machine_type.boot_timeout),
        "job_timeout_seconds": _seconds(machine_type.job_timeout),
        "price_per_hour": present("price_per_hour"),
        "env": dict(machine_type.env),
        "provider_options": _whole(json_format.MessageToDict(machine_type.provider_options)),
    }


_CODES = {code.value[0]: code for code in grpc.StatusCode}


@dataclass(frozen=True, slots=True)
class JobRequest:
    """One job of `run_many`: run()'s options, and `key`, anything of the caller's, handed back with its outcome."""

    machine_type: str
    payload: bytes
    priority: int | None = None
    session_id: str | None = None
    timeout_seconds: float | None = None
    wait_seconds: float | None = None
    key: Any = None

    def message(self, tag: int) -> pool_pb2.RunJobsRequest:
        return pool_pb2.RunJobsRequest(
            tag=tag,
            run=run_job_request(
                self.machine_type,
                self.payload,
                priority=self.priority,
                session_id=self.session_id,
                timeout_seconds=self.timeout_seconds,
                wait_seconds=self.wait_seconds,
            ),
        )


@dataclass(frozen=True, slots=True)
class JobOutcome:
    """One job's answer from `run_many`. `result` is set when the job completed. Otherwise `error` says why not:
    errors.JobFailed / JobTimedOut / JobCancelled carrying the job, or the request's refusal (InvalidArgument
    naming the field, ResourceExhausted for a payload over the limit, Conflict for a budget...), and `job` is the
    job when the pool answered with one; a job still running when its wait ran out has `job` and no `error`
    (follow it with `wait`). `job_id` names the job whenever there is one."""

    request: JobRequest
    job_id: str | None
    result: bytes | None = None
    job: pool_pb2.Job | None = None
    error: errors.ThermostatError | None = None

    @property
    def running(self) -> bool:
        """The job had not finished when its wait ran out."""
        return self.result is None and self.error is None

    def value(self) -> bytes:
        """The result bytes, else the error raised (errors.Conflict naming the job when it still runs)."""
        if self.result is not None:
            return self.result
        if self.error is not None:
            raise self.error
        raise errors.Conflict(grpc.StatusCode.ABORTED, f"job {self.job_id} still runs")


def _outcome(request: JobRequest, response: pool_pb2.RunJobsResponse) -> JobOutcome:
    job_id = response.job_id or None
    kind = response.WhichOneof("outcome")
    if kind == "result":
        return JobOutcome(request, job_id, result=bytes(response.result))
    if kind == "job":
        job = response.job
        ended = errors.job_error(job) if job.state in errors.JOB_ERRORS else None
        return JobOutcome(request, job_id, job=job, error=ended)
    code = _CODES.get(response.error.code, grpc.StatusCode.UNKNOWN)
    return JobOutcome(request, job_id, error=errors.from_status(code, response.error.detail))


async def _each(jobs: Iterable[JobRequest] | AsyncIterable[JobRequest]) -> AsyncGenerator[JobRequest, None]:
    if isinstance(jobs, AsyncIterable):
        async for job in jobs:
            yield job
    else:
        for job in jobs:
            yield job


class AsyncPool:
    def __init__(self, calls: Calls) -> None:
        self._calls = calls
        self._stub = pool_pb2_grpc.PoolDispatcherStub(calls.channel("pool"))

    def _token(self) -> str | None:
        config = self._calls.config
        return config.pool_token or config.pool_admin_token

    def _job_metadata(self, tenant: str | None) -> Metadata:
        return (*bearer(self._token()), (TENANT_HEADER, self._calls.tenant(tenant)))

    # jobs

    async def submit(
        self,
        machine_type: str,
        payload: bytes,
        *,
        tenant: str | None = None,
        priority: int | None = None,
        session_id: str | None = None,
        timeout_seconds: float | None = None,
        timeout: float | None = None,
    ) -> pool_pb2.Job:
        """Queue a job (CreateJob); the job as queued. Not retried once it may have reached the pool."""
        request = pool_pb2.CreateJobRequest(
            machine_type=machine_type, payload=payload, priority=priority or 0, session_id=session_id or ""
        )
        if timeout_seconds is not None:
            request.timeout.CopyFrom(_duration(timeout_seconds))
        job: pool_pb2.Job = await self._calls.transport.unary(
            self._stub.CreateJob,
            request,
            metadata=self._job_metadata(tenant),
            timeout=self._calls.deadline(timeout),
            may_bill=True,
        )
        return job

    async def run(
        self,
        machine_type: str,
        payload: bytes,
        tenant: str | None = None,
        timeout_seconds: float | None = None,
        wait_seconds: float | None = None,
        *,
        priority: int | None = None,
        session_id: str | None = None,
        timeout: float | None = None,
    ) -> bytes:
        """Submit and wait (RunJob, then WaitJob should the pool's sync wait run out first): the result
        bytes, or errors.JobFailed / JobTimedOut / JobCancelled carrying the job. `timeout` (default the
        config's wait_timeout) bounds the whole wait; past it errors.DeadlineExceeded names the job."""
        clock = self._calls.transport.clock
        total = self._calls.wait_deadline(timeout)
        deadline = clock() + total
        request = run_job_request(
            machine_type,
            payload,
            priority=priority,
            session_id=session_id,
            timeout_seconds=timeout_seconds,
            wait_seconds=wait_seconds,
        )
        answer: pool_pb2.RunJobResponse = await self._calls.transport.unary(
            self._stub.RunJob,
            request,
            metadata=self._job_metadata(tenant),
            timeout=total,
            may_bill=True,
        )
        job_id, state = answer.job.id, answer.job.job_state
        if state == pool_pb2.JOB_STATE_COMPLETED:
            return bytes(answer.result)
        if not job_id:
            raise errors.ThermostatError(grpc.StatusCode.INTERNAL, "the pool answered without naming the job")
        if state in TERMINAL_STATES:
            raise errors.job_error(answer.job)
        async for job in self.wait(job_id, tenant=tenant, timeout=max(0.001, deadline - clock())):
            if job.state == "completed":
                return await self.result(job_id, tenant=tenant)
            if job.state in TERMINAL:
                raise errors.job_error(job)
        raise errors.DeadlineExceeded(grpc.StatusCode.DEADLINE_EXCEEDED, f"job {job_id} still runs after {total:g} s")

    async def run_many(
        self,
        jobs: Iterable[JobRequest] | AsyncIterable[JobRequest],
        *,
        tenant: str | None = None,
        timeout: float | None = None,
    ) -> AsyncGenerator[JobOutcome, None]:
        """Run every job over one RunJobs stream, yielding each JobOutcome as its job finishes (not in the order
        given): the framework's per-call cost is paid once for all of them. A job is taken from `jobs` only when
        the stream can carry it (the pool reads at most 64 of a stream at once; gRPC's flow control holds the rest),
        so a long or endless iterable is fine. A refused job is an outcome, not the end: only the stream's own
        failure raises (a bad token Unauthenticated, no tenant InvalidArgument, past `timeout` — default the
        config's wait_timeout — DeadlineExceeded), and then jobs already sent may still run (get() them). Never
        retried: a job that may have reached the pool is not issued twice. Stopping early cancels the stream; the
        jobs sent still run to their end. An error of `jobs` itself is raised once the jobs sent are answered."""
        call = self._stub.RunJobs(
            metadata=tuple(self._job_metadata(tenant)), timeout=self._calls.wait_deadline(timeout)
        )
        sent: dict[int, JobRequest] = {}

        async def write() -> None:
            try:
                tag = 0
                async for job in _each(jobs):
                    tag += 1
                    sent[tag] = job
                    await call.write(job.message(tag))
            except (grpc.aio.AioRpcError, asyncio.InvalidStateError):
                return  # the stream ended: the reading side says why
            finally:  # the pool then answers what it has and ends the stream
                with contextlib.suppress(grpc.aio.AioRpcError, asyncio.InvalidStateError):
                    await call.done_writing()

        writer = asyncio.create_task(write())
        try:
            while (response := await call.read()) is not grpc.aio.EOF:
                yield _outcome(sent.pop(response.tag), response)
            await writer  # an error of the caller's iterable
        except grpc.aio.AioRpcError as error:
            raise errors.from_rpc_error(error) from None
        finally:
            call.cancel()
            writer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await writer

    async def get(self, job_id: str, *, tenant: str | None = None, timeout: float | None = None) -> pool_pb2.Job:
        job: pool_pb2.Job = await self._calls.transport.unary(
            self._stub.GetJob,
            pool_pb2.GetJobRequest(id=job_id),
            metadata=self._job_metadata(tenant),
            timeout=self._calls.deadline(timeout),
        )
        return job

    async def result(self, job_id: str, *, tenant: str | None = None, timeout: float | None = None) -> bytes:
        """The finished job's result bytes; a job that ended without one raises its JobError, a job still
        running errors.Conflict."""
        body, headers = await self._calls.transport.unary_with_metadata(
            self._stub.GetJobResult,
            pool_pb2.GetJobResultRequest(id=job_id),
            metadata=self._job_metadata(tenant),
            timeout=self._calls.deadline(timeout),
        )
        state = headers.get(JOB_STATE_HEADER, "")
        if state in TERMINAL and state != "completed":
            raise errors.job_error(await self.get(job_id, tenant=tenant, timeout=timeout))
        return bytes(body.data)

    async def cancel(
        self, job_id: str, *, build_id: str | None = None, tenant: str | None = None, timeout: float | None = None
    ) -> pool_pb2.Job:
        """Cancel the job (again when already cancelled: the same job); one finished another way is Conflict.

        `build_id` names the execution for the worker to stop (a Strata manifest's `build_id`, carried in the
        payload); by default the job id. The pool cancels the job either way; a worker whose payload named another
        build runs it out and its result is dropped."""
        job: pool_pb2.Job = await self._calls.transport.unary(
            self._stub.CancelJob,
            pool_pb2.CancelJobRequest(id=job_id, build_id=build_id or job_id),
            metadata=self._job_metadata(tenant),
            timeout=self._calls.deadline(timeout),
        )
        return job

    def wait(
        self, job_id: str, *, tenant: str | None = None, timeout: float | None = None
    ) -> AsyncGenerator[pool_pb2.Job, None]:
        """WaitJob: the job now, then each change of state, ending when the job does."""
        return self._calls.transport.stream(
            self._stub.WaitJob,
            pool_pb2.WaitJobRequest(id=job_id),
            metadata=self._job_metadata(tenant),
            timeout=self._calls.wait_deadline(timeout),
        )

    async def hint(
        self, machine_type: str, *, tenant: str | None = None, timeout: float | None = None
    ) -> pool_pb2.SendHintResponse:
        """Ask for a warm machine ahead of a job (SendHint); `started` and why not. It may start a machine, so it
        is not retried once it may have reached the pool."""
        response: pool_pb2.SendHintResponse = await self._calls.transport.unary(
            self._stub.SendHint,
            pool_pb2.SendHintRequest(machine_type=machine_type),
            metadata=self._job_metadata(tenant),
            timeout=self._calls.deadline(timeout),
            may_bill=True,
        )
        return response

    # catalogue and listings

    async def machine_types(self, *, timeout: float | None = None) -> list[dict[str, Any]]:
        """The catalogue (ListMachineTypes) in its JSON shape (`env` and `provider_options` redacted unless the admin
        token is configured)."""
        answer: pool_pb2.ListMachineTypesResponse = await self._calls.transport.unary(
            self._stub.ListMachineTypes,
            pool_pb2.ListMachineTypesRequest(),
            metadata=bearer(self._calls.config.pool_admin_token or self._token()),
            timeout=self._calls.deadline(timeout),
        )
        return [catalogue_entry(machine_type) for machine_type in answer.machine_types]

    async def put_machine_types(
        self, types: list[dict[str, Any]], *, timeout: float | None = None
    ) -> list[dict[str, Any]]:
        """Replace the catalogue (the admin token: with only the API token configured the pool says
        PermissionDenied); the catalogue as stored."""
        request = pool_pb2.PutMachineTypesRequest()
        request.catalogue.content_type = "application/json"
        request.catalogue.data = json.dumps(types).encode()
        body = await self._calls.transport.unary(
            self._stub.PutMachineTypes,
            request,
            metadata=bearer(self._calls.config.pool_admin_token or self._token()),
            timeout=self._calls.deadline(timeout),
        )
        return list(json.loads(body.data))

    async def workers(
        self,
        tenant_id: str | None = None,
        *,
        tenant: str | None = None,
        all_tenants: bool = False,
        timeout: float | None = None,
    ) -> list[pool_pb2.Worker]:
        """Machines: the API token sees its tenant's; the admin token `tenant_id`'s, else the tenant's (`tenant`,
        else STRATA_TENANT), else with `all_tenants` or no tenant every tenant's (_calls.listed_tenant)."""
        metadata, scope = self._calls.listing(tenant_id, tenant, all_tenants)
        response: pool_pb2.ListWorkersResponse = await self._calls.transport.unary(
            self._stub.ListWorkers,
            pool_pb2.ListWorkersRequest(tenant_id=scope),
            metadata=metadata,
            timeout=self._calls.deadline(timeout),
        )
        return list(response.workers)

    async def usage(
        self,
        tenant_id: str | None = None,
        after_position: int = 0,
        page_size: int = 0,
        *,
        tenant: str | None = None,
        all_tenants: bool = False,
        timeout: float | None = None,
    ) -> pool_pb2.ListUsageResponse:
        """Usage events after `after_position`, scoped as workers; resume from `next_position`."""
        metadata, scope = self._calls.listing(tenant_id, tenant, all_tenants)
        response: pool_pb2.ListUsageResponse = await self._calls.transport.unary(
            self._stub.ListUsage,
            pool_pb2.ListUsageRequest(tenant_id=scope, after_position=after_position, page_size=page_size),
            metadata=metadata,
            timeout=self._calls.deadline(timeout),
        )
        return response
