"""Property-based fuzzing of every annotated REST route through the real Envoy edge and of every public RPC
directly: random paths (traversal, NUL, unicode in ids and build ids), query keys, headers, bodies (JSON naming
the message's fields, random JSON, unicode, binary, megabytes). No 5xx but the designed 502/503/504 where they
are designed, every 4xx a problem whose detail names what was wrong, no RPC crash, and every service still
SERVING afterwards.

The routes are the ones the issue-14 path-binding walk reads from the descriptor set (google.api.http on every
public service), so a route added later is fuzzed without touching this file.
"""

from __future__ import annotations

import json
import re
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import grpc
import pytest
from google.api import httpbody_pb2
from google.protobuf import descriptor_pb2, descriptor_pool, message
from hypothesis import strategies as st

import thermostat.gateway.v1.gateway_pb2
import thermostat.metering.v1.metering_pb2
import thermostat.monitor.v1.monitor_pb2
import thermostat.pods.v1.pods_pb2
import thermostat.pool.v1.pool_pb2  # noqa: F401 -- registers every public message type in the default pool
from tests.chaos.fuzz_routes_inputs import RestCase, messages, rest_cases, search
from tests.chaos.fuzz_routes_stack import DESCRIPTORS, FullStack, Tokens, full_stack
from tests.e2e.test_path_bound_queries import HOUSE_ROUTES, Route, camel
from tests.fixtures.chaos import ChaosFigures, ChaosScale
from tests.fixtures.postgres import database_dsn
from tests.fixtures.services import SIM_API_KEY
from thermostat.chassis.registry import SERVICES, public_services
from thermostat.dev.simulators.runpod.server import RunPodSimulator
from thermostat.policy.pool.job_batch import BATCH_BODY, JOB_FIELDS
from thermostat.pool.v1 import pool_pb2
from thermostat.store.db import Store

SCENARIO = "fuzzing"
# the 5xx a route is designed to answer (anything else 5xx is a defect): a wake or stop whose volume lookup was
# unreadable or whose pod is unconfigured is 503; a sync job whose worker crashed 502, whose wait ran out 504;
# a job on a type whose backend is not configured 503; a result of a crashed job 502
DESIGNED_5XX: dict[str, set[int]] = {
    "PodController/StartPod": {503},
    "PodController/StopPod": {503},
    "PoolDispatcher/SubmitJobSync": {502, 503, 504},
    "PoolDispatcher/SubmitJobJson": {503},
    "PoolDispatcher/GetJobResult": {502},
}
# codes a public RPC answers only when it broke: an unhandled exception, a bug
CRASH_CODES = {grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL, grpc.StatusCode.DATA_LOSS}
CRASH_NUMBERS = {code.value[0] for code in CRASH_CODES}
RUN_JOBS = "/thermostat.pool.v1.PoolDispatcher/RunJobs"
RUN_JOBS_JSON = "PoolDispatcher/RunJobsJson"
# a batch's 200 holds each job's answer: a job's 5xx is designed where its sync submit's is
BATCH_ENTRY_5XX = DESIGNED_5XX["PoolDispatcher/SubmitJobSync"]
# the keys of a JSON body the service reads itself that its typed twin does not name (the twin of a batch is a
# stream of typed requests)
BODY_KEYS = {RUN_JOBS_JSON: tuple(f.name for f in (*BATCH_BODY, *JOB_FIELDS))}
# a 400 not about one field: the body as a whole could not be read
WHOLE_BODY = (
    "body",
    "payload",
    "json",
    "utf-8",
    "root element",
    "unexpected",
    "invalid",
    "parse",
    "expected",
    "unterminated",
)

REST_SEEN: Counter[int] = Counter()
RPC_SEEN: Counter[str] = Counter()
EXAMPLES = Counter[str]()
UNNAMED: Counter[str] = Counter()


@pytest.fixture(scope="module")
async def stack(
    postgres_admin: asyncpg.Connection,
    template_database: str,
    postgres_dsn: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[FullStack]:
    name = f"test_{uuid.uuid4().hex}"
    await postgres_admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template_database}"')
    try:
        store = await Store.open(database_dsn(postgres_dsn, name), max_size=20, application_name="chaos-fuzz")
        try:
            with RunPodSimulator(api_key=SIM_API_KEY) as sim:
                sim.add_pod(volume_id="bjn7d94ej9", status="RUNNING")
                async with full_stack(sim, store, tmp_path_factory.mktemp("fuzz")) as running:
                    yield running
        finally:
            await store.close()
    finally:
        await postgres_admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _messages_by_name() -> dict[str, descriptor_pb2.DescriptorProto]:
    found = {}
    for file in descriptor_pb2.FileDescriptorSet.FromString(DESCRIPTORS.read_bytes()).file:
        for msg in file.message_type:
            found[f"{file.package}.{msg.name}"] = msg
    return found


