"""The orphan sweep over the RunPod simulator: a pool-named pod made behind the store's back is reported, and
terminated (on its second sighting) and recorded with trigger `orphan` when ORPHAN_SWEEP=terminate; a machine
the store knows (one still booting, whose provider id is not recorded yet, included) is never swept."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import grpc
import httpx
import pytest

from tests.fixtures.polling import eventually
from tests.integration.pool_dispatcher.conftest import ADMIN, caller, pool_env, start_pool
from thermostat.dev.simulators.fly import FlySimulator
from thermostat.dev.simulators.machines import REFERENCE_WORKER
from thermostat.dev.simulators.runpod.server import RunPodSimulator
from thermostat.dev.simulators.serving import RecordedRequest
from thermostat.pool.v1 import pool_pb2
from thermostat.pool_dispatcher.orphan_sweep import FoundOrphan
from thermostat.store.db import Store

RUNPOD_KEY = "rpa_ORPHANKEY_5e1d"
FLY_TOKEN = "fo1_ORPHANTOKEN_2c7e"
FLY_APP = "tp-orphans"
TYPE = {"name": "remote", "backend": "runpod", "image": "strata-worker:latest", "job_timeout_seconds": 90}


@pytest.fixture(scope="module")
def running_runpod() -> Iterator[RunPodSimulator]:
    with RunPodSimulator(api_key=RUNPOD_KEY, machine_command=REFERENCE_WORKER) as simulator:
        yield simulator


@pytest.fixture
def runpod(running_runpod: RunPodSimulator) -> Iterator[RunPodSimulator]:
    running_runpod.reset()
    yield running_runpod
    running_runpod.reset()


def env(runpod: RunPodSimulator, **overrides: str) -> dict[str, str]:
    return pool_env(
        [TYPE],
        POOL_RUNPOD_API_KEY=RUNPOD_KEY,
        RUNPOD_V2_BASE_URL=runpod.base_url,
        RUNPOD_PROXY_URL_TEMPLATE=runpod.proxy_url_template,
        ORPHAN_SWEEP_SECONDS="3600",  # the test runs each pass itself
        **overrides,
    )


async def pod_behind_the_stores_back(runpod: RunPodSimulator, name: str) -> str:
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {RUNPOD_KEY}"}) as http:
        created = await http.post(
            f"{runpod.base_url}/pods", json={"name": name, "image": "x", "cpu": {"id": "cpu3g", "vcpuCount": 2}}
        )
    assert created.is_success, created.text
    pod_id: str = created.json()["id"]
    return pod_id


def live(runpod: RunPodSimulator) -> set[str]:
    return {str(pod["id"]) for pod in (state["v2"] for state in runpod.pods()) if pod["status"] != "TERMINATED"}


async def test_an_orphan_is_reported_and_left_running_by_default(pool_store: Store, runpod: RunPodSimulator) -> None:
    stray = str(uuid.uuid4())
    pod_id = await pod_behind_the_stores_back(runpod, f"thermostat-remote-{stray}")
    async with start_pool(pool_store, env(runpod)) as pool:
        (found,) = await pool.orphans.sweep()
        assert (found.backend, found.orphan.provider_id, found.orphan.machine_id) == ("runpod", pod_id, stray)
        assert not found.terminated
        assert pool.orphans.found_total == 1
    assert pod_id in live(runpod)
    assert await pool_store.pool.fetchval("SELECT count(*) FROM pool_orphan_stops") == 0


async def test_with_orphan_sweep_terminate_an_orphan_is_terminated_and_recorded_with_trigger_orphan(
    pool_store: Store, runpod: RunPodSimulator
) -> None:
    stray = str(uuid.uuid4())
    pod_id = await pod_behind_the_stores_back(runpod, f"thermostat-remote-{stray}")
    async with start_pool(pool_store, env(runpod, ORPHAN_SWEEP="terminate")) as pool:
        (first,) = await pool.orphans.sweep()
        assert not first.terminated  # a stop in flight can look like an orphan once: only a second sighting ends it
        assert pod_id in live(runpod)
        (second,) = await pool.orphans.sweep()
        assert second.terminated
        assert await pool.orphans.sweep() == ()  # ended: the next pass lists it no more
    assert pod_id not in live(runpod)
    (row,) = await pool_store.pool.fetch(
        "SELECT backend, provider_id, machine_id::text, trigger FROM pool_orphan_stops"
    )
    assert tuple(row) == ("runpod", pod_id, stray, "orphan")
    # and on the machine-events feed metering reads: an orphan stop, no tenant, no machine time
    (event,) = await pool_store.pool.fetch(
        "SELECT machine_id::text, tenant_id, machine_type, event FROM pool_machine_events WHERE machine_id = $1",
        uuid.UUID(stray),
    )
    assert tuple(event) == (stray, "", "remote", "orphan-stopped")


async def test_machines_the_store_knows_and_pods_not_named_by_the_pool_are_never_swept(
    pool_store: Store, runpod: RunPodSimulator
) -> None:
    """A booted machine, a booting one whose row has no provider id yet, and another pod of the account stay."""
    async with start_pool(pool_store, env(runpod, ORPHAN_SWEEP="terminate")) as pool:
        job = await pool.submit(b"x", machine_type="remote")
        assert (await pool.finished(job.id)).state == "completed"
        booting = str(uuid.uuid4())
        await pool_store.pool.execute(
            "INSERT INTO pool_machines (id, tenant_id, machine_type, image, backend, token, state, owner,"
            " owner_term, cool_down_seconds) VALUES ($1, 'acme', 'remote', 'strata-worker:latest', 'runpod', 't',"
            " 'starting', 'pool-other', 1, 60)",
            uuid.UUID(booting),
        )
        booting_pod = await pod_behind_the_stores_back(runpod, f"thermostat-remote-{booting}")
        other = await pod_behind_the_stores_back(runpod, "llama-70b")
        before = live(runpod)
        assert len(before) == 3 and {booting_pod, other} <= before
        assert await pool.orphans.sweep() == ()
        assert live(runpod) == before


async def test_get_v1_orphans_shows_the_last_pass_to_the_admin_token_only(
    pool_store: Store, runpod: RunPodSimulator
) -> None:
    stray = str(uuid.uuid4())
    pod_id = await pod_behind_the_stores_back(runpod, f"thermostat-remote-{stray}")
    async with start_pool(pool_store, env(runpod)) as pool:
        await pool.orphans.sweep()
        body = await pool.stub.ListOrphans(pool_pb2.ListOrphansRequest(), metadata=ADMIN)
        assert json.loads(body.data) == {
            "mode": "report",
            "found_total": 1,
            "orphans": [
                {"backend": "runpod", "provider_id": pod_id, "name": f"thermostat-remote-{stray}",
                 "machine_id": stray, "terminated": False}
            ],
        }  # fmt: skip
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await pool.stub.ListOrphans(pool_pb2.ListOrphansRequest(), metadata=caller())
        assert refused.value.code() is grpc.StatusCode.PERMISSION_DENIED


async def test_a_fly_machine_created_without_its_id_in_the_answer_is_found_by_the_orphan_sweep(
    pool_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fly answers a create 200 without the machine id and the backend's own listing fails: the boot fails, and the
    machine it made, named with a machine id no row holds any more, is the orphan sweep's to find (issue 35)."""
    with FlySimulator(token=FLY_TOKEN, apps=[FLY_APP]) as fly:
        fly.answer_next_create(200, with_id=False)
        original, failed_listings = fly._handle, []

        def first_listing_fails(request: RecordedRequest) -> Any:
            if request.method == "GET" and request.path.endswith("/machines") and not failed_listings:
                failed_listings.append(request.path)
                return (503, {"Content-Type": "application/json"}, b'{"error": "unavailable"}')
            return original(request)

        monkeypatch.setattr(fly, "_handle", first_listing_fails)
        fly_type = {"name": "on-fly", "backend": "fly", "image": "strata-worker:latest"}
        fly_env = pool_env(
            [fly_type], FLY_API_TOKEN=FLY_TOKEN, POOL_FLY_APP=FLY_APP, POOL_FLY_REGION="sjc",
            POOL_FLY_BASE_URL=fly.base_url, POOL_FLY_ENDPOINT_TEMPLATE=fly.endpoint_template,
            ORPHAN_SWEEP_SECONDS="3600",
        )  # fmt: skip
        async with start_pool(pool_store, fly_env) as pool:
            job = await pool.submit(b"x", machine_type="on-fly")

            async def failed_boot() -> str | None:
                seen = await pool.job(job.id)
                return seen.error if "without a machine id" in seen.error else None

            assert "could not list machines: look for one named" in await eventually(failed_boot, timeout=10)
            stray = fly.machines()[0]  # the first machine made: the one answered without its id (a retry may follow)

            async def swept() -> tuple[FoundOrphan, ...] | None:
                return found if (found := await pool.orphans.sweep()) else None

            (found,) = await eventually(swept, timeout=10, every=0.1)
            assert (found.backend, found.orphan.provider_id) == ("fly", stray.id)
