"""The worker pool (thermostat.pool.v1.PoolDispatcher): jobs for a tenant on a machine type, the catalogue,
workers and usage. Job calls carry the pool token and the tenant (config, or per call `tenant=`); the listings
use the admin token when one is configured (it sees every tenant, or the one `tenant_id` names)."""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator
from typing import Any

import grpc

from thermostat.pool.v1 import pool_pb2, pool_pb2_grpc

from . import errors
from ._calls import TENANT_HEADER, Calls, bearer
from .transport import Metadata

TERMINAL = frozenset({"completed", "failed", "timed_out", "cancelled"})
JOB_ID_HEADER = "x-pool-job-id"
JOB_STATE_HEADER = "x-pool-job-state"


def _text(value: float | int | str | None) -> str:
    """The pool's submit options are strings on the wire (the seed's query parameters); unset is ""."""
    return "" if value is None else str(value)


class AsyncPool:
    def __init__(self, calls: Calls) -> None:
        self._calls = calls
        self._stub = pool_pb2_grpc.PoolDispatcherStub(calls.channel("pool"))

    def _token(self) -> str | None:
        config = self._calls.config
        return config.pool_token or config.pool_admin_token

    def _job_metadata(self, tenant: str | None) -> Metadata:
        return (*bearer(self._token()), (TENANT_HEADER, self._calls.tenant(tenant)))

    def _listing_metadata(self, tenant: str | None) -> Metadata:
        config = self._calls.config
        if config.pool_admin_token:
            return bearer(config.pool_admin_token)
        return self._job_metadata(tenant)

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
        """Queue a job (SubmitJob); the job as queued. Not retried once it may have reached the pool."""
        request = pool_pb2.SubmitJobRequest(
            machine_type=machine_type,
            priority=_text(priority),
            session_id=session_id or "",
            timeout_seconds=_text(timeout_seconds),
        )
        request.payload.data = payload
        job: pool_pb2.Job = await self._calls.transport.unary(
            self._stub.SubmitJob,
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
        """Submit and wait (SubmitJobSync, then WaitJob should the pool's sync wait run out first): the result
        bytes, or errors.JobFailed / JobTimedOut / JobCancelled carrying the job. `timeout` (default the
        config's wait_timeout) bounds the whole wait; past it errors.DeadlineExceeded names the job."""
        clock = self._calls.transport.clock
        total = self._calls.wait_deadline(timeout)
        deadline = clock() + total
        request = pool_pb2.SubmitJobSyncRequest(
            machine_type=machine_type,
            priority=_text(priority),
            session_id=session_id or "",
            timeout_seconds=_text(timeout_seconds),
            wait_seconds=_text(wait_seconds),
        )
        request.payload.data = payload
        body, headers = await self._calls.transport.unary_with_metadata(
            self._stub.SubmitJobSync,
            request,
            metadata=self._job_metadata(tenant),
            timeout=total,
            may_bill=True,
        )
        job_id, state = headers.get(JOB_ID_HEADER, ""), headers.get(JOB_STATE_HEADER, "")
        if state == "completed":
            return bytes(body.data)
        if not job_id:
            raise errors.ThermostatError(grpc.StatusCode.INTERNAL, "the pool answered without naming the job")
        if state in TERMINAL:
            raise errors.job_error(await self.get(job_id, tenant=tenant))
        async for job in self.wait(job_id, tenant=tenant, timeout=max(0.001, deadline - clock())):
            if job.state == "completed":
                return await self.result(job_id, tenant=tenant)
            if job.state in TERMINAL:
                raise errors.job_error(job)
        raise errors.DeadlineExceeded(grpc.StatusCode.DEADLINE_EXCEEDED, f"job {job_id} still runs after {total:g} s")

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
        """The catalogue (`env` and `provider_options` redacted unless the admin token is configured)."""
        body = await self._calls.transport.unary(
            self._stub.GetMachineTypes,
            pool_pb2.GetMachineTypesRequest(),
            metadata=bearer(self._calls.config.pool_admin_token or self._token()),
            timeout=self._calls.deadline(timeout),
        )
        return list(json.loads(body.data))

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
        self, tenant_id: str | None = None, *, tenant: str | None = None, timeout: float | None = None
    ) -> list[pool_pb2.Worker]:
        """Machines: the admin token sees every tenant's (or `tenant_id`'s), the API token its tenant's."""
        response: pool_pb2.ListWorkersResponse = await self._calls.transport.unary(
            self._stub.ListWorkers,
            pool_pb2.ListWorkersRequest(tenant_id=tenant_id or ""),
            metadata=self._listing_metadata(tenant),
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
        timeout: float | None = None,
    ) -> pool_pb2.ListUsageResponse:
        """Usage events after `after_position`, scoped as workers; resume from `next_position`."""
        response: pool_pb2.ListUsageResponse = await self._calls.transport.unary(
            self._stub.ListUsage,
            pool_pb2.ListUsageRequest(tenant_id=tenant_id or "", after_position=after_position, page_size=page_size),
            metadata=self._listing_metadata(tenant),
            timeout=self._calls.deadline(timeout),
        )
        return response
