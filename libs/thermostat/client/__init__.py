"""The typed Python client for Thermostat (issue 13): pods, the worker pool and metering over gRPC.

It imports grpcio, protobuf, googleapis-common-protos, the generated `thermostat.*.v1` modules and the standard
library, nothing else of this repository (an import-linter contract and a test hold it to that), so a bot or a
notebook server installs it beside its own dependencies.

    from thermostat.client import AsyncThermostat, Thermostat, ClientConfig, JobRequest, errors
"""

from . import errors
from .async_client import AsyncThermostat
from .config import ClientConfig
from .pool import JobOutcome, JobRequest
from .progress import Phase, WakeProgress
from .retry import RetryPolicy
from .sync_client import Thermostat

__all__ = [
    "AsyncThermostat",
    "ClientConfig",
    "JobOutcome",
    "JobRequest",
    "Phase",
    "RetryPolicy",
    "Thermostat",
    "WakeProgress",
    "errors",
]
