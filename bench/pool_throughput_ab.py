"""Pool throughput A/B: the gRPC or REST path on two revisions of the dispatcher, side by side in one run.

Run: .venv/bin/python bench/pool_throughput_ab.py [--baseline REV] [--paths services,...] [--jobs 1500]
     [--rounds 6] [--clients 32] [--path grpc|rest|rest-batch] [--batch 16] [--a-over tcp]

How bench/ chooses between designs of the dispatcher on a shared machine. Two rigs as bench/pool_throughput.py
builds them (each its own embedded Postgres, two dispatcher processes, four warm echo workers): A runs the
service code of `--baseline` (default: where this branch left main, `git merge-base main HEAD`; `git archive`
of its `--paths`, by default services/ and the chassis and edge libraries, put first on the dispatchers'
PYTHONPATH; `--paths services,libs` takes all of the revision's libraries, for a change to the libraries the
dispatchers run), B the working tree's. Rounds of `--jobs` calls alternate A B, B A, ... so load drifts hit both
alike; each round prints its rate and the CPU each process group spent per job. The verdict is the medians, and
how many rounds of B beat every round of A. `--path grpc` (default) calls SubmitJobSync on the dispatchers;
`--path rest` posts /v1/jobs/sync through each rig's own Envoy, whose config the rig's revision of
thermostat.edge builds, and adds Envoy's column; `--path rest-batch` posts /v1/jobs/batch there instead, `--batch`
jobs a request (a baseline without that route fails at warm-up). Only the `--paths` differ between the rigs (the other
libraries, workers, schema and callers are the working tree's; the generated protos always are), so a baseline
must work with the working tree's migrations and libraries: a merge base does, a main that moved on may not.
`--a-over tcp`: A's rig reaches Postgres over TCP loopback rather than the Unix socket (with `--baseline HEAD`,
the only difference between the rigs).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path[:0] = [str(Path(__file__).resolve().parent)]

import aiohttp  # noqa: E402
import pool_throughput as throughput  # noqa: E402

ROLES = ("dispatchers", "postgres", "bench process", "workers")
# the revision's code a rig runs by default: what a dispatcher serves with, and what builds the edge's config
COMPARED = ("services", "libs/thermostat/chassis", "libs/thermostat/edge")


def git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=throughput.ROOT, check=True, capture_output=True, text=True
    ).stdout.strip()


def in_revision(revision: str, path: str) -> bool:
    found = subprocess.run(["git", "cat-file", "-e", f"{revision}:{path}"], cwd=throughput.ROOT, capture_output=True)
    return found.returncode == 0


@contextlib.contextmanager
def code_of(revision: str, paths: list[str]) -> Any:
    """The revision's `paths` (folders such as services, libs/thermostat/edge) in a scratch directory, as a
    PYTHONPATH of the top-level folders they sit in.

    `thermostat` is a namespace package over libs/, services/ and dev/, and so are the folders of generated
    protos (libs/thermostat/*/v1, ignored by git): a folder here shadows the working tree's copy of each
    regular package it holds, and the rest (the generated code too) is still found in the working tree."""
    # a folder the revision lacks is left out: libs/thermostat/edge moved to tools/ in issue 22, so a later
    # baseline builds its edge config with the working tree's tools/envoy_config.py
    paths = [path for path in paths if in_revision(revision, path)]
    with tempfile.TemporaryDirectory(prefix="pool-ab-") as tmp:
        archive = subprocess.run(
            ["git", "archive", revision, *paths], cwd=throughput.ROOT, check=True, capture_output=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        tops = dict.fromkeys(path.split("/")[0] for path in paths)
        yield os.pathsep.join(str(Path(tmp) / top) for top in tops)


def edge_config_on(code: str) -> throughput.EdgeConfig:
    """bench/pool_throughput.py's edge config, as the revision on PYTHONPATH `code` builds it."""

    def config(ports: list[int]) -> dict[str, Any]:
        script = f"import json, pool_throughput as t; print(json.dumps(t.edge_config({ports!r})))"
        bench = str(Path(__file__).resolve().parent)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join((code, bench))}
        done = subprocess.run([sys.executable, "-c", script], env=env, check=True, capture_output=True, text=True)
        return json.loads(done.stdout)  # type: ignore[no-any-return]

    return config


@contextlib.asynccontextmanager
async def rig_on(code: str | None, *, edge: bool, over_tcp: bool = False) -> Any:
    """bench/pool_throughput.py's rig; with `code` (a PYTHONPATH), its dispatchers import code from there first,
    and its edge's config is that code's."""
    spawn = asyncio.create_subprocess_exec

    async def spawn_on(*args: Any, **kwargs: Any) -> asyncio.subprocess.Process:
        if code is not None and "pool_dispatcher" in " ".join(map(str, args)):
            kwargs["env"] = {**kwargs["env"], "PYTHONPATH": code}
        return await spawn(*args, **kwargs)

    configured = throughput.edge_config if code is None else edge_config_on(code)
    asyncio.create_subprocess_exec = spawn_on  # type: ignore[assignment]
    try:
        async with throughput.pool_rig(
            processes=2, workers=4, edge=edge, edge_config_of=configured, over_tcp=over_tcp
        ) as rig:
            asyncio.create_subprocess_exec = spawn  # type: ignore[assignment]
            yield rig
    finally:
        asyncio.create_subprocess_exec = spawn  # type: ignore[assignment]


async def main(
    baseline: str, paths: list[str], jobs: int, rounds: int, lanes: int, path: str, a_over: str, batch: int
) -> None:
    batched = f" posting {batch} jobs a request" if path == "rest-batch" else ""
    print(
        f"A = {baseline[:12]}'s {', '.join(paths)} (Postgres over {a_over}), B = the working tree (over socket); "
        f"{path}: {jobs} jobs a round, {rounds} rounds each, {lanes} callers{batched}"
    )
    print(f"at start: {throughput.load_line()}", flush=True)
    rates: dict[str, list[float]] = {"A": [], "B": []}
    spent: dict[str, list[dict[str, float]]] = {"A": [], "B": []}
    rest = path in ("rest", "rest-batch")
    roles = (*ROLES, "envoy") if rest else ROLES
    with code_of(baseline, paths) as code:
        async with (
            rig_on(code, edge=rest, over_tcp=a_over == "tcp") as rig_a,
            rig_on(None, edge=rest) as rig_b,
            aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session,
        ):
            runs: dict[str, throughput.Runner] = {}
            for design, rig in (("A", rig_a), ("B", rig_b)):
                if path == "rest-batch":
                    batch_call = throughput.rest_batch_caller(rig, session)
                    runs[design] = functools.partial(throughput.run_batched_lanes, batch_call, lanes=lanes, size=batch)
                else:
                    call = throughput.rest_caller(rig, session) if rest else throughput.grpc_caller(rig)
                    runs[design] = functools.partial(throughput.run_lanes, call, lanes=lanes)
            for run in runs.values():
                await run(0, throughput.WARMUP)
            numbered = throughput.WARMUP
            print(f"\n{'round':<8}{'jobs/s':>8}" + "".join(f"{role + ' µs/job':>24}" for role in roles))
            for r in range(rounds):
                for design in ("A", "B") if r % 2 == 0 else ("B", "A"):
                    before = throughput.cpu_seconds()
                    rate = await runs[design](numbered, jobs)
                    after = throughput.cpu_seconds()
                    numbered += jobs
                    per_job = {role: (after.get(role, 0.0) - before.get(role, 0.0)) / jobs * 1e6 for role in roles}
                    rates[design].append(rate)
                    spent[design].append(per_job)
                    print(f"{design} {r + 1:<6}{rate:>8.0f}" + "".join(f"{per_job[role]:>24.0f}" for role in roles))
    print(f"\n{'median':<8}{'jobs/s':>8}" + "".join(f"{role + ' µs/job':>24}" for role in roles))
    for design in ("A", "B"):
        medians = [statistics.median(s[role] for s in spent[design]) for role in roles]
        print(f"{design:<8}{statistics.median(rates[design]):>8.0f}" + "".join(f"{m:>24.0f}" for m in medians))
    ratio = statistics.median(rates["B"]) / statistics.median(rates["A"])
    beaten = sum(rate > max(rates["A"]) for rate in rates["B"])
    print(f"B / A = {ratio:.2f}x; {beaten} of {rounds} B rounds beat every A round; at end: {throughput.load_line()}")


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", help="the git revision A runs (default: git merge-base main HEAD)")
    parser.add_argument(
        "--paths",
        default=",".join(COMPARED),
        help=f"comma-separated folders A takes from the baseline (default {','.join(COMPARED)}; e.g. services,libs)",
    )
    parser.add_argument(
        "--a-over", choices=("socket", "tcp"), default="socket", help="how A's rig reaches Postgres (default socket)"
    )
    parser.add_argument("--jobs", type=int, default=1500, help="jobs per round (default 1500)")
    parser.add_argument("--rounds", type=int, default=6, help="rounds per design (default 6)")
    parser.add_argument("--clients", type=int, default=32, help="concurrent callers (default 32)")
    parser.add_argument(
        "--path",
        choices=("grpc", "rest", "rest-batch"),
        default="grpc",
        help="gRPC SubmitJobSync, REST /v1/jobs/sync through each rig's Envoy, or REST /v1/jobs/batch there",
    )
    parser.add_argument(
        "--batch",
        type=int,
        choices=range(1, throughput.MAX_BATCH_JOBS + 1),
        default=throughput.DEFAULT_BATCH,
        metavar="N",
        help=f"jobs a request on --path rest-batch (default {throughput.DEFAULT_BATCH})",
    )
    args = parser.parse_args()
    baseline = args.baseline or git("merge-base", "main", "HEAD")
    paths = [path.strip().strip("/") for path in args.paths.split(",") if path.strip()]
    asyncio.run(main(baseline, paths, args.jobs, args.rounds, args.clients, args.path, args.a_over, args.batch))


if __name__ == "__main__":
    cli()