def _request_fields(route: Route) -> tuple[str, ...]:
    """The request message's field names as a client may spell them: proto and JSON names. A REST twin whose
    body is the raw payload (`FooJson`, read strictly by the service) also gets its typed twin's (`Foo`) field
    names, the keys its JSON body really takes."""
    if route.method in BODY_KEYS:
        return BODY_KEYS[route.method]
    service, method = route.method.split("/")
    pool = descriptor_pool.Default()
    for name in public_services():
        if name.endswith(f".{service}"):
            methods = pool.FindServiceByName(name).methods_by_name
            requests = [methods[method].input_type]
            if method.endswith("Json") and method[: -len("Json")] in methods:
                requests.append(methods[method[: -len("Json")]].input_type)
            return tuple(sorted({n for r in requests for f in r.fields for n in (f.name, f.json_name)}))
    return ()


def assert_batch_entries_designed(body: bytes) -> None:
    """Every entry of a batch's answer: no 5xx but a sync submit's designed ones, every refusal saying why."""
    for entry in json.loads(body):
        assert entry["status"] < 500 or entry["status"] in BATCH_ENTRY_5XX, entry
        if entry["status"] >= 400 and "job" not in entry:
            assert isinstance(entry.get("detail"), str) and entry["detail"].strip(), entry


def _auth(tokens: Tokens) -> list[dict[str, str]]:
    tenant = {"X-Strata-Tenant": "fuzz-tenant"}
    return [
        {"X-Rig-Operator-Token": tokens.operator},
        {"Authorization": f"Bearer {tokens.wake}"},
        {"Authorization": f"Bearer {tokens.pool}", **tenant},
        {"Authorization": f"Bearer {tokens.pool_admin}", **tenant},
    ]


def _names_what_was_wrong(detail: str, case: RestCase, route: Route) -> bool:
    folded = detail.lower()
    named = {key for key, _ in case.params} | set(case.json_keys) | set(route.bound)
    named |= {camel(n) for n in named} | {part for n in named for part in n.split(".")}
    named |= {re.sub(r"(?<!^)(?=[A-Z])", "_", n).lower() for n in named}
    named |= {name.lower() for name in case.headers} | {"x-strata-tenant", "authorization", "token"}
    return any(n and n.lower() in folded for n in named) or any(word in folded for word in WHOLE_BODY)


@pytest.mark.timeout(900)
@pytest.mark.parametrize("route", HOUSE_ROUTES, ids=lambda r: f"{r.verb} {r.path}")
async def test_fuzzed_requests_on_a_route_get_no_undesigned_5xx_and_4xx_name_what_was_wrong(
    stack: FullStack, route: Route, chaos_scale: ChaosScale
) -> None:
    allowed_5xx = DESIGNED_5XX.get(route.method, set())

    async def check(case: RestCase) -> None:
        answer = await stack.edge.request(
            case.method, case.path, params=list(case.params), headers=case.headers, content=case.content
        )
        REST_SEEN[answer.status_code] += 1
        EXAMPLES["rest"] += 1
        if answer.status_code >= 500:
            assert answer.status_code in allowed_5xx, (answer.status_code, answer.text[:500])
        if route.method == RUN_JOBS_JSON and answer.status_code == 200:
            assert_batch_entries_designed(answer.content)
        if 400 <= answer.status_code < 500:
            assert answer.headers.get("content-type", "").startswith("application/problem+json"), answer.text[:300]
            detail = answer.json().get("detail")
            assert isinstance(detail, str) and detail.strip(), answer.text[:300]
            if answer.status_code == 400 and not _names_what_was_wrong(detail, case, route):
                UNNAMED[detail] += 1  # reported whole below: a 400 must say what was wrong
            if answer.status_code == 400:
                assert _names_what_was_wrong(detail, case, route), detail

    await search(rest_cases(route, _auth(stack.tokens), _request_fields(route)), check, chaos_scale.pick(6, 150))


