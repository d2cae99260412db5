"""Records never block the action they record (#2050); names resolve before RunPod; several pods coexist."""

from __future__ import annotations

import json
import logging
import uuid

import grpc
import pytest

from tests.fixtures.postgres import open_store
from tests.fixtures.services import OPERATOR, VOLUME
from tests.integration.pod_controller.harness import A100, api_calls, controller, history, pods_on, start
from thermostat.pod_controller.wake_service import WakeService
from thermostat.pods.v1 import pods_pb2

OTHER_VOLUME = "agv6w2qcg7"  # the simulator's US-TX-3 volume


def _error_entries(caplog: pytest.LogCaptureFixture) -> list[dict[str, object]]:
    """The JSON entries of every ERROR record saying a billable action was not persisted."""
    entries = []
    for record in caplog.records:
        message = record.getMessage()
        if record.levelno == logging.ERROR and "billable action NOT persisted" in message:
            entries.append(json.loads(message.split("): ", 1)[1]))
    return entries


async def test_a_stop_succeeds_with_the_action_table_gone_and_logs_the_full_entry_at_error(
    pods_stub, runpod_sim, db_store, caplog
) -> None:
    """pod_actions renamed away: the stop still reaches RunPod and answers ok; ERROR carries every field."""
    caplog.set_level(logging.INFO)
    pod = runpod_sim.add_pod(volume_id=VOLUME, status="RUNNING")
    await db_store.pool.execute("ALTER TABLE pod_actions RENAME TO pod_actions_gone")
    reply = await pods_stub.StopPod(pods_pb2.StopPodRequest(name="qwen"), metadata=OPERATOR, timeout=10)
    assert reply.ok
    assert runpod_sim.pod(pod)["status"] == "EXITED"
    (entry,) = _error_entries(caplog)
    assert uuid.UUID(entry.pop("stop_id"))  # the stop it belongs to, written (to pod_stops) before the call
    assert entry == {
        "pod_name": "qwen",
        "action": "Stop",
        "pod_id": pod,
        "ok": True,
        "trigger": "manual",
        "http_status": 200,
        "gpu_id": None,
        "price_per_hour": None,
        "detail": None,
    }


async def test_a_wake_with_both_record_tables_gone_still_creates_and_logs_both_records_at_error(
    pods_stub, runpod_sim, db_store, caplog
) -> None:
    """pod_actions and pod_wakes renamed away: Created anyway; ERROR lines carry the Create and the outcome."""
    caplog.set_level(logging.INFO)
    await db_store.pool.execute("ALTER TABLE pod_actions RENAME TO pod_actions_gone")
    await db_store.pool.execute("ALTER TABLE pod_wakes RENAME TO pod_wakes_gone")
    answer = await start(pods_stub)
    assert answer.reply is not None
    assert answer.reply.outcome == "Created"
    (create,) = _error_entries(caplog)
    assert (create["action"], create["pod_id"], create["gpu_id"], create["price_per_hour"], create["ok"]) == (
        "Create",
        answer.reply.pod_id,
        A100,
        1.59,
        True,
    )
    (wake_line,) = [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.ERROR and "history NOT persisted" in r.getMessage()
    ]
    wake = json.loads(wake_line.split("): ", 1)[1])
    assert (wake["pod_name"], wake["outcome"], wake["wake_outcome"], wake["pod_id"], wake["gpu_id"]) == (
        "qwen",
        "Succeeded",
        "Created",
        answer.reply.pod_id,
        A100,
    )


async def test_a_stop_succeeds_with_the_store_down_and_get_still_answers(runpod_sim, database_url, caplog) -> None:
    """The controller's pools closed under it: stop still stops and answers ok; GET still reports the pod."""
    caplog.set_level(logging.INFO)
    pod = runpod_sim.add_pod(volume_id=VOLUME, status="RUNNING")
    store = await open_store(database_url, max_size=2, application_name="doomed")
    try:
        async with controller(runpod_sim, store) as c:
            await store.close()
            reply = await c.public.StopPod(pods_pb2.StopPodRequest(name="qwen"), metadata=OPERATOR, timeout=10)
            assert (reply.ok, [p.pod_id for p in reply.pods]) == (True, [pod])
            assert runpod_sim.pod(pod)["status"] == "EXITED"
            (entry,) = _error_entries(caplog)
            assert (entry["action"], entry["pod_id"], entry["ok"]) == ("Stop", pod, True)

            view = await c.public.GetPod(pods_pb2.GetPodRequest(name="qwen"), timeout=10)
            assert (view.lookup, view.pod_id, view.status) == ("FOUND", pod, "EXITED")
            assert not view.HasField("last_wake")
    finally:
        await store.close()


async def test_a_wake_with_the_store_down_is_refused_before_any_runpod_call(runpod_sim, database_url) -> None:
    """Without the store there is no cross-replica gate: fail closed (UNAVAILABLE), nothing asked of RunPod."""
    store = await open_store(database_url, max_size=2, application_name="doomed")
    try:
        async with controller(runpod_sim, store) as c:
            await store.close()
            answer = await start(c.public)
            assert answer.code is grpc.StatusCode.UNAVAILABLE
            assert runpod_sim.requests() == []
    finally:
        await store.close()


