"""Admission, table-first: one row per rule of policy/pool/admission.py, in the order the table gives them."""

from __future__ import annotations

import pytest

from tests.unit.policy.pool.conftest import catalogue, cpu
from thermostat.policy.pool.admission import (
    Admitted,
    RefusalKind,
    SubmitAsk,
    SubmitRefusal,
    admit_submit,
    over_budget,
)
from thermostat.policy.pool.machine_type import BackendKind, MachineType

CATALOGUE = catalogue(cpu(job_timeout_seconds=100), cpu(name="remote", backend=BackendKind.RUNPOD))
LIMIT = 10


def unservable(kind: MachineType) -> str | None:
    return "the runpod backend is not configured" if kind.backend is BackendKind.RUNPOD else None


def admit(ask: SubmitAsk) -> Admitted | SubmitRefusal:
    return admit_submit(ask, catalogue=CATALOGUE, unservable=unservable, max_payload_bytes=LIMIT)


@pytest.mark.parametrize(
    ("ask", "kind", "detail"),
    [
        pytest.param(SubmitAsk(), RefusalKind.OPTIONS, "machine_type: ", id="options-machine-type-missing"),
        pytest.param(
            SubmitAsk(machine_type="cpu", priority="1.5"),
            RefusalKind.OPTIONS,
            "priority: must be a 64-bit integer",
            id="options-malformed-parameter",
        ),
        pytest.param(
            SubmitAsk(machine_type="nope"),
            RefusalKind.UNKNOWN_MACHINE_TYPE,
            "unknown machine type: 'nope'",
            id="machine-type-unknown-is-the-originals-400",
        ),
        pytest.param(
            SubmitAsk(machine_type="remote"),
            RefusalKind.UNSERVABLE,
            "the runpod backend is not configured",
            id="servable-no-backend-for-the-type",
        ),
        pytest.param(
            SubmitAsk(machine_type="cpu", payload_bytes=LIMIT + 1),
            RefusalKind.PAYLOAD_TOO_LARGE,
            f"payload of {LIMIT + 1} bytes is over the limit of {LIMIT}",
            id="payload-size-over-the-limit",
        ),
        pytest.param(
            SubmitAsk(machine_type="remote", priority="x", payload_bytes=LIMIT + 1),
            RefusalKind.OPTIONS,
            "priority: ",
            id="order-options-before-servable-before-payload",
        ),
        pytest.param(
            SubmitAsk(machine_type="remote", payload_bytes=LIMIT + 1),
            RefusalKind.UNSERVABLE,
            "runpod",
            id="order-servable-before-payload",
        ),
    ],
)
def test_refusals(ask: SubmitAsk, kind: RefusalKind, detail: str) -> None:
    refused = admit(ask)
    assert isinstance(refused, SubmitRefusal), refused
    assert refused.kind is kind and detail in refused.detail and refused.job_id is None


@pytest.mark.parametrize(
    ("kind", "http", "grpc_code"),
    [
        pytest.param(RefusalKind.OPTIONS, 422, "INVALID_ARGUMENT", id="options-422"),
        pytest.param(RefusalKind.UNSERVABLE, 503, "FAILED_PRECONDITION", id="unservable-503"),
        pytest.param(RefusalKind.PAYLOAD_TOO_LARGE, 413, "RESOURCE_EXHAUSTED", id="payload-413"),
        pytest.param(RefusalKind.OVER_BUDGET, 409, "FAILED_PRECONDITION", id="budget-409"),
    ],
)
def test_each_refusal_answers_its_status(kind: RefusalKind, http: int, grpc_code: str) -> None:
    assert (kind.http, kind.grpc_code) == (http, grpc_code)


def test_every_refusal_kind_has_its_statuses() -> None:
    for kind in RefusalKind:
        assert kind.http >= 400 and kind.grpc_code


def test_a_payload_at_the_limit_is_admitted_with_its_options() -> None:
    admitted = admit(SubmitAsk(machine_type="cpu", priority="5", timeout_seconds="500", payload_bytes=LIMIT))
    assert isinstance(admitted, Admitted)
    options = admitted.options
    assert (options.machine_type.name, options.priority, options.timeout_seconds) == ("cpu", 5, 100.0)


@pytest.mark.parametrize(
    ("sync", "wait"),
    [
        pytest.param(True, 7.0, id="sync-reads-wait-seconds"),
        pytest.param(False, None, id="async-ignores-wait-seconds"),
    ],
)
def test_wait_seconds_counts_only_for_a_sync_submit(sync: bool, wait: float | None) -> None:
    admitted = admit(SubmitAsk(machine_type="cpu", wait_seconds="7", sync=sync))
    assert isinstance(admitted, Admitted) and admitted.options.wait_seconds == wait


def test_blank_parameters_are_not_given() -> None:
    """The gRPC request's empty strings are parameters not given, as a REST query without them."""
    assert SubmitAsk(machine_type="cpu", session_id="", priority="").query() == {"machine_type": "cpu"}


def test_a_budget_refusal_names_the_failed_job_it_recorded() -> None:
    refused = over_budget("tenant acme is over its daily budget", "j-1")
    assert (refused.kind, refused.http, refused.job_id) == (RefusalKind.OVER_BUDGET, 409, "j-1")
    assert refused.detail == "tenant acme is over its daily budget (job j-1)"
