"""A frozen store (issue 14, item 3): GET answers within the store read bound every time, the first request
after the freeze included, without the store's fields; a wake fails closed (503) and the first wake after
the store thaws succeeds.

Frozen for real: every process of a Postgres server of the test's own is SIGSTOPped, so connections open
(the kernel accepts them) and no statement is ever answered, as with a hung database host.
"""

from __future__ import annotations

import grpc
import pytest

from tests.fixtures.postgres import frozen
from tests.fixtures.services import VOLUME
from tests.integration.pod_controller.harness import controller, start
from thermostat.pods.v1 import pods_pb2
from thermostat.store.db import Store

QWEN = pods_pb2.GetPodRequest(name="qwen")
READ_BOUND = 0.5
# The deadline a GET must meet while the store is frozen: the read bound plus room for the simulator's list
# and a loaded machine — and far below what an unbounded read costs (the pool's 30 s statement timeout).
GET_DEADLINE = READ_BOUND + 5.5


async def test_a_frozen_store_leaves_gets_answering_without_its_fields_and_wakes_failing_closed_until_it_thaws(
    runpod_sim, dedicated_postgres
) -> None:
    """Three GETs, a watch and a history page in the freeze each answer within the deadline; the wake is a
    503 then, and the next one after the thaw succeeds and is recorded."""
    pod = runpod_sim.add_pod(volume_id=VOLUME, status="RUNNING")
    async with (
        await Store.open(dedicated_postgres.dsn, max_size=4, application_name="frozen-store") as store,
        controller(runpod_sim, store, STORE_READ_TIMEOUT_SECONDS=str(READ_BOUND)) as c,
    ):
        assert (await start(c.public)).code is grpc.StatusCode.OK
        before = await c.public.GetPod(QWEN, timeout=10)
        assert before.HasField("last_wake")

        with frozen(dedicated_postgres):
            for _ in range(3):  # the first GET after the freeze is no slower than the rest
                view = await c.public.GetPod(QWEN, timeout=GET_DEADLINE)
                assert (view.pod_id, view.status, view.is_running) == (pod, "RUNNING", True)
                assert not view.HasField("last_wake")
                assert not view.HasField("ready_since")
            watch = c.public.WatchPod(pods_pb2.WatchPodRequest(name="qwen"), timeout=GET_DEADLINE)
            watched = await watch.read()
            watch.cancel()
            assert (watched.pod.status, watched.pod.HasField("last_wake")) == ("RUNNING", False)
            with pytest.raises(grpc.aio.AioRpcError) as history:
                await c.public.GetPodHistory(pods_pb2.GetPodHistoryRequest(name="qwen"), timeout=GET_DEADLINE)
            assert history.value.code() is grpc.StatusCode.UNAVAILABLE  # the history is the store's alone
            refused = await start(c.public, timeout=GET_DEADLINE)
            assert refused.code is grpc.StatusCode.UNAVAILABLE
            assert "store unreachable" in refused.details

        woken = await start(c.public, timeout=10)
        assert woken.code is grpc.StatusCode.OK
        assert woken.reply is not None
        assert woken.reply.outcome == "AlreadyRunning"
        after = await c.public.GetPod(QWEN, timeout=10)
        assert after.HasField("last_wake")
        assert after.last_wake.attempt_id != before.last_wake.attempt_id