async def test_an_unknown_name_is_not_found_on_every_route_before_any_runpod_call(
    pods_stub, internal_stub, runpod_sim
) -> None:
    """A name that is not configured (even a real RunPod id) → NOT_FOUND everywhere, zero requests."""
    pod = runpod_sim.add_pod(volume_id=VOLUME, status="RUNNING")
    calls = [
        pods_stub.StartPod(pods_pb2.StartPodRequest(name=pod), metadata=OPERATOR, timeout=10),
        pods_stub.StopPod(pods_pb2.StopPodRequest(name="llama"), metadata=OPERATOR, timeout=10),
        pods_stub.GetPod(pods_pb2.GetPodRequest(name="llama"), timeout=10),
        pods_stub.GetPodHistory(pods_pb2.GetPodHistoryRequest(name="llama"), timeout=10),
        internal_stub.ObserveVolume(pods_pb2.ObserveVolumeRequest(name="llama"), timeout=10),
        internal_stub.StopPods(
            pods_pb2.StopPodsRequest(name="llama", pod_ids=[pod], trigger=pods_pb2.STOP_TRIGGER_IDLE), timeout=10
        ),
    ]
    for call in calls:
        with pytest.raises(grpc.aio.AioRpcError) as error:
            await call
        assert error.value.code() is grpc.StatusCode.NOT_FOUND
    assert runpod_sim.requests() == []


async def test_an_unknown_name_of_any_length_is_repeated_cut_so_the_not_found_reaches_the_caller(
    pods_stub, runpod_sim
) -> None:
    """The name is the caller's text, and the status it is repeated in is refused by clients past 16 KiB."""
    with pytest.raises(grpc.aio.AioRpcError) as error:
        await pods_stub.GetPod(pods_pb2.GetPodRequest(name="é" * 20_000), timeout=10)
    assert error.value.code() is grpc.StatusCode.NOT_FOUND
    assert error.value.details() == "unknown pod name '" + "\\xe9" * 64 + "'…"


async def test_names_are_case_insensitive(pods_stub, runpod_sim) -> None:
    """QWEN, Qwen and qwen are one pod, reported under its configured name."""
    runpod_sim.add_pod(volume_id=VOLUME, status="RUNNING")
    for name in ("QWEN", "Qwen", " qwen "):
        view = await pods_stub.GetPod(pods_pb2.GetPodRequest(name=name), timeout=10)
        assert (view.name, view.is_running) == ("qwen", True)


async def test_several_named_pods_wake_and_record_independently(runpod_sim, db_store) -> None:
    """RUNPOD_PODS=qwen,Llama-3: each on its own volume and datacenter, each with its own history."""
    env = {
        "RUNPOD_PODS": "qwen,Llama-3",
        "RUNPOD_LLAMA_3_VOLUME_ID": OTHER_VOLUME,
        "RUNPOD_LLAMA_3_DATACENTER_ID": "US-TX-3",
    }
    async with controller(runpod_sim, db_store, **env) as c:
        llama = await start(c.public, "llama-3")
        assert llama.reply is not None
        assert (llama.reply.name, llama.reply.outcome, llama.reply.gpu_id) == ("Llama-3", "Created", "NVIDIA L40S")
        (placed,) = pods_on(runpod_sim, OTHER_VOLUME)
        assert placed["dataCenterId"] == "US-TX-3"
        assert pods_on(runpod_sim, VOLUME) == []

        qwen = await start(c.public, "QWEN")
        assert qwen.reply is not None
        assert (qwen.reply.name, qwen.reply.gpu_id) == ("qwen", A100)

        llama_view = await c.public.GetPod(pods_pb2.GetPodRequest(name="LLAMA-3"), timeout=10)
        assert (llama_view.pod_id, llama_view.datacenter) == (llama.reply.pod_id, "US-TX-3")
        assert llama_view.last_wake.pod_id == llama.reply.pod_id
        llama_history = await history(c.public, "llama-3")
        assert [e.WhichOneof("entry") for e in llama_history] == ["action", "wake"]
        assert {e.action.pod_id for e in llama_history if e.WhichOneof("entry") == "action"} == {llama.reply.pod_id}
        qwen_history = await history(c.public, "qwen")
        assert [e.WhichOneof("entry") for e in qwen_history] == ["action", "wake"]
        assert qwen_history[1].wake.pod_id == qwen.reply.pod_id
        assert all(method != "DELETE" for method, _ in api_calls(runpod_sim))


def test_a_wake_lease_shorter_than_a_runpod_call_stops_the_service_at_start(monkeypatch, capsys) -> None:
    """A lease that could lapse while a create is on the wire is a configuration error naming both variables."""
    from thermostat.chassis.settings import load_settings
    from thermostat.pod_controller.settings import PodControllerSettings

    monkeypatch.setenv("WAKE_LEASE_SECONDS", "10")
    monkeypatch.setenv("RUNPOD_TIMEOUT_SECONDS", "20")
    with pytest.raises(SystemExit):
        load_settings(PodControllerSettings)
    err = capsys.readouterr().err
    assert "WAKE_LEASE_SECONDS" in err
    assert "RUNPOD_TIMEOUT_SECONDS" in err


async def test_a_wake_that_raises_records_and_answers_no_exception_text(
    runpod_sim, db_store, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """An exception's text may carry what a caller must not see (a URL with a key, a row): the wake's reason,
    shown on the open GET and in the 409, is the internal-error detail, and the text goes to the log only."""

    async def raises(*_args: object, **_kwargs: object) -> None:
        raise RuntimeError("GET https://rest.runpod.io/v1/pods?api_key=rp_s3cr3t failed")

    monkeypatch.setattr(WakeService, "wake", raises)
    async with controller(runpod_sim, db_store) as c:
        answer = await start(c.public)
        view = await c.public.GetPod(pods_pb2.GetPodRequest(name="qwen"), timeout=10)
    assert answer.code is grpc.StatusCode.ABORTED
    for shown in (answer.details, view.last_wake.reason):
        assert shown == "internal error (logged by pod-controller)"
    assert "rp_s3cr3t failed" in caplog.text  # the operator still finds it (the key itself is masked if configured)
