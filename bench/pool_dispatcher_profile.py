"""Where a pool dispatcher's CPU goes per job: the interpreter, the kernel, gRPC's core, uvloop, asyncpg.

The rig is bench/pool_throughput.py's (Postgres, two dispatcher processes, four warm workers, the Envoy edge).
Each path (gRPC SubmitJobSync, REST through the edge, REST batches of `--batch` jobs through the edge, gRPC
Health.Check as the floor) runs while `perf record` samples both dispatcher processes' CPU; the table gives each
shared object's share of their samples, and the CPU per call (per job on the batch path) those samples stand
for. `--py-spy DIR` also writes py-spy raw stacks (GIL holder only, the Python lines) per path for a flame graph.

    .venv/bin/python bench/pool_dispatcher_profile.py [--seconds 10] [--batch 16] [--py-spy /tmp/spy]

Needs `perf` (linux-tools) allowed to attach to a child process (root, or kernel.perf_event_paranoid <= 1).

Run 2026-11-30 22:43 at load 12 on the 2 shared cores (uvloop, the lean worker hop): SubmitJobSync 1,556 µs of
dispatcher CPU per job, REST 1,601, Health.Check 513 (under less load, 1,143 and 429). The shares hold from run
to run: a job is ~47 % interpreter (libpython), ~29 % kernel, ~10 % gRPC's core, ~4 % uvloop, ~2.5 % asyncpg's
protocol; a Health.Check ~26 % interpreter, ~45 % kernel, ~19 % gRPC's core. py-spy's stacks (GIL held) put
our own modules' Python at ~10 % of a job's samples, no function above 1 % (the worker hop's socket write ~7 %
more, the statements' writes ~13 %): the rest is uvloop and gRPC callbacks, asyncio, and asyncpg's Python
layer (its pool's borrow alone ~30 µs, twice per job).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

import aiohttp  # noqa: E402
import pool_throughput as rig_bench  # noqa: E402

LANES = 32
BATCH = 500


async def _profiled(
    run: rig_bench.Runner, first: int, pids: list[int], seconds: float, out: Path, spy: Path | None
) -> int:
    """Calls made while perf sampled `pids` (and py-spy the first) for `seconds`."""
    samplers = [
        await asyncio.create_subprocess_exec(
            "perf", "record", "-q", "-F", "1999", "-p", ",".join(map(str, pids)), "-o", str(out),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
    ]  # fmt: skip
    if spy is not None:
        py_spy = Path(sys.executable).with_name("py-spy")
        samplers.append(
            await asyncio.create_subprocess_exec(
                str(py_spy), "record", "--nonblocking", "--gil", "-f", "raw", "-r", "200",
                "-d", str(int(seconds)), "-p", str(pids[0]), "-o", str(spy),
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )
        )  # fmt: skip
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    made = 0
    while loop.time() < deadline:
        await run(first + made, BATCH)
        made += BATCH
    samplers[0].send_signal(2)  # SIGINT: perf writes its file and exits
    for sampler in samplers:
        await sampler.wait()
    return made


def _by_object(data: Path) -> tuple[int, list[tuple[float, str]]]:
    report = subprocess.run(
        ["perf", "report", "-i", str(data), "--stdio", "--no-children", "--sort", "dso", "-g", "none"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    samples = 0
    shares: list[tuple[float, str]] = []
    for line in report.splitlines():
        if line.startswith("# Samples:"):
            count = line.split()[2]
            samples = int(float(count[:-1]) * 1000) if count.endswith("K") else int(count)
        elif line.strip().endswith(tuple("abcdefghijklmnopqrstuvwxyz0123456789]")) and "%" in line:
            percent, name = line.split(None, 1)
            shares.append((float(percent.rstrip("%")), name.strip()))
    return samples, shares


async def main(seconds: float, batch: int, spy_dir: Path | None, work: Path) -> None:
    async with (
        rig_bench.pool_rig(processes=2, workers=4, edge=True) as rig,
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session,
    ):
        paths: dict[str, rig_bench.Runner] = {
            name: functools.partial(rig_bench.run_lanes, call, lanes=LANES)
            for name, call in (
                ("grpc", rig_bench.grpc_caller(rig)),
                ("rest", rig_bench.rest_caller(rig, session)),
                ("health", rig_bench.health_caller(rig)),
            )
        }
        batch_call = rig_bench.rest_batch_caller(rig, session)
        paths[f"rest-batch-{batch}"] = functools.partial(
            rig_bench.run_batched_lanes, batch_call, lanes=LANES, size=batch
        )
        numbered = 0
        for run in paths.values():
            await run(numbered, 300)
            numbered += 300
        pids = [d.process.pid for d in rig.dispatchers]
        for name, run in paths.items():
            out = work / f"{name}.perf"
            made = await _profiled(
                run, numbered, pids, seconds, out, spy_dir / f"{name}.raw" if spy_dir is not None else None
            )
            numbered += made
            samples, shares = _by_object(out)
            per_call = samples / 1999 / made * 1e6
            print(f"\n{name}: {made} calls, ~{per_call:,.0f} µs of the dispatchers' CPU per call")
            for percent, obj in shares[:10]:
                print(f"  {percent:5.1f} %  {per_call * percent / 100:6.0f} µs  {obj}")


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="sampled seconds per path (default 10)")
    parser.add_argument(
        "--batch", type=int, default=rig_bench.DEFAULT_BATCH, help="jobs a request on the REST batch path (default 16)"
    )
    parser.add_argument("--py-spy", type=Path, default=None, help="also write py-spy raw stacks per path here")
    args = parser.parse_args()
    if shutil.which("perf") is None:
        raise SystemExit("perf is not installed (linux-tools)")
    if args.py_spy is not None:
        args.py_spy.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="pool-profile-"))
    try:
        asyncio.run(main(args.seconds, args.batch, args.py_spy, work))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    cli()
