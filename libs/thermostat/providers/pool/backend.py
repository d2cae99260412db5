"""The Backend protocol: start / stop / health and nothing else (worker-pool seed: "the pool does not know which it
is talking to"). Local processes, Docker containers, RunPod pods and Fly Machines satisfy it (local.py, docker.py,
runpod.py, fly.py); settings.py builds them from the environment.

- `start` boots one machine for a `MachineSpec` and returns its handle once the provider has accepted it
  (not once it is healthy: the pool polls `health` until the boot timeout). A start that fails raises
  `BackendError` with a message safe to record on the job (never the token).
- `stop` is idempotent: stopping a machine already gone, or one this backend does not know, is no error.
  A stop that fails raises `BackendError`; the pool keeps the row and retries on its next pass.
- `health` is a probe: True only when the machine is up and its worker answers `GET /health` with 200.

A backend that can tell a machine that has ended (its process or container exited) from one still booting also
satisfies `ReportsEnd`: `ended` is why the machine is gone (the exit code and its last lines of output, scrubbed
of the spec's secrets), or None while it runs or when that cannot be read. The boot asks it between health polls,
so a worker that dies at start fails its boot at once rather than at the boot timeout (issue 35).

A backend whose machines may run on a runtime the type names (Docker: `runtime`, issue 36) also satisfies
`ListsRuntimes`: `runtimes` is the runtimes its daemon lists, or a BackendError saying why they could not be read;
a catalogue PUT naming another is refused.

A backend whose machines can outlive the pool's knowledge of them (RunPod, Fly, Docker) also satisfies `ListsMachines`:
`list_machines` is every live machine carrying the pool's name prefix, for the orphan sweep (issue 12); None
when the provider could not be read (the sweep then judges nothing). Local children die with this process
(PR_SET_PDEATHSIG), so the local backend lists none.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from thermostat.policy.pool.machine_type import MachineType
from thermostat.policy.pool.orphans import ListedMachine

WORKER_TOKEN_VARIABLE = "STRATA_WORKER_TOKEN"  # noqa: S105 - a variable name, not a secret
# The port a machine's worker listens on inside its container / pod / VM (POOL_WORKER_PORT); the worker image
# binds it (worker-pool seed, "The worker contract").
DEFAULT_WORKER_PORT = 8080


class BackendError(Exception):
    """BackendError is a start or stop the provider refused or that failed; the message is safe to record."""


@dataclass(frozen=True, slots=True, kw_only=True)
class MachineSpec:
    """MachineSpec is what a backend needs to start one machine; the token never shows in its repr."""

    machine_id: str
    tenant_id: str
    machine_type: MachineType
    worker_token: str = field(repr=False)

    def env(self) -> dict[str, str]:
        """The machine's environment: the type's `env` plus the per-machine worker token (which wins)."""
        return {**self.machine_type.env, WORKER_TOKEN_VARIABLE: self.worker_token}


@dataclass(frozen=True, slots=True, kw_only=True)
class MachineHandle:
    """MachineHandle is a started machine as its provider names it and where its worker listens."""

    provider_id: str
    endpoint: str
    region: str | None = None


class Backend(Protocol):
    async def start(self, spec: MachineSpec) -> MachineHandle: ...

    async def stop(self, provider_id: str) -> None: ...

    async def health(self, handle: MachineHandle) -> bool: ...


class ListsMachines(Protocol):
    async def list_machines(self) -> tuple[ListedMachine, ...] | None: ...


@runtime_checkable
class ReportsEnd(Protocol):
    async def ended(self, handle: MachineHandle, spec: MachineSpec) -> str | None: ...


@runtime_checkable
class ListsRuntimes(Protocol):
    async def runtimes(self) -> tuple[str, ...]: ...
