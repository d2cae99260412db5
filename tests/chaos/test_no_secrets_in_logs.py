"""Secrets: a full stack run with every token and the RunPod key set to recognisable random values — wakes and
stops through the edge while a fifth of RunPod's answers fail, a pool job round, metering and the monitor
reading along, wrong tokens presented where right ones belong — then every service log line (DEBUG and up,
rendered as the services render them), every Envoy access-log and Envoy log line, and every answer the edge
gave is searched for every secret, raw, base64 (standard and URL-safe, padded or not) and percent-encoded.
None may appear.
"""

from __future__ import annotations

import asyncio
import base64
import random
import secrets
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote, quote_plus

import pytest

from tests.chaos.fuzz_routes_stack import FullStack, Tokens, full_stack, kept_logs
from tests.chaos.wakes_under_faults_stack import VOLUMES, prepare_world
from tests.fixtures.chaos import ChaosFigures, ChaosScale
from thermostat.dev.simulators.faults import FaultMix
from thermostat.dev.simulators.runpod.server import RunPodSimulator
from thermostat.store.db import Store

SCENARIO = "secrets"


def recognisable_tokens() -> Tokens:
    def one(what: str) -> str:
        return f"chaos-{what}-{secrets.token_urlsafe(15)}"

    return Tokens(
        runpod_api_key=f"rpa_{secrets.token_hex(16).upper()}",
        operator=one("operator"),
        wake=one("wake"),
        pool=one("pool"),
        pool_admin=one("pool-admin"),
        internal=one("internal"),
    )


def encodings(secret: str) -> Iterator[str]:
    """The forms a secret takes when something encodes it on the way to a log line."""
    raw = secret.encode()
    yield secret
    for encoded in (base64.b64encode(raw), base64.urlsafe_b64encode(raw)):
        yield encoded.decode()
        yield encoded.decode().rstrip("=")
    for header in (f"Bearer {secret}", f":{secret}"):
        yield base64.b64encode(header.encode()).decode()
    yield quote(secret, safe="")
    yield quote_plus(secret)


async def _traffic(stack: FullStack, sim: RunPodSimulator, operations: int, jobs: int, answers: list[str]) -> None:
    tokens = stack.tokens
    operator = {"X-Rig-Operator-Token": tokens.operator}
    pool = {"Authorization": f"Bearer {tokens.pool}", "X-Strata-Tenant": "chaos-tenant"}
    admin = {"Authorization": f"Bearer {tokens.pool_admin}"}
    chooser = random.Random(3)

    async def call(method: str, path: str, **kwargs: object) -> None:
        answer = await stack.edge.request(method, path, **kwargs)  # type: ignore[arg-type]
        answers.append(f"{answer.status_code} {answer.headers} {answer.text}")

    async def wakes_and_stops(worker: int) -> None:
        for number in range(worker, operations, 4):
            name = chooser.choice(list(VOLUMES))
            if number % 5 == 4:
                await call("POST", f"/api/pods/{name}/stop", headers=operator)
            else:
                # the wake token and the operator token, each accepted on start
                auth = operator if number % 2 else {"Authorization": f"Bearer {tokens.wake}"}
                await call("POST", f"/api/pods/{name}/start", headers=auth)

    sim.fail_at_random(FaultMix(rate=0.2, seed=9, retry_after="1"))
    await asyncio.gather(*(wakes_and_stops(worker) for worker in range(4)))
    sim.fail_at_random(None)
    for job in range(jobs):
        await call("POST", "/v1/jobs/sync?machine_type=local", content=f"job {job}".encode(), headers=pool)
    batch = {"jobs": [{"machine_type": "local", "payload": "am9i"}, {"machine_type": "local", "bogus": 1}]}
    await call("POST", "/v1/jobs/batch", json=batch, headers=pool)  # a 400 naming body.jobs[1].bogus
    batch["jobs"].pop()
    await call("POST", "/v1/jobs/batch", json=batch, headers=pool)
    for path, headers in (
        ("/v1/usage", admin),
        ("/v1/workers", pool),
        ("/v1/machine-types", admin),
        ("/api/pods/qwen", {}),
        ("/api/pods/qwen/spend", {}),
        ("/api/pods/qwen/monitor", {}),
        ("/api/pods/qwen/history", operator),
        ("/api/metering/ledger", {}),
        ("/v1/spend", admin),
    ):
        await call("GET", path, headers=headers)
    # right secrets in the wrong places: each refusal is logged, never with what was presented
    await call("POST", "/api/pods/qwen/start", headers={"X-Rig-Operator-Token": tokens.pool})
    await call("POST", "/api/pods/qwen/stop", headers={"Authorization": f"Bearer {tokens.wake}"})
    await call("POST", "/api/pods/qwen/stop", headers={"X-Rig-Operator-Token": tokens.operator + "x"})
    await call("GET", "/v1/usage", headers={"Authorization": f"Bearer {tokens.internal}", "X-Strata-Tenant": "t"})


def _around(form: str, lines: list[str]) -> str:
    line = next(line for line in lines if form in line)
    at = line.index(form)
    return line[max(0, at - 300) : at + len(form) + 100]


@pytest.mark.timeout(900)
async def test_no_key_or_token_reaches_a_log_line_an_access_log_or_an_answer(
    db_store: Store, tmp_path: Path, chaos_scale: ChaosScale, figures: ChaosFigures
) -> None:
    tokens = recognisable_tokens()
    answers: list[str] = []
    with RunPodSimulator(api_key=tokens.runpod_api_key) as sim, kept_logs() as service_lines:
        prepare_world(sim)
        async with full_stack(sim, db_store, tmp_path, tokens) as stack:
            await _traffic(stack, sim, chaos_scale.pick(16, 300), chaos_scale.pick(1, 20), answers)
            access_log = stack.access_log
        runpod_calls = len(sim.requests("/v2/"))
    # Envoy flushes its access log when it stops (the block above stopped it)
    access_lines = access_log.read_text().splitlines()
    envoy_lines = (tmp_path / "envoy.log").read_text().splitlines()
    searched = {"service log": service_lines, "envoy access log": access_lines, "envoy log": envoy_lines}
    searched["edge answers"] = answers

    hits = [
        (source, name, form)
        for name, secret in tokens.named().items()
        for form in set(encodings(secret))
        for source, lines in searched.items()
        if any(form in line for line in lines)
    ]
    figures.record(SCENARIO, "service log lines searched (DEBUG and up)", len(service_lines))
    figures.record(SCENARIO, "Envoy access-log + Envoy log lines searched", len(access_lines) + len(envoy_lines))
    figures.record(SCENARIO, "edge answers searched", len(answers))
    figures.record(SCENARIO, "RunPod calls made with the key (under 20 % faults)", runpod_calls)
    figures.record(
        SCENARIO,
        "secrets × encodings searched",
        f"{len(tokens.named())} × {len(set(encodings(tokens.operator)))}",
    )
    figures.record(SCENARIO, "secret sightings", len(hits), "0")
    assert hits == [], [(source, name, _around(form, searched[source])) for source, name, form in hits]
    assert len(access_lines) >= len(answers), "the access log saw every request"
    assert runpod_calls > 0 and any(" /api/pods/" in line for line in access_lines)


def test_the_encodings_searched_include_base64_and_percent_forms() -> None:
    forms = set(encodings("a/b+c=d"))
    assert {"a/b+c=d", "YS9iK2M9ZA==", "YS9iK2M9ZA", "a%2Fb%2Bc%3Dd"} <= forms
    assert base64.b64encode(b"Bearer a/b+c=d").decode() in forms
