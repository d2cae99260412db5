"""The worker-pool seed's REST surface through the real Envoy edge, drop-in for the seed's HTTP clients: every
route's status codes, its snake_case JSON fields and values (numbers as numbers, unset as null), raw bytes both
ways, the 413 limit, a sync wait the edge does not cut, auth and tenancy in the seed's order, and the pool's part
of GET /health.

One pool dispatcher (in this process, over real gRPC and the module's own database, running reference workers as
child processes) behind one Envoy for the module; tests keep apart by tenant.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import re
import socket
import threading
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest

from tests.fixtures.edge import DESCRIPTORS, house_edge, port_of
from tests.fixtures.polling import eventually
from tests.integration.pool_dispatcher.conftest import (
    ADMIN_TOKEN,
    API_TOKEN,
    JOB_FIELDS,
    RunningPool,
    local_type,
    pool_env,
    sleepy_type,
    start_pool,
)
from thermostat.chassis.registry import POOL_DISPATCHER
from thermostat.policy.pool.machine_type import MAX_WAIT_SECONDS
from thermostat.pool.v1 import pool_pb2, pool_pb2_grpc
from thermostat.pool_dispatcher.settings import MAX_PAYLOAD_BYTES
from thermostat.store.db import Store
from tools.envoy_config import TRANSCODER, EdgeSpec, build_envoy_config, upstreams

pytestmark = pytest.mark.e2e

WORKER_FIELDS = {
    "id",
    "tenant_id",
    "machine_type",
    "image",
    "backend",
    "state",
    "region",
    "session_id",
    "job_id",
    "created_at",
    "warm_at",
    "last_active_at",
    "health_misses",
    "current_job_id",
    "backend_id",
    "endpoint",
}
USAGE_FIELDS = {
    "position",
    "job_id",
    "tenant_id",
    "machine_type",
    "worker_id",
    "terminal_state",
    "duration_seconds",
    "started_at",
    "ended_at",
    "id",
    "duration_ms",
    "completed_at",
}
SECRET = "catalogue-secret-value"
CATALOGUE = [
    local_type("local", env={"EXTRA_SETTING": SECRET}, provider_options={"note": SECRET}),
    sleepy_type("sleepy", job_timeout_seconds=30),
    sleepy_type("quick", job_timeout_seconds=1),
    local_type("failing", env={"STRATA_WORKER_HANDLER": "fail", "STRATA_WORKER_FAIL_MESSAGE": "cell raised"}),
]
BINARY = bytes(range(256)) * 64 + b"\x00\r\n\xff"  # every byte value, NULs and CR/LF included, not UTF-8


def tenant_headers(tenant: str, token: str = API_TOKEN) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", "X-Strata-Tenant": tenant}


ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


def fresh_tenant() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"


def problem(response: httpx.Response, status: int) -> str:
    """The problem+json detail of a refusal (the seed's clients read `detail`)."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json"), response.headers
    body = response.json()
    assert body["status"] == status
    detail: str = body["detail"]
    return detail


@contextlib.asynccontextmanager
async def edge_for(pool_address: str, data_dir: Path) -> AsyncIterator[httpx.AsyncClient]:
    """The real Envoy, configured from the registry exactly as `make run` does, in front of one pool."""
    async with (
        house_edge({POOL_DISPATCHER.name: port_of(pool_address)}, data_dir / "envoy.yaml") as envoy,
        httpx.AsyncClient(base_url=f"http://127.0.0.1:{envoy.listeners['edge']}", timeout=60) as client,
    ):
        await eventually(lambda: _serving(client), timeout=20, every=0.1)
        yield client


async def _serving(client: httpx.AsyncClient) -> bool | None:
    return True if (await client.get("/health")).status_code == 200 else None


@pytest.fixture(scope="module")
async def store(module_database_url: str) -> AsyncIterator[Store]:
    opened = await Store.open(module_database_url, max_size=12, application_name="pool-edge-tests")
    yield opened
    await opened.close()


@pytest.fixture(scope="module")
async def served(
    store: Store, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[tuple[RunningPool, httpx.AsyncClient]]:
    async with (
        start_pool(store, pool_env(CATALOGUE)) as pool,
        edge_for(pool.address, tmp_path_factory.mktemp("edge")) as client,
    ):
        yield pool, client


@pytest.fixture(scope="module")
async def edge(served: tuple[RunningPool, httpx.AsyncClient]) -> httpx.AsyncClient:
    return served[1]


async def queued_for(store: Store, tenant: str) -> int:
    async with store.pool.acquire() as connection:
        return int(await connection.fetchval("SELECT count(*) FROM pool_jobs WHERE tenant_id = $1", tenant))


async def finished(edge: httpx.AsyncClient, job_id: str, tenant: str, timeout: float = 30) -> dict[str, Any]:
    async def done() -> dict[str, Any] | None:
        job: dict[str, Any] = (await edge.get(f"/v1/jobs/{job_id}", headers=tenant_headers(tenant))).json()
        return job if job["state"] in ("completed", "failed", "timed_out", "cancelled") else None

    return await eventually(done, timeout=timeout, every=0.05)


async def in_state(edge: httpx.AsyncClient, job_id: str, tenant: str, state: str) -> None:
    async def reached() -> bool | None:
        job = (await edge.get(f"/v1/jobs/{job_id}", headers=tenant_headers(tenant))).json()
        return True if job["state"] == state else None

    await eventually(reached, timeout=30, every=0.05)


# --- jobs ------------------------------------------------------------------------------------------------------


async def test_a_submit_is_202_with_exactly_the_seeds_job_json_and_the_payload_runs_verbatim(edge) -> None:
    """POST /v1/jobs: any bytes, no content type; 202 with the job: priority a JSON number (exact past 2**53),
    times epoch seconds, unset fields null, never payload or result; the result comes back byte for byte."""
    tenant = fresh_tenant()
    priority = 2**62 + 1
    submitted = await edge.post(
        "/v1/jobs",
        params={"machine_type": "local", "priority": str(priority), "session_id": "nb-1", "timeout_seconds": "20"},
        content=BINARY,
        headers=tenant_headers(tenant),
    )
    assert submitted.status_code == 202, submitted.text
    assert submitted.headers["content-type"].startswith("application/json")
    job = submitted.json()
    assert set(job) == JOB_FIELDS
    assert re.search(rf'"priority":\s*{priority}[,}}]', submitted.text), "a bare JSON number, not a string"
    assert (job["tenant_id"], job["machine_type"], job["priority"], job["session_id"]) == (
        tenant,
        "local",
        priority,
        "nb-1",
    )
    assert job["timeout_seconds"] == 20
    assert isinstance(job["submitted_at"], float) and abs(job["submitted_at"] - time.time()) < 60
    assert (job["error"], job["completed_at"], job["has_result"]) == (None, None, False)

    done = await finished(edge, job["id"], tenant)
    assert set(done) == JOB_FIELDS
    assert (done["state"], done["has_result"], done["error"]) == ("completed", True, None)
    assert isinstance(done["worker_id"], str) and done["worker_id"]
    assert done["submitted_at"] <= done["started_at"] <= done["completed_at"]
    assert done["priority"] == priority

    result = await edge.get(f"/v1/jobs/{job['id']}/result", headers=tenant_headers(tenant))
    assert result.status_code == 200
    assert result.content == BINARY


async def test_a_sync_submit_answers_200_with_the_raw_result_bytes(edge) -> None:
    tenant = fresh_tenant()
    reply = await edge.post(
        "/v1/jobs/sync", params={"machine_type": "local"}, content=BINARY, headers=tenant_headers(tenant)
    )
    assert reply.status_code == 200, reply.text
    assert reply.content == BINARY


async def test_a_sync_wait_that_runs_out_is_202_with_the_job_and_its_result_is_409_until_it_finishes(edge) -> None:
    tenant = fresh_tenant()
    reply = await edge.post(
        "/v1/jobs/sync",
        params={"machine_type": "sleepy", "wait_seconds": "0.2"},
        content=b'{"seconds": 2}',
        headers=tenant_headers(tenant),
    )
    assert reply.status_code == 202, reply.text
    job = reply.json()
    assert set(job) == JOB_FIELDS
    assert job["state"] in ("queued", "dispatched", "running")
    assert (reply.headers["x-pool-job-id"], reply.headers["x-pool-job-state"]) == (job["id"], job["state"])
    assert "not finished" in problem(
        await edge.get(f"/v1/jobs/{job['id']}/result", headers=tenant_headers(tenant)), 409
    )
    assert (await finished(edge, job["id"], tenant))["state"] == "completed"
    result = await edge.get(f"/v1/jobs/{job['id']}/result", headers=tenant_headers(tenant))
    assert (result.status_code, result.content) == (200, b"slept 2")


async def test_a_job_that_fails_on_the_worker_is_502_with_state_and_error(edge) -> None:
    tenant = fresh_tenant()
    reply = await edge.post(
        "/v1/jobs/sync", params={"machine_type": "failing"}, content=b"x", headers=tenant_headers(tenant)
    )
    assert reply.status_code == 502, reply.text
    body = reply.json()
    assert set(body) == {"state", "error"}
    assert body["state"] == "failed" and "cell raised" in body["error"]
    assert reply.headers["x-pool-job-state"] == "failed"  # and the job, by its id, says the same
    assert (await finished(edge, reply.headers["x-pool-job-id"], tenant))["state"] == "failed"


async def test_a_job_that_times_out_is_504_with_state_and_error(edge) -> None:
    tenant = fresh_tenant()
    reply = await edge.post(
        "/v1/jobs/sync", params={"machine_type": "quick"}, content=b'{"seconds": 5}', headers=tenant_headers(tenant)
    )
    assert reply.status_code == 504, reply.text
    body = reply.json()
    assert set(body) == {"state", "error"}
    assert body["state"] == "timed_out" and body["error"]


async def test_a_warm_machine_killed_and_a_job_submitted_at_once_is_200_from_a_new_machine(
    served: tuple[RunningPool, httpx.AsyncClient], store: Store
) -> None:
    """Issue 29 through the edge: the tenant's warm machine dies behind the pool's back and the next sync submit,
    sent at once (inside the probes' window), comes back 200 with its result from a new machine, the job saying
    it was handed to two; the dead machine is retired."""
    pool, edge = served
    tenant = fresh_tenant()
    warm = await edge.post(
        "/v1/jobs/sync", params={"machine_type": "local"}, content=b"warm", headers=tenant_headers(tenant)
    )
    assert warm.status_code == 200, warm.text
    [dead] = [w["id"] for w in (await edge.get("/v1/workers", headers=tenant_headers(tenant))).json()]
    async with store.pool.acquire() as connection:
        provider = await connection.fetchval("SELECT provider_id FROM pool_machines WHERE id = $1::uuid", dead)
    process = pool.backend._children[provider]
    process.kill()
    await process.wait()
    reply = await edge.post(
        "/v1/jobs/sync", params={"machine_type": "local"}, content=BINARY, headers=tenant_headers(tenant)
    )
    assert (reply.status_code, reply.content) == (200, BINARY), reply.text[:200]
    usage = (await edge.get("/v1/usage", headers=tenant_headers(tenant))).json()
    assert [e["worker_id"] == dead for e in usage] == [True, False]  # one event per job, none for the hand-back
    job = await finished(edge, usage[1]["job_id"], tenant)
    assert set(job) == JOB_FIELDS
    assert (job["state"], job["handed_to_machines"], job["error"]) == ("completed", 2, None)
    assert job["worker_id"] not in (None, dead)

    async def retired() -> bool | None:
        workers = (await edge.get("/v1/workers", headers=tenant_headers(tenant))).json()
        return True if [w["id"] for w in workers] == [job["worker_id"]] else None

    await eventually(retired, timeout=20, every=0.05)


# --- POST /v1/jobs/batch ----------------------------------------------------------------------------------------

BATCH_JOB_KNOWN = "known: machine_type, payload, priority, session_id, timeout_seconds, wait_seconds"


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


async def test_a_batch_is_200_with_each_jobs_entry_in_order_and_a_binary_payload_round_trips_byte_for_byte(
    edge, store
) -> None:
    """Entries as JSON exactly: status and job_id always (null when nothing was queued), then the result as base64,
    the seed's job JSON (priority a bare number, exact past 2**53) or the refusal's detail."""
    tenant = fresh_tenant()
    priority = 2**62 + 1
    reply = await edge.post(
        "/v1/jobs/batch",
        json={
            "jobs": [
                {"machine_type": "local", "payload": b64(BINARY)},
                {"machine_type": "failing", "payload": b64(b"x"), "priority": priority, "session_id": "nb-1"},
                {"machineType": "nope"},
                {"machine_type": "local"},
            ]
        },
        headers=tenant_headers(tenant),
    )
    assert reply.status_code == 200, reply.text
    assert reply.headers["content-type"].startswith("application/json")
    done, failed, refused, empty = reply.json()
    assert set(done) == {"status", "job_id", "result"} and done["status"] == 200 and isinstance(done["job_id"], str)
    assert base64.b64decode(done["result"], validate=True) == BINARY
    assert (empty["status"], empty["result"]) == (200, "")
    assert set(failed) == {"status", "job_id", "job"} and failed["status"] == 502
    job = failed["job"]
    assert set(job) == JOB_FIELDS and failed["job_id"] == job["id"]
    assert (job["state"], job["tenant_id"], job["priority"], job["session_id"]) == ("failed", tenant, priority, "nb-1")
    assert "cell raised" in job["error"] and isinstance(job["submitted_at"], float) and job["has_result"] is False
    assert re.search(rf'"priority":\s*{priority}[,}}]', reply.text), "a bare JSON number, not a string"
    assert set(refused) == {"status", "job_id", "detail"}
    assert refused == {"status": 400, "job_id": None, "detail": "unknown machine type: 'nope'"}
    assert re.search(r'"job_id":\s*null', reply.text)
    assert await queued_for(store, tenant) == 3
    result = await edge.get(f"/v1/jobs/{done['job_id']}/result", headers=tenant_headers(tenant))
    assert (result.status_code, result.content) == (200, BINARY)


async def test_a_batch_entry_whose_wait_runs_out_is_202_with_the_job_which_runs_on(edge) -> None:
    tenant = fresh_tenant()
    reply = await edge.post(
        "/v1/jobs/batch",
        json={
            "jobs": [
                {"machine_type": "sleepy", "payload": b64(b'{"seconds": 2}'), "wait_seconds": 0.2},
                {"machine_type": "quick", "payload": b64(b'{"seconds": 5}')},
            ]
        },
        headers=tenant_headers(tenant),
    )
    assert reply.status_code == 200, reply.text
    running, timed_out = reply.json()
    assert (running["status"], set(running["job"])) == (202, JOB_FIELDS)
    assert running["job"]["state"] in ("queued", "dispatched", "running")
    assert (timed_out["status"], timed_out["job"]["state"]) == (504, "timed_out")
    assert (await finished(edge, running["job_id"], tenant))["state"] == "completed"
    result = await edge.get(f"/v1/jobs/{running['job_id']}/result", headers=tenant_headers(tenant))
    assert (result.status_code, result.content) == (200, b"slept 2")


async def test_a_batch_body_error_is_a_problem_400_naming_the_field_and_nothing_is_queued(edge, store) -> None:
    tenant = fresh_tenant()
    good = {"machine_type": "local", "payload": b64(b"x")}
    for content, detail in (
        ({"jobs": [good, {**good, "bogus": 1}]}, f"body.jobs[1].bogus: unknown field; {BATCH_JOB_KNOWN}"),
        ({"jobs": [good, {**good, "priority": "5"}]}, "body.jobs[1].priority: must be a JSON integer, not a string"),
        (
            {"jobs": [{**good, "payload": "aGk"}]},
            "body.jobs[0].payload: must be base64 (RFC 4648, standard alphabet, padded)",
        ),
        ({"jobs": [good] * 65}, "body.jobs: 65 jobs is over the limit of 64 per batch"),
        ({"jobs": []}, "body.jobs: empty; a batch holds at least one job"),
        ({"job": [good]}, "body.job: unknown field; known: jobs"),
        ([good], "body: must be a JSON object, not an array"),
    ):
        answer = await edge.post("/v1/jobs/batch", json=content, headers=tenant_headers(tenant))
        assert problem(answer, 400) == detail
    assert problem(await edge.post("/v1/jobs/batch", headers=tenant_headers(tenant)), 400).startswith("body: empty")
    assert await queued_for(store, tenant) == 0


async def test_a_batch_checks_the_token_before_the_tenant_header_before_the_body(edge, store) -> None:
    tenant = fresh_tenant()
    bad = {"jobs": [{"bogus": 1}]}
    assert "bearer" in problem(await edge.post("/v1/jobs/batch", json=bad), 401)
    wrong = {"Authorization": "Bearer wrong", "X-Strata-Tenant": tenant}
    problem(await edge.post("/v1/jobs/batch", json=bad, headers=wrong), 401)
    no_tenant = {"Authorization": f"Bearer {API_TOKEN}"}
    assert "X-Strata-Tenant" in problem(await edge.post("/v1/jobs/batch", json=bad, headers=no_tenant), 400)
    assert problem(await edge.post("/v1/jobs/batch", json=bad, headers=tenant_headers(tenant)), 400).startswith(
        "body.jobs[0].bogus"
    )
    admin = await edge.post(
        "/v1/jobs/batch", json={"jobs": [{"machine_type": "local"}]}, headers=tenant_headers(tenant, ADMIN_TOKEN)
    )
    assert (admin.status_code, [e["status"] for e in admin.json()]) == (200, [200])
    assert await queued_for(store, tenant) == 1


async def test_a_batch_takes_no_query_parameters_the_jobs_options_are_in_the_body(edge, store) -> None:
    tenant = fresh_tenant()
    body = {"jobs": [{"machine_type": "local"}]}
    for name in ("machine_type", "wait_seconds", "jobs"):
        refused = await edge.post(f"/v1/jobs/batch?{name}=1", json=body, headers=tenant_headers(tenant))
        assert problem(refused, 400) == f"{name}: no such query parameter on this route"
    assert await queued_for(store, tenant) == 0


async def test_a_batch_body_over_the_edges_limit_is_413_and_nothing_is_queued(edge, store) -> None:
    """As a payload far over the limit on /v1/jobs/sync: Envoy's own 413 (the transcoder's body limit, the pool's
    gRPC message limit), before the pool reads anything."""
    tenant = fresh_tenant()
    filler = "A" * (2 * MAX_PAYLOAD_BYTES)
    content = b'{"jobs": [{"machine_type": "local", "payload": "' + filler.encode() + b'"}]}'
    try:
        over = await edge.post("/v1/jobs/batch", content=content, headers=tenant_headers(tenant))
    except (httpx.ReadError, httpx.WriteError, httpx.RemoteProtocolError):
        pass  # Envoy answered 413 and closed while the client was still writing: refused all the same
    else:
        problem(over, 413)
    assert await queued_for(store, tenant) == 0


async def test_cancel_is_200_with_the_job_again_when_repeated_409_when_finished_404_when_not_yours(edge) -> None:
    """A sync wait on the job returns 409 {"state": "cancelled"} at once; the cancel route answers 200 with the
    job twice, 409 for a job that completed, 404 for an unknown id or another tenant's job."""
    tenant = fresh_tenant()
    waiting = asyncio.create_task(
        edge.post(
            "/v1/jobs/sync",
            params={"machine_type": "sleepy", "wait_seconds": "30"},
            content=b'{"seconds": 20, "build_id": "b-1"}',
            headers=tenant_headers(tenant),
        )
    )

    async def running_job() -> str | None:
        usage = await edge.get("/v1/workers", headers=tenant_headers(tenant))
        busy = [w["job_id"] for w in usage.json() if w["state"] == "busy" and w["job_id"]]
        return busy[0] if busy else None

    job_id = await eventually(running_job, timeout=30, every=0.05)
    await in_state(edge, job_id, tenant, "running")
    cancelled = await edge.post(f"/v1/jobs/{job_id}/cancel", json={"build_id": "b-1"}, headers=tenant_headers(tenant))
    assert cancelled.status_code == 200, cancelled.text
    assert set(cancelled.json()) == JOB_FIELDS
    assert cancelled.json()["state"] == "cancelled"
    sync = await asyncio.wait_for(waiting, 10)
    assert (sync.status_code, sync.json()) == (409, {"state": "cancelled"})
    again = await edge.post(f"/v1/jobs/{job_id}/cancel", json={"build_id": "b-1"}, headers=tenant_headers(tenant))
    assert (again.status_code, again.json()["state"]) == (200, "cancelled")

    other = await edge.post(f"/v1/jobs/{job_id}/cancel", json={"build_id": "b-1"}, headers=tenant_headers("other"))
    problem(other, 404)
    problem(
        await edge.post(f"/v1/jobs/{uuid.uuid4()}/cancel", json={"build_id": "b-1"}, headers=tenant_headers(tenant)),
        404,
    )
    assert "build_id" in problem(
        await edge.post(f"/v1/jobs/{job_id}/cancel", json={"build_id": "no/slash"}, headers=tenant_headers(tenant)),
        400,
    )

    done = await edge.post(
        "/v1/jobs/sync", params={"machine_type": "local"}, content=b"hi", headers=tenant_headers(tenant)
    )
    assert done.status_code == 200
    (completed,) = [j for j in await _jobs_of(edge, tenant) if j["state"] == "completed"]
    problem(
        await edge.post(f"/v1/jobs/{completed['id']}/cancel", json={"build_id": "b-2"}, headers=tenant_headers(tenant)),
        409,
    )


CANCEL_KNOWN = "known: build_id"


async def test_a_cancel_body_with_a_misspelt_or_mistyped_field_is_a_400_naming_it_and_the_job_runs_on(edge) -> None:
    """The body is read strictly: a field the transcoder would drop is named, and the running job is left alone
    until a body spelled either way (build_id or buildId) cancels it."""
    tenant = fresh_tenant()
    job = await edge.post(
        "/v1/jobs", params={"machine_type": "sleepy"}, content=b'{"seconds": 20}', headers=tenant_headers(tenant)
    )
    job_id = job.json()["id"]
    await in_state(edge, job_id, tenant, "running")
    cancel = f"/v1/jobs/{job_id}/cancel"
    other_id = str(uuid.uuid4())
    for content, detail in (
        (b'{"buildid": "b-1"}', f"body.buildid: unknown field; {CANCEL_KNOWN}"),
        (b'{"build": "b-1"}', f"body.build: unknown field; {CANCEL_KNOWN}"),
        (b'{"build_id": "b-1", "reason": "x"}', f"body.reason: unknown field; {CANCEL_KNOWN}"),
        (b'{"build_id": 7}', "body.build_id: must be a JSON string, not a number"),
        (b'{"buildId": null}', "body.buildId: null is not a value; leave the field out to leave it unset"),
        (b'["b-1"]', "body: must be a JSON object, not an array"),
        (b"", "body: empty; a JSON object is expected"),
        (
            f'{{"id": "{other_id}", "build_id": "b-1"}}'.encode(),
            f'body.id: conflicts with the path\'s id "{job_id}"; leave it out of the body',
        ),
    ):
        assert problem(await edge.post(cancel, content=content, headers=tenant_headers(tenant)), 400) == detail
    by_query = await edge.post(f"{cancel}?build_id=b-1", json={}, headers=tenant_headers(tenant))
    assert problem(by_query, 400) == "build_id: give it in the JSON body, not as a query parameter"
    assert (await edge.get(f"/v1/jobs/{job_id}", headers=tenant_headers(tenant))).json()["state"] == "running"

    cancelled = await edge.post(cancel, json={"buildId": "b-1", "id": job_id}, headers=tenant_headers(tenant))
    assert (cancelled.status_code, cancelled.json()["state"]) == (200, "cancelled"), cancelled.text
    again = await edge.post(cancel, json={"build_id": "b-1"}, headers=tenant_headers(tenant))
    assert (again.status_code, again.json()["state"]) == (200, "cancelled")


async def test_a_cancel_keeps_its_checks_in_the_seeds_order_whatever_the_body(edge) -> None:
    """The token (401) and the tenant header (400 naming it) come before the body is read."""
    cancel = f"/v1/jobs/{uuid.uuid4()}/cancel"
    problem(await edge.post(cancel, json={"buildid": "b"}), 401)
    assert "X-Strata-Tenant" in problem(await edge.post(cancel, json={"buildid": "b"}, headers=ADMIN), 400)


async def _jobs_of(edge: httpx.AsyncClient, tenant: str) -> list[dict[str, Any]]:
    """The tenant's jobs that reached a machine, read back through GET /v1/jobs/{id} from the usage feed."""
    events = (await edge.get("/v1/usage", headers=tenant_headers(tenant))).json()
    return [(await edge.get(f"/v1/jobs/{e['job_id']}", headers=tenant_headers(tenant))).json() for e in events]


async def test_another_tenants_job_answers_404_on_every_job_route(edge) -> None:
    owner = fresh_tenant()
    job = (
        await edge.post("/v1/jobs", params={"machine_type": "local"}, content=b"mine", headers=tenant_headers(owner))
    ).json()
    for path in (f"/v1/jobs/{job['id']}", f"/v1/jobs/{job['id']}/result"):
        assert problem(await edge.get(path, headers=tenant_headers("intruder")), 404) == "no such job"
    assert (await edge.get(f"/v1/jobs/{job['id']}", headers=tenant_headers(owner))).status_code == 200
    problem(await edge.get("/v1/jobs/not-a-uuid", headers=tenant_headers(owner)), 404)


# --- checks in the seed's order, and limits ----------------------------------------------------------------------


async def test_token_is_checked_before_the_tenant_header_before_the_parameters_and_nothing_is_queued(
    edge, store
) -> None:
    tenant = fresh_tenant()
    bad = {"machine_type": "local", "priority": "high"}
    assert "bearer" in problem(await edge.post("/v1/jobs", params=bad, content=b"x"), 401)
    problem(
        await edge.post(
            "/v1/jobs", params=bad, content=b"x", headers={"Authorization": "Bearer wrong", "X-Strata-Tenant": tenant}
        ),
        401,
    )
    assert "X-Strata-Tenant" in problem(
        await edge.post("/v1/jobs", params=bad, content=b"x", headers={"Authorization": f"Bearer {API_TOKEN}"}), 400
    )
    assert "priority" in problem(
        await edge.post("/v1/jobs", params=bad, content=b"x", headers=tenant_headers(tenant)), 422
    )
    for params in (
        {},
        {"machine_type": "local", "timeout_seconds": "0"},
        {"machine_type": "local", "timeout_seconds": "nan"},
        {"machine_type": "local", "wait_seconds": "-1"},
        {"machine_type": "local", "wait_seconds": "inf"},
    ):
        problem(await edge.post("/v1/jobs/sync", params=params, content=b"x", headers=tenant_headers(tenant)), 422)
    assert await queued_for(store, tenant) == 0
    # an unknown type is the original strata-pool package's 400, in its words, on both submit routes
    for route in ("/v1/jobs", "/v1/jobs/sync"):
        unknown = await edge.post(route, params={"machine_type": "nope"}, content=b"x", headers=tenant_headers(tenant))
        assert problem(unknown, 400) == "unknown machine type: 'nope'"
    assert await queued_for(store, tenant) == 0
    # the admin token is accepted wherever the API token is
    admitted = await edge.post(
        "/v1/jobs", params={"machine_type": "local"}, content=b"x", headers=tenant_headers(tenant, ADMIN_TOKEN)
    )
    assert admitted.status_code == 202


async def test_a_payload_at_the_limit_round_trips_and_one_byte_over_is_413_with_nothing_queued(edge, store) -> None:
    """32 MiB through the edge and back (the transcoder's body limits cover the service's); one byte more is the
    service's 413 naming the limit; far over, Envoy's own 413 — nothing queued either way."""
    tenant = fresh_tenant()
    at_limit = bytes(range(256)) * (MAX_PAYLOAD_BYTES // 256)
    assert len(at_limit) == MAX_PAYLOAD_BYTES
    reply = await edge.post(
        "/v1/jobs/sync", params={"machine_type": "local"}, content=at_limit, headers=tenant_headers(tenant)
    )
    assert reply.status_code == 200, reply.text[:200]
    assert reply.content == at_limit
    assert await queued_for(store, tenant) == 1

    over = await edge.post(
        "/v1/jobs", params={"machine_type": "local"}, content=at_limit + b"!", headers=tenant_headers(tenant)
    )
    assert str(MAX_PAYLOAD_BYTES) in problem(over, 413)
    try:
        far_over = await edge.post(
            "/v1/jobs", params={"machine_type": "local"}, content=at_limit * 2, headers=tenant_headers(tenant)
        )
    except (httpx.ReadError, httpx.WriteError, httpx.RemoteProtocolError):
        pass  # Envoy answered 413 and closed while the client was still writing: refused all the same
    else:
        problem(far_over, 413)
    assert await queued_for(store, tenant) == 1


def test_the_edge_gives_the_sync_submit_wait_job_and_run_jobs_routes_the_longest_wait_a_catalogue_allows() -> None:
    """Envoy's default route timeout is 15 s and its stream idle timeout 5 min: both are lifted on the long calls
    (a REST batch's included), above MAX_WAIT_SECONDS (boot + job timeout at their largest), for native gRPC and
    transcoded REST alike."""
    spec = EdgeSpec(upstreams=upstreams((POOL_DISPATCHER,), host="127.0.0.1"), descriptor_set=DESCRIPTORS)
    hcm = build_envoy_config(spec)["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]
    routes = hcm["typed_config"]["route_config"]["virtual_hosts"][0]["routes"]
    by_path = {r["match"]["path"]: r["route"] for r in routes if "path" in r["match"] and "route" in r}
    for method in ("SubmitJobSync", "WaitJob", "RunJobs", "RunJobsJson"):
        route = by_path[f"/thermostat.pool.v1.PoolDispatcher/{method}"]
        assert float(route["timeout"].rstrip("s")) > MAX_WAIT_SECONDS
        assert float(route["idle_timeout"].rstrip("s")) > MAX_WAIT_SECONDS
        assert route["cluster"] == POOL_DISPATCHER.name
    (short,) = [r["route"] for r in routes if r["match"].get("prefix") == "/thermostat.pool.v1.PoolDispatcher/"]
    assert float(short["timeout"].rstrip("s")) < MAX_WAIT_SECONDS
    (transcoder,) = [f["typed_config"] for f in hcm["typed_config"]["http_filters"] if f["name"] == TRANSCODER]
    assert transcoder["max_request_body_size"] > MAX_PAYLOAD_BYTES
    assert transcoder["max_response_body_size"] > MAX_PAYLOAD_BYTES


async def test_a_sync_wait_longer_than_envoys_default_route_timeout_is_not_cut(edge) -> None:
    """One real wait past 15 s: the job sleeps 16 s and the edge hands back its 200."""
    tenant = fresh_tenant()
    started = time.monotonic()
    reply = await edge.post(
        "/v1/jobs/sync",
        params={"machine_type": "sleepy", "wait_seconds": "40"},
        content=b'{"seconds": 16}',
        headers=tenant_headers(tenant),
        timeout=60,
    )
    assert (reply.status_code, reply.content) == (200, b"slept 16")
    assert time.monotonic() - started >= 16


async def test_path_bound_fields_cannot_be_overridden_by_a_query_parameter(edge) -> None:
    tenant = fresh_tenant()
    job = (
        await edge.post("/v1/jobs", params={"machine_type": "local"}, content=b"x", headers=tenant_headers(tenant))
    ).json()
    for path in (f"/v1/jobs/{job['id']}?id={uuid.uuid4()}", f"/v1/jobs/{job['id']}/result?i%64=x"):
        assert "'id'" in problem(await edge.get(path, headers=tenant_headers(tenant)), 400)
    overridden = await edge.post(
        f"/v1/jobs/{job['id']}/cancel?id={uuid.uuid4()}", json={"build_id": "b"}, headers=tenant_headers(tenant)
    )
    assert "'id'" in problem(overridden, 400)


# --- hints, the catalogue, listings, health ----------------------------------------------------------------------


async def test_a_hint_is_202_with_started_and_reason(edge) -> None:
    tenant = fresh_tenant()
    first = await edge.post("/v1/hints", json={"machine_type": "local"}, headers=tenant_headers(tenant))
    assert (first.status_code, first.json()) == (202, {"started": True, "reason": None})
    again = await edge.post("/v1/hints", json={"machine_type": "local"}, headers=tenant_headers(tenant))
    assert (again.status_code, again.json()) == (202, {"started": False, "reason": "no_demand"})
    unknown = await edge.post("/v1/hints", json={"machine_type": "nope"}, headers=tenant_headers(tenant))
    job = await edge.post("/v1/jobs?machine_type=nope", content=b"x", headers=tenant_headers(tenant))
    # an unknown type is one answer on both routes: 400, in the job route's words
    assert problem(unknown, 400) == problem(job, 400) == "unknown machine type: 'nope'"
    # no body at all is the empty object: the missing type is the seed's 422, naming it
    assert "machine_type" in problem(await edge.post("/v1/hints", headers=tenant_headers(tenant)), 422)


async def test_a_hint_body_is_read_strictly_and_a_refused_one_starts_no_machine(edge) -> None:
    """A misspelt or mistyped field is 400 naming it (the transcoder would have dropped it and answered 422 for an
    empty type); nothing starts until a body spelled either way (machine_type or machineType) asks."""
    tenant = fresh_tenant()
    known = "known: machine_type"
    for content, detail in (
        (b'{"machine": "local"}', f"body.machine: unknown field; {known}"),
        (b'{"machinetype": "local"}', f"body.machinetype: unknown field; {known}"),
        (b'{"machine_type": "local", "tenant_id": "x"}', f"body.tenant_id: unknown field; {known}"),
        (b'{"machine_type": ["local"]}', "body.machine_type: must be a JSON string, not an array"),
        (b'"local"', "body: must be a JSON object, not a string"),
    ):
        assert problem(await edge.post("/v1/hints", content=content, headers=tenant_headers(tenant)), 400) == detail
    assert (await edge.get("/v1/workers", headers=tenant_headers(tenant))).json() == []
    started = await edge.post("/v1/hints", json={"machineType": "local"}, headers=tenant_headers(tenant))
    assert (started.status_code, started.json()) == (202, {"started": True, "reason": None})
    problem(await edge.post("/v1/hints", json={"machine": "local"}), 401)


async def test_machine_types_are_a_top_level_array_redacted_without_the_admin_token(edge) -> None:
    shown = await edge.get("/v1/machine-types", headers=tenant_headers("any"))
    assert shown.status_code == 200
    catalogue = shown.json()
    assert [t["name"] for t in catalogue] == ["local", "sleepy", "quick", "failing"]
    assert catalogue[0]["env"] == {"EXTRA_SETTING": "<redacted>"}
    assert catalogue[0]["provider_options"] == {"note": "<redacted>"}
    assert SECRET not in shown.text
    admin = (await edge.get("/v1/machine-types", headers=ADMIN)).json()
    assert admin[0]["env"] == {"EXTRA_SETTING": SECRET}
    assert admin[0]["max_workers"] is None and admin[0]["gpu_count"] == 1


async def test_put_machine_types_needs_the_admin_token_and_names_the_entry_and_field(edge) -> None:
    catalogue = (await edge.get("/v1/machine-types", headers=ADMIN)).json()
    problem(await edge.put("/v1/machine-types", json=catalogue, headers=tenant_headers("any")), 403)
    problem(await edge.put("/v1/machine-types", json=catalogue), 401)
    for entry, expected in (
        ({"cpus": "4"}, "cpus"),
        ({"max_workers": 0}, "max_workers"),
        ({"surprise": 1}, "surprise"),
        ({"cool_down_seconds": -1}, "cool_down_seconds"),
    ):
        broken = [catalogue[0], {**catalogue[1], **entry}]
        detail = problem(await edge.put("/v1/machine-types", json=broken, headers=ADMIN), 400)
        assert expected in detail and "sleepy" in detail, detail
    duplicate = problem(await edge.put("/v1/machine-types", json=[catalogue[0], catalogue[0]], headers=ADMIN), 400)
    assert "name" in duplicate
    stored = await edge.put("/v1/machine-types", json=catalogue, headers=ADMIN)
    assert (stored.status_code, stored.json()) == (200, catalogue)
    assert (await edge.get("/v1/machine-types", headers=ADMIN)).json() == catalogue


async def test_put_machine_types_is_403_when_no_admin_token_is_configured(store, tmp_path) -> None:
    env = pool_env(CATALOGUE)
    del env["STRATA_POOL_ADMIN_TOKEN"]
    async with start_pool(store, env) as pool, edge_for(pool.address, tmp_path) as edge:
        catalogue = (await edge.get("/v1/machine-types", headers=tenant_headers("any"))).json()
        detail = problem(await edge.put("/v1/machine-types", json=catalogue, headers=tenant_headers("any")), 403)
        assert "no admin token" in detail


async def test_workers_and_usage_are_the_callers_tenants_unless_the_admin_token_asks(edge) -> None:
    mine, theirs = fresh_tenant(), fresh_tenant()
    for tenant in (mine, theirs):
        reply = await edge.post(
            "/v1/jobs/sync", params={"machine_type": "local"}, content=b"x", headers=tenant_headers(tenant)
        )
        assert reply.status_code == 200

    workers = (await edge.get("/v1/workers", headers=tenant_headers(mine))).json()
    assert [w["tenant_id"] for w in workers] == [mine]
    (worker,) = workers
    assert set(worker) == WORKER_FIELDS
    assert (worker["machine_type"], worker["backend"], worker["state"]) == ("local", "local", "warm")
    assert isinstance(worker["created_at"], float) and worker["region"] is None and worker["job_id"] is None
    # the original strata-pool names beside today's: current_job_id is job_id; the machine's backend id and endpoint
    # are shown, never its token
    assert worker["current_job_id"] is None and worker["endpoint"].startswith("http://127.0.0.1:")
    assert isinstance(worker["backend_id"], str) and worker["backend_id"]
    assert "token" not in json.dumps(worker).lower()
    usage = (await edge.get("/v1/usage", headers=tenant_headers(mine))).json()
    (event,) = usage
    assert set(event) == USAGE_FIELDS
    assert (event["tenant_id"], event["terminal_state"], event["worker_id"]) == (mine, "completed", worker["id"])
    assert isinstance(event["position"], int) and isinstance(event["duration_seconds"], float)
    assert event["duration_ms"] == event["duration_seconds"] * 1000 and isinstance(event["duration_ms"], float)
    assert event["completed_at"] == event["ended_at"] and str(uuid.UUID(event["id"])) == event["id"]

    everyone = {w["tenant_id"] for w in (await edge.get("/v1/workers", headers=ADMIN)).json()}
    assert {mine, theirs} <= everyone
    one = (await edge.get("/v1/workers", params={"tenant_id": theirs}, headers=ADMIN)).json()
    assert [w["tenant_id"] for w in one] == [theirs]
    assert {e["tenant_id"] for e in (await edge.get("/v1/usage", headers=ADMIN)).json()} >= {mine, theirs}
    assert [
        e["tenant_id"] for e in (await edge.get("/v1/usage", params={"tenant_id": theirs}, headers=ADMIN)).json()
    ] == [theirs]
    # without the admin token ?tenant_id= changes nothing, and no tenant header is a 400
    assert [
        w["tenant_id"]
        for w in (await edge.get("/v1/workers", params={"tenant_id": theirs}, headers=tenant_headers(mine))).json()
    ] == [mine]
    problem(await edge.get("/v1/usage", headers={"Authorization": f"Bearer {API_TOKEN}"}), 400)
    problem(await edge.get("/v1/workers"), 401)


async def test_a_nul_in_a_parameter_is_400_naming_it_not_a_500_from_the_store(edge) -> None:
    """Found by the chaos fuzzing: an admin's `tenantId=%00` reached Postgres, which cannot hold U+0000."""
    for path in ("/v1/usage?tenantId=%00", "/v1/workers?tenant_id=a%00b"):
        detail = problem(await edge.get(path, headers=ADMIN), 400)
        assert detail == "tenant_id: must not contain a NUL character (U+0000)"
    session = await edge.post(
        "/v1/jobs?machine_type=local&session_id=%00", content=b"x", headers=tenant_headers(fresh_tenant())
    )
    assert problem(session, 400).startswith("session_id:")


async def test_an_unexpected_error_is_a_500_whose_detail_says_only_that_the_pool_logged_it(
    served: tuple[RunningPool, httpx.AsyncClient], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The problem's detail is built from the gRPC one, which never quotes the exception (its text may hold a DSN)."""
    pool, edge = served

    async def fails(*args: object) -> None:
        raise RuntimeError("the store said no: postgres://pool:hunter2@db")

    monkeypatch.setattr(pool.dispatcher.repo.jobs, "get_job", fails)
    answer = await edge.get(f"/v1/jobs/{uuid.uuid4()}", headers=tenant_headers(fresh_tenant()))
    assert problem(answer, 500) == "internal error (logged by pool-dispatcher)"
    assert "hunter2" not in answer.text and "RuntimeError" not in answer.text


async def test_health_shows_the_pools_machine_types_and_machine_counts_without_a_token(edge) -> None:
    tenant = fresh_tenant()
    assert (await edge.post("/v1/hints", json={"machine_type": "local"}, headers=tenant_headers(tenant))).json()[
        "started"
    ]
    health = await edge.get("/health")
    assert health.status_code == 200, health.text
    (pool,) = health.json()["upstreams"]
    assert (pool["name"], pool["serving"]) == (POOL_DISPATCHER.name, True)
    # the original strata-pool's top level: "ok", the machines by state (only the states present), the type names
    top = health.json()
    assert (top["status"], top["serving"]) == ("ok", "SERVING")
    assert top["machine_types"] == ["local", "sleepy", "quick", "failing"]
    assert top["workers"] == {state: n for state, n in pool["detail"]["machines"].items() if n > 0}
    assert top["workers"] and all(n > 0 for n in top["workers"].values())
    detail = pool["detail"]
    assert detail["machine_types"] == ["local", "sleepy", "quick", "failing"]
    assert set(detail["machines"]) >= {"starting", "warm", "busy", "stopping"}
    assert all(isinstance(n, int) for n in detail["machines"].values())
    assert detail["machines"]["starting"] + detail["machines"]["warm"] >= 1
    assert "Authorization" not in health.request.headers


async def test_grpc_callers_wait_on_a_job_through_the_edge_with_wait_job(edge) -> None:
    """WaitJob (gRPC only) through the edge's native gRPC route: the job's states, ending when the job does."""
    tenant = fresh_tenant()
    job = (
        await edge.post(
            "/v1/jobs", params={"machine_type": "sleepy"}, content=b'{"seconds": 1}', headers=tenant_headers(tenant)
        )
    ).json()
    async with grpc.aio.insecure_channel(f"127.0.0.1:{edge.base_url.port}") as channel:
        stub = pool_pb2_grpc.PoolDispatcherStub(channel)
        metadata = (("authorization", f"Bearer {API_TOKEN}"), ("x-strata-tenant", tenant))
        states = [j.state async for j in stub.WaitJob(pool_pb2.WaitJobRequest(id=job["id"]), metadata=metadata)]
    assert states[-1] == "completed"
    assert len(states) == len(set(states)) >= 2


async def test_grpc_callers_run_many_jobs_over_one_run_jobs_stream_through_the_edge(edge, store: Store) -> None:
    """RunJobs (gRPC only) through the edge's native gRPC passthrough: every job answered by its tag, a refused
    one among them, over one bidirectional stream; the stream's auth refusal as the unary calls'."""
    tenant = fresh_tenant()
    metadata = (("authorization", f"Bearer {API_TOKEN}"), ("x-strata-tenant", tenant))

    def job(tag: int, payload: bytes, machine_type: str = "local") -> pool_pb2.RunJobsRequest:
        request = pool_pb2.RunJobsRequest(
            tag=tag, job=pool_pb2.SubmitJobSyncRequest(machine_type=machine_type, wait_seconds="60")
        )
        request.job.payload.data = payload
        return request

    requests = [job(tag, BINARY + bytes([tag])) for tag in range(1, 11)] + [job(11, b"x", "no-such-type")]
    async with grpc.aio.insecure_channel(f"127.0.0.1:{edge.base_url.port}") as channel:
        stub = pool_pb2_grpc.PoolDispatcherStub(channel)
        answers = {a.tag: a async for a in stub.RunJobs(iter(requests), metadata=metadata)}
        refused = stub.RunJobs(metadata=(("x-strata-tenant", tenant),))
        assert await refused.code() == grpc.StatusCode.UNAUTHENTICATED
    assert sorted(answers) == list(range(1, 12))
    assert all(answers[tag].result == BINARY + bytes([tag]) for tag in range(1, 11))
    assert answers[11].error.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert answers[11].error.detail == "unknown machine type: 'no-such-type'"
    assert await queued_for(store, tenant) == 10  # one job row per job run, none for the refused request


def _post_over_the_limit(port: int, path: str, size: int, method: str = "POST") -> tuple[int, dict[str, str], bytes]:
    """POST (or `method`) `size` bytes to the edge on a raw socket, reading the answer while the body is still being
    written: Envoy answers a body over its limit before the client has sent it all, then closes."""
    answer = bytearray()
    with socket.create_connection(("127.0.0.1", port), timeout=30) as conn:
        head = (
            f"{method} {path} HTTP/1.1\r\nHost: edge\r\nAuthorization: Bearer {API_TOKEN}\r\n"
            f"X-Strata-Tenant: {fresh_tenant()}\r\nContent-Length: {size}\r\n\r\n"
        )
        conn.sendall(head.encode())

        def read() -> None:
            with contextlib.suppress(OSError):
                while chunk := conn.recv(65536):
                    answer.extend(chunk)
                    if b"\r\n\r\n" in answer:
                        top, _, rest = bytes(answer).partition(b"\r\n\r\n")
                        length = re.search(rb"(?im)^content-length: *(\d+)", top)
                        if length and len(rest) >= int(length.group(1)):
                            return

        reader = threading.Thread(target=read)
        reader.start()
        chunk, sent = b"A" * 1024 * 1024, 0
        with contextlib.suppress(OSError):
            while sent < size and reader.is_alive():
                conn.sendall(chunk)
                sent += len(chunk)
        reader.join(timeout=30)
    top, _, body = bytes(answer).partition(b"\r\n\r\n")
    status_line, *header_lines = top.decode().split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (h.partition(":") for h in header_lines)}
    return int(status_line.split()[1]), headers, body


async def test_a_body_over_the_edges_limit_is_a_problem_stating_the_limit_and_the_route(edge) -> None:
    """Envoy's transcoder refuses a REST body past its buffer with its own words (`Request rejected because the
    transcoder's internal buffer size exceeds the configured limit.`): the edge answers a problem that states the
    limit and the route the request named instead."""
    port = int(str(edge.base_url).rsplit(":", 1)[1].rstrip("/"))
    path = "/v1/jobs?machine_type=local"
    status, headers, body = await asyncio.to_thread(_post_over_the_limit, port, path, 2 * MAX_PAYLOAD_BYTES)
    assert status == 413, body[:300]
    assert headers["content-type"] == "application/problem+json", headers
    detail = json.loads(body)["detail"]
    assert detail == f"body: over 33 MiB, the largest REST body the edge reads (POST {path}); nothing was sent on"
    assert "transcoder" not in detail


async def test_a_body_over_the_limit_on_a_put_route_names_put(edge) -> None:
    """The transcoder rewrites every method to POST; the detail names the one the client sent (issue 35)."""
    port = int(str(edge.base_url).rsplit(":", 1)[1].rstrip("/"))
    path = "/v1/machine-types"
    status, _, body = await asyncio.to_thread(_post_over_the_limit, port, path, 2 * MAX_PAYLOAD_BYTES, "PUT")
    assert status == 413, body[:300]
    assert f"(PUT {path})" in json.loads(body)["detail"]
