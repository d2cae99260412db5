"""The `python` handler: a notebook cell run as a Python subprocess, its output the job's result.

The payload is a cell: a JSON object with `source` (the code; `build_id` names it for a cancel, as a Strata
manifest does), or the code itself as UTF-8 text. It runs as `python -I -c <source>` in a session of its own,
with no stdin; stdout is the result (200) when it exits 0, else the answer is 500 with the last lines of
stderr (the traceback's, naming the exception). Nothing bounds it here but the job: the pool's call to the
worker lasts the job's timeout (`timeout_seconds`, else the type's `job_timeout_seconds`), and when it runs out
the pool drops the connection, the worker cancels the execution, and a cancelled cell's process group is
killed — so is one a build cancel ends (the kernel interrupt) and one a worker shutting down abandons.
The cell's environment is PATH and LANG, and the proxy variables the pool gives a machine whose type opts into egress
(HTTP_PROXY, HTTPS_PROXY, NO_PROXY, either case: its only way out; docs/containers.md): never the worker's token.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
from collections.abc import Mapping

from .result import HandlerResult

PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy")
STDERR_LINES = 20  # of a failed cell's stderr, in its 500: the traceback's end names the exception


def cell_source(payload: bytes) -> str:
    """The code a payload carries: a JSON object's string `source`, else the payload as text."""
    with contextlib.suppress(ValueError, UnicodeDecodeError):
        decoded = json.loads(payload)
        source = decoded.get("source") if isinstance(decoded, dict) else None
        if isinstance(source, str):
            return source
    return payload.decode("utf-8", "replace")


def cell_env(worker_env: Mapping[str, str]) -> dict[str, str]:
    proxies = {name: worker_env[name] for name in PROXY_VARIABLES if worker_env.get(name)}
    return {"PATH": worker_env.get("PATH", ""), "LANG": "C.UTF-8", **proxies}


async def run_cell(payload: bytes, *, python: str = sys.executable) -> HandlerResult:
    process = await asyncio.create_subprocess_exec(
        python,
        "-I",  # isolated: the worker's environment variables (its token among them) do not steer the cell
        "-c",
        cell_source(payload),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=cell_env(os.environ),  # never the worker's token
        start_new_session=True,  # its own process group: a kill reaches what the cell started too
    )
    try:
        stdout, stderr = await process.communicate()
    except BaseException:  # cancelled (job timeout, build cancel, shutdown): nothing of the cell stays
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            await asyncio.shield(process.wait())
        raise
    if process.returncode == 0:
        return HandlerResult(status=200, body=stdout)
    tail = b"\n".join(stderr.rstrip().splitlines()[-STDERR_LINES:])
    return HandlerResult(status=500, body=tail or f"the cell exited with status {process.returncode}".encode())
