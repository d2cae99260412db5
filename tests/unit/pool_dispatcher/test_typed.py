"""The typed submit read into the one submit path, and the typed catalogue (pool_dispatcher/typed.py)."""

from __future__ import annotations

from datetime import timedelta

from thermostat.policy.pool.machine_type import MachineType, machine_type_to_json
from thermostat.pool.v1 import pool_pb2
from thermostat.pool_dispatcher.typed import machine_type_message, submit_request, sync_request, typed_detail


def test_a_typed_submit_becomes_the_submits_options() -> None:
    """int64 priority and a Duration timeout as the option strings admission reads; bytes as the payload."""
    request = pool_pb2.CreateJobRequest(machine_type="local", payload=b"\x00\xff", priority=-7, session_id="s")
    request.timeout.FromTimedelta(timedelta(seconds=2.5))
    legacy = submit_request(request)
    assert (legacy.machine_type, legacy.priority, legacy.timeout_seconds, legacy.session_id) == (
        "local",
        "-7",
        "2.5",
        "s",
    )
    assert legacy.payload.data == b"\x00\xff"


def test_an_unset_duration_is_the_default_and_a_zero_one_is_given() -> None:
    """Unset: "" (the type's timeout, the default wait); set to zero: "0.0", which admission refuses."""
    assert sync_request(pool_pb2.RunJobRequest(machine_type="local")).wait_seconds == ""
    zero = pool_pb2.RunJobRequest(machine_type="local")
    zero.wait.SetInParent()
    assert sync_request(zero).wait_seconds == "0.0"


def test_text_is_the_payload_as_utf8() -> None:
    assert sync_request(pool_pb2.RunJobRequest(machine_type="local", text="héllo")).payload.data == "héllo".encode()


def test_a_refusal_names_the_typed_field() -> None:
    assert typed_detail("timeout_seconds: must be positive") == "timeout: must be positive"
    assert typed_detail("wait_seconds: must be positive") == "wait: must be positive"
    assert typed_detail("unknown machine type: 'x'") == "unknown machine type: 'x'"


def test_a_catalogue_entry_becomes_a_machine_type_with_durations_and_unset_optionals() -> None:
    entry = machine_type_to_json(
        MachineType(name="gpu", image="img", cpus=2.0, env={"K": "v"}, provider_options={"a": 1}), admin=False
    )
    message = machine_type_message(entry)
    assert (message.name, message.cpus, message.HasField("memory_mb"), dict(message.env)) == (
        "gpu",
        2.0,
        False,
        {"K": "<redacted>"},
    )
    assert message.job_timeout.ToTimedelta() == timedelta(seconds=entry["job_timeout_seconds"])
    assert message.provider_options["a"] == "<redacted>"
    confinement = (message.writable_root, message.scratch_mb, message.pids_limit, message.user)
    assert confinement == (False, 64, 256, "65534:65534")
    assert (list(message.capabilities_add), message.HasField("runtime")) == ([], False)