def _public_methods() -> list[tuple[str, str, Any]]:
    pool = descriptor_pool.Default()
    found = []
    for service_def in SERVICES:
        for name in service_def.public_services:
            for method in pool.FindServiceByName(name).methods:
                found.append((service_def.name, f"/{name}/{method.name}", method))
    return found


@pytest.mark.timeout(900)
@pytest.mark.parametrize(
    ("service", "path", "method"), _public_methods(), ids=lambda v: v if isinstance(v, str) else ""
)
async def test_fuzzed_messages_to_a_public_rpc_never_crash_it(
    stack: FullStack, service: str, path: str, method: Any, chaos_scale: ChaosScale
) -> None:
    metadata_choices: list[tuple[tuple[str, str], ...]] = [
        (),
        *(tuple((k.lower(), v) for k, v in headers.items()) for headers in _auth(stack.tokens)),
    ]
    streaming = method.server_streaming

    async def check(case: tuple[message.Message, int]) -> None:
        request, who = case
        async with grpc.aio.insecure_channel(
            stack.addresses[service], options=[("grpc.max_send_message_length", 64 * 1024 * 1024)]
        ) as channel:
            metadata = metadata_choices[who % len(metadata_choices)]
            details = ""
            try:
                if streaming:
                    call = channel.unary_stream(path, request_serializer=lambda m: m.SerializeToString())(
                        request, metadata=metadata, timeout=2
                    )
                    async for answer in call:
                        if path == RUN_JOBS:  # a job of the stream answers a crash in its response, not the call's
                            error = pool_pb2.RunJobsResponse.FromString(answer).error
                            assert error.code not in CRASH_NUMBERS, (path, error.code, error.detail)
                        break
                    call.cancel()
                    code = grpc.StatusCode.OK
                else:
                    answer = await channel.unary_unary(path, request_serializer=lambda m: m.SerializeToString())(
                        request, metadata=metadata, timeout=30
                    )
                    if path == f"/thermostat.pool.v1.{RUN_JOBS_JSON}":  # as a stream's job: a crash is its entry's
                        assert_batch_entries_designed(httpbody_pb2.HttpBody.FromString(answer).data)
                    code = grpc.StatusCode.OK
            except grpc.aio.AioRpcError as error:
                code, details = error.code(), error.details() or ""
        assert code not in CRASH_CODES, (path, code, details)
        if code == grpc.StatusCode.INVALID_ARGUMENT:
            assert details.strip(), "an invalid argument says what is wrong"
        RPC_SEEN[code.name] += 1
        EXAMPLES["rpc"] += 1

    await search(st.tuples(messages(method.input_type), st.integers(0, 10)), check, chaos_scale.pick(4, 100))


async def test_after_the_fuzz_every_service_is_still_serving(
    stack: FullStack, figures: ChaosFigures, chaos_scale: ChaosScale
) -> None:
    serving = await stack.all_serving()
    edge_health = (await stack.edge.get("/health")).status_code
    figures.record(SCENARIO, "REST routes fuzzed (from the protos' http annotations)", len(HOUSE_ROUTES))
    figures.record(SCENARIO, "REST requests through the edge", EXAMPLES["rest"])
    figures.record(
        SCENARIO,
        "REST statuses seen",
        " · ".join(f"{code}×{count}" for code, count in sorted(REST_SEEN.items())),
        "5xx only 502/503/504 where designed",
    )
    figures.record(
        SCENARIO,
        "400s naming no field",
        f"{sum(UNNAMED.values())} ({'; '.join(sorted(d.removeprefix(': ').rstrip('.') for d in UNNAMED))})"
        if UNNAMED
        else 0,
        "0",
    )
    figures.record(SCENARIO, "public RPCs fuzzed directly", len(_public_methods()))
    figures.record(SCENARIO, "RPC calls", EXAMPLES["rpc"])
    figures.record(
        SCENARIO,
        "RPC codes seen",
        " · ".join(f"{code}×{count}" for code, count in sorted(RPC_SEEN.items())),
        "no UNKNOWN / INTERNAL",
    )
    figures.record(
        SCENARIO,
        "services SERVING after the fuzz",
        f"{sum(s == 'SERVING' for s in serving.values())}/{len(serving)}, edge /health {edge_health}",
        "all, 200",
    )
    assert set(serving.values()) == {"SERVING"}, serving
    assert edge_health == 200
