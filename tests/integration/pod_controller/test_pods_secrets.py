"""The RunPod API key travels only in the Authorization header: never in a log record, an error or an answer,
however RunPod misbehaves (pod-control seed: REST v2 client — "it is never logged")."""

from __future__ import annotations

import logging
import traceback

import grpc
import pytest

from tests.fixtures.services import OPERATOR, SIM_API_KEY, VOLUME
from tests.integration.pod_controller.harness import A100, controller, history, start
from thermostat.pods.v1 import pods_pb2

NEW_POD = "newpod0000abcd"


def _leaks(caplog: pytest.LogCaptureFixture, secret: str) -> list[str]:
    """Every captured record, in every form a handler could print it, that contains `secret`."""
    found = []
    for record in caplog.records:
        forms = [record.getMessage(), repr(record.args), record.exc_text or "", record.stack_info or ""]
        if record.exc_info and record.exc_info[1] is not None:
            forms.append("".join(traceback.format_exception(*record.exc_info)))
        if any(secret in form for form in forms):
            found.append(f"{record.name}: {record.getMessage()[:200]}")
    if secret in caplog.text:
        found.append("the formatted log text")
    return found


async def test_a_full_wake_under_every_failure_leaks_the_key_nowhere(runpod_sim, db_store, caplog) -> None:
    """429 with Retry-After, 5xx, bare 404, problem 404, malformed JSON, a hang: the key shows up only in the
    Authorization header the simulator received."""
    caplog.set_level(logging.DEBUG)  # the root: httpx, httpcore, asyncpg, grpc and ours
    runpod_sim.configure(hang_seconds=1.0)
    stale = runpod_sim.add_pod(volume_id=VOLUME, status="EXITED")
    runpod_sim.set_next_pod_ids([NEW_POD])
    runpod_sim.inject("GET", "/v2/pods", status=500, body="text")  # the first wake fails on the list
    for fault in ({"status": 404, "body": "text"}, {"status": 200, "body": "malformed"}, {"hang": True}):
        runpod_sim.inject("GET", f"/v2/pods/{stale}", **fault)  # type: ignore[arg-type]
    runpod_sim.inject("POST", f"/v2/pods/{stale}/action", status=503)
    runpod_sim.inject("POST", "/v2/pods", status=429, retry_after="0")
    runpod_sim.inject("GET", f"/v2/pods/{NEW_POD}", status=404, body="problem")
    answers: list[str] = []
    async with controller(runpod_sim, db_store, RUNPOD_TIMEOUT_SECONDS="0.3") as c:
        failed = await start(c.public)
        assert failed.code is grpc.StatusCode.ABORTED
        created = await start(c.public)
        assert created.reply is not None
        assert (created.reply.outcome, created.reply.pod_id, created.reply.gpu_id) == ("Created", NEW_POD, A100)
        runpod_sim.inject("POST", f"/v2/pods/{NEW_POD}/action", status=500, body="malformed")
        stopped = await c.public.StopPod(pods_pb2.StopPodRequest(name="qwen"), metadata=OPERATOR, timeout=10)
        assert not stopped.ok
        runpod_sim.inject("GET", "/v2/pods", status=401)
        view = await c.public.GetPod(pods_pb2.GetPodRequest(name="qwen"), timeout=10)
        assert view.lookup == "UNREADABLE"
        answers += [failed.details, str(failed.metadata), str(created.reply), str(stopped), str(view)]
        answers += [str(entry) for entry in await history(c.public)]

    api = runpod_sim.requests("/v2/")
    assert len(api) > 15
    assert {r.headers.get("authorization") for r in api} == {f"Bearer {SIM_API_KEY}"}
    assert not any(SIM_API_KEY in r.path + r.query + r.body for r in api)
    assert any(r.name.startswith("httpcore") and r.levelno == logging.DEBUG for r in caplog.records)
    assert any("ReadTimeout" in r.getMessage() for r in caplog.records)  # the hang was hit and logged
    assert _leaks(caplog, SIM_API_KEY) == []
    assert not any(SIM_API_KEY in answer for answer in answers)


async def test_a_key_a_header_cannot_carry_is_refused_before_any_request_and_never_logged(
    runpod_sim, db_store, caplog
) -> None:
    """A pasted key with a line break in it: the client stays unconfigured (503) and no record quotes it."""
    caplog.set_level(logging.DEBUG)
    broken = "rpa_BROKEN\r\nX-Injected: 1"
    async with controller(runpod_sim, db_store, RUNPOD_API_KEY=broken) as c:
        answer = await start(c.public)
        assert answer.code is grpc.StatusCode.UNAVAILABLE
        view = await c.public.GetPod(pods_pb2.GetPodRequest(name="qwen"), timeout=10)
        assert not view.configured
    assert runpod_sim.requests() == []
    for part in ("rpa_BROKEN", "X-Injected"):
        assert _leaks(caplog, part) == []
        assert part not in answer.details
