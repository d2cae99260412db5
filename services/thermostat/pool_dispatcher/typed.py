"""The typed gRPC contract (issue 38) over the one submit path: CreateJob and RunJob are read into the submit the
REST routes and the deprecated SubmitJob / SubmitJobSync make (the same admission, the same refusals, each naming
the typed field), and the catalogue is answered as MachineType messages from the same redacted view GET
/v1/machine-types prints. REST shapes stay in views.py and the `*Json` / HttpBody RPCs."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from google.protobuf import duration_pb2

from thermostat.pool.v1 import pool_pb2

# the typed field a refusal of the submit's string option names
_RENAMED = (("timeout_seconds:", "timeout:"), ("wait_seconds:", "wait:"))


def _seconds(duration: duration_pb2.Duration, present: bool) -> str:
    """A Duration as the submit's option string: unset is "" (the default), set is its seconds (0 is refused)."""
    return repr(duration.ToTimedelta().total_seconds()) if present else ""


def _input(request: pool_pb2.CreateJobRequest | pool_pb2.RunJobRequest) -> bytes:
    return request.text.encode() if request.WhichOneof("input") == "text" else request.payload


def submit_request(request: pool_pb2.CreateJobRequest) -> pool_pb2.SubmitJobRequest:
    legacy = pool_pb2.SubmitJobRequest(
        machine_type=request.machine_type,
        priority=str(request.priority),
        session_id=request.session_id,
        timeout_seconds=_seconds(request.timeout, request.HasField("timeout")),
    )
    legacy.payload.data = _input(request)
    return legacy


def sync_request(request: pool_pb2.RunJobRequest) -> pool_pb2.SubmitJobSyncRequest:
    legacy = pool_pb2.SubmitJobSyncRequest(
        machine_type=request.machine_type,
        priority=str(request.priority),
        session_id=request.session_id,
        timeout_seconds=_seconds(request.timeout, request.HasField("timeout")),
        wait_seconds=_seconds(request.wait, request.HasField("wait")),
    )
    legacy.payload.data = _input(request)
    return legacy


def typed_detail(detail: str) -> str:
    """A refusal's detail naming the typed field (`timeout:`), not the string option it was read as."""
    for old, new in _RENAMED:
        if detail.startswith(old):
            return new + detail.removeprefix(old)
    return detail


def _duration(seconds: float) -> duration_pb2.Duration:
    duration = duration_pb2.Duration()
    duration.FromTimedelta(timedelta(seconds=seconds))
    return duration


def machine_type_message(entry: dict[str, Any]) -> pool_pb2.MachineType:
    """One entry of the catalogue's GET shape (policy/pool/machine_type.py, already redacted) as a MachineType."""
    message = pool_pb2.MachineType(
        name=entry["name"],
        image=entry["image"],
        backend=entry["backend"],
        gpu_count=entry["gpu_count"],
        health_check_failures=entry["health_check_failures"],
        cool_down=_duration(entry["cool_down_seconds"]),
        boot_timeout=_duration(entry["boot_timeout_seconds"]),
        job_timeout=_duration(entry["job_timeout_seconds"]),
        env={str(k): str(v) for k, v in entry["env"].items()},
        writable_root=entry["writable_root"],
        scratch_mb=entry["scratch_mb"],
        pids_limit=entry["pids_limit"],
        user=entry["user"],
        capabilities_add=entry["capabilities_add"],
        egress_hosts=entry["egress_hosts"],
    )
    for name in ("cpus", "memory_mb", "disk_gb", "gpu_type", "max_workers", "price_per_hour", "runtime"):
        if entry[name] is not None:
            setattr(message, name, entry[name])
    message.provider_options.update(entry["provider_options"])
    return message
