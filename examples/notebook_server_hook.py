"""A notebook server's hook on Thermostat: before a cell runs on a GPU type, the server submits it as a pool job
and waits on the job's stream (WaitJob), reporting each state to the notebook; the cell's output is the result,
or the typed error says how it ended (failed, timed out, cancelled). Interrupting the kernel cancels the job.

Run it against `make run` (its `local` type echoes the payload back):

    STRATA_POOL_TOKEN=… STRATA_TENANT=demo python examples/notebook_server_hook.py local "print(1 + 1)"
"""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from thermostat.client import AsyncThermostat, errors

OnState = Callable[[str, str], None]  # (job id, state) → shown in the cell's status line


def _ignore(job_id: str, state: str) -> None:
    return None


@dataclass
class GpuCellHook:
    """Runs cells on the pool for one notebook session (`session_id` keeps its cells on the same warm machine)."""

    client: AsyncThermostat
    session_id: str = field(default_factory=lambda: f"nb-{uuid.uuid4().hex[:12]}")
    timeout_seconds: float | None = None  # a cell's run time on the machine (None: the type's own limit)
    on_state: OnState = _ignore
    _running: dict[str, str] = field(default_factory=dict)  # cell id → job id

    async def run_cell(self, cell_id: str, machine_type: str, source: str) -> bytes:
        """The cell's output from `machine_type`; raises errors.JobFailed / JobTimedOut / JobCancelled (with the
        job), or the call's own typed error (Unauthenticated, InvalidArgument for an unknown type, ...)."""
        payload = json.dumps({"build_id": cell_id, "source": source}).encode()  # the worker cancels by build_id
        job = await self.client.pool.submit(
            machine_type, payload, session_id=self.session_id, timeout_seconds=self.timeout_seconds
        )
        self._running[cell_id] = job.id
        try:
            async for update in self.client.pool.wait(job.id):
                self.on_state(job.id, update.state)
                job = update
        finally:
            self._running.pop(cell_id, None)
        if job.state != "completed":
            raise errors.job_error(job)
        return await self.client.pool.result(job.id)

    async def interrupt(self, cell_id: str) -> None:
        """The kernel was interrupted: cancel the cell's job (its run_cell then raises errors.JobCancelled)."""
        job_id = self._running.get(cell_id)
        if job_id is not None:
            await self.client.pool.cancel(job_id, build_id=cell_id)


async def main(argv: list[str]) -> None:
    machine_type = argv[0] if argv else "python"
    source = argv[1] if len(argv) > 1 else "print(1 + 1)"

    def show(job_id: str, state: str) -> None:
        print(f"[{job_id}] {state}", flush=True)

    async with AsyncThermostat.connect() as client:
        hook = GpuCellHook(client, on_state=show)
        try:
            output = (await hook.run_cell(f"cell-{uuid.uuid4().hex[:8]}", machine_type, source)).decode()
            print(output, end="" if output.endswith("\n") else "\n", flush=True)  # a cell's output ends its line
        except errors.JobError as ended:
            print(f"cell {ended.job.state}: {ended.job.error or ''}", file=sys.stderr)
            raise SystemExit(1) from None


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
