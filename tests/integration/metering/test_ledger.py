"""The ledger lands every billable action exactly once: across pages, a crash between read and write, a
replayed page, a metering restart and a restart of the pod controller it reads from."""

from __future__ import annotations

import grpc
import pytest

from tests.fixtures.polling import eventually
from tests.fixtures.services import RunningService, pod_controller_env, start_pod_controller
from tests.integration.metering.conftest import (
    crash_on_page,
    feed_ids,
    ledger_ids,
    ledger_on,
    stored_position,
    write_actions,
)
from thermostat.dev.simulators.runpod.server import RunPodSimulator
from thermostat.pods.v1 import pods_pb2
from thermostat.store.db import Store


async def test_every_action_lands_once_in_feed_order_across_pages(
    pod_controller: RunningService, db_store: Store
) -> None:
    """Thirty actions read seven at a time: all of them, in order, and the position at the feed's head."""
    await write_actions(db_store.pool, 30)
    async with ledger_on(pod_controller, db_store, page_size=7) as rig:
        assert await rig.ledger.catch_up(rig.feed) == 30
    assert await ledger_ids(db_store.pool) == await feed_ids(db_store.pool)
    assert await stored_position(db_store.pool) == 30


async def test_a_crash_between_read_and_write_loses_nothing_and_doubles_nothing(
    pod_controller: RunningService, db_store: Store
) -> None:
    """A metering that dies after reading its third page and before landing it lands the first two; a
    restarted one reads the third again from the stored position and lands everything once."""
    await write_actions(db_store.pool, 30)
    async with ledger_on(pod_controller, db_store, page_size=7, after_read=crash_on_page(3)) as rig:
        with pytest.raises(SystemExit):
            await rig.ledger.catch_up(rig.feed)
    assert (len(await ledger_ids(db_store.pool)), await stored_position(db_store.pool)) == (14, 14)

    async with ledger_on(pod_controller, db_store, page_size=7) as restarted:
        assert await restarted.ledger.catch_up(restarted.feed) == 16
    assert await ledger_ids(db_store.pool) == await feed_ids(db_store.pool)


async def test_a_replayed_page_adds_nothing_and_never_moves_the_position_back(
    pod_controller: RunningService, db_store: Store
) -> None:
    """The first page landed again after everything (a lapsed leader finishing late) adds no entry and leaves
    the position at the head."""
    await write_actions(db_store.pool, 20)
    async with ledger_on(pod_controller, db_store, page_size=10) as rig:
        first = await rig.feed.read(0, 10)
        assert await rig.feed.land(rig.repository, first) == 10
        assert await rig.feed.land(rig.repository, first) == 0
        await rig.ledger.catch_up(rig.feed)
        assert await rig.feed.land(rig.repository, first) == 0
    assert await ledger_ids(db_store.pool) == await feed_ids(db_store.pool)
    assert await stored_position(db_store.pool) == 20


async def test_an_upstream_restart_is_recorded_and_the_ledger_resumes_from_its_position(
    runpod_sim: RunPodSimulator, db_store: Store
) -> None:
    """With the controller down a read fails and says so in the feed's status; once it is back (same address,
    more actions meanwhile) the ledger reads on from where it stopped."""
    env = pod_controller_env(runpod_sim)
    await write_actions(db_store.pool, 12)
    async with start_pod_controller(env, db_store) as controller, ledger_on(controller, db_store, timeout=4) as rig:
        await rig.ledger.run_once()
        port = int(controller.address.rsplit(":", 1)[1])
        await controller.host.stop(0.5)
        await write_actions(db_store.pool, 9)
        await rig.ledger.run_once()
        (status,) = await rig.repository.feeds()
        assert (status.error, status.position) == ("unreadable (DEADLINE_EXCEEDED)", 12)
        async with start_pod_controller(env, db_store, port=port):
            # the ledger's channel reconnects on gRPC's backoff (1 s, then x1.6): a read inside the pause fails as
            # the one before did, and the next pass reads on; the passes are repeated until one has read
            async def read_on() -> bool | None:
                await rig.ledger.run_once()
                (state,) = await rig.repository.feeds()
                return True if not state.error else None

            await eventually(read_on, timeout=60, every=0.2)
    assert await ledger_ids(db_store.pool) == await feed_ids(db_store.pool)
    assert await stored_position(db_store.pool) == 21


async def test_the_feed_answers_over_the_internal_rpc_only_with_the_token(
    pod_controller: RunningService, db_store: Store
) -> None:
    """ListBillableActions is an internal RPC: a caller without the deployment's token is refused."""
    async with grpc.aio.insecure_channel(pod_controller.address) as channel:
        call = channel.unary_unary(
            "/thermostat.pods.v1.PodControllerInternal/ListBillableActions",
            request_serializer=pods_pb2.ListBillableActionsRequest.SerializeToString,
            response_deserializer=pods_pb2.ListBillableActionsResponse.FromString,
        )
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await call(pods_pb2.ListBillableActionsRequest())
    assert refused.value.code() is grpc.StatusCode.UNAUTHENTICATED
