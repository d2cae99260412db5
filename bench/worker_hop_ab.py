"""The worker hop's HTTP client, A/B in one run: the whole job's CPU and latency, old client against new.

Run: .venv/bin/python bench/worker_hop_ab.py [--baseline 04678e3] [--candidate REV] [--jobs 1500] [--rounds 4]
     [--clients 32] [--single 300] [--paths services,libs]

Issue 37 item 5's rule: the hop goes onto aiohttp's client unless the whole job's CPU rises more than 10 %. Two
rigs as bench/pool_throughput.py builds them (each its own embedded Postgres, two dispatcher processes, four warm
reference workers, its own Envoy edge), side by side: A runs `--baseline`'s services and libraries (default
04678e3: the hand-written HTTP/1.1 client, providers/pool/http1.py), B `--candidate`'s (default the working tree;
the aiohttp hop measured is bench/candidates/worker_hop_aiohttp.patch, see bench/README.md), through
bench/pool_throughput_ab.py's `code_of` and `rig_on`. Every job goes the whole way, REST `POST /v1/jobs/sync`
through the edge to a dispatcher, the hop to a worker and back, its result checked against its payload.

The same rig judged `LendingPool` (a free list in front of asyncpg's pool, removed by issue 37) by the same rule:
`--baseline 2299868 --paths libs`, a revision with it, against one without it.

Rounds alternate A B, B A, ... so load drifts hit both alike. Each round runs `--jobs` jobs at `--clients` callers
(loaded) and then `--single` jobs one at a time; the CPU per job of the loaded part is read from /proc for every
process of each rig by role (callers, Envoy, dispatchers, workers, Postgres; the callers are this process, which
calls both rigs alike), the latency of every job kept. Printed: the medians of the rounds' CPU per job, latency
p50 / p99 of all rounds loaded and one at a time, each B beside A and their ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import sys
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent)]

import aiohttp  # noqa: E402
import pool_throughput as throughput  # noqa: E402
import pool_throughput_ab as ab  # noqa: E402

BASELINE = "04678e3"  # main before the worker hop moved onto aiohttp's client (issue 37 item 5)
ROLES = ("bench process", "envoy", "dispatchers", "workers", "postgres")


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def timed_lanes(call: throughput.Call, first: int, jobs: int, lanes: int, latencies: list[float]) -> None:
    """`jobs` calls numbered from `first`, `lanes` at a time, each one's latency appended to `latencies`."""

    async def timed(n: int) -> None:
        started = time.perf_counter()
        await call(n)
        latencies.append(time.perf_counter() - started)

    await throughput.run_lanes(timed, first, jobs, lanes)


async def main(
    baseline: str, candidate: str | None, paths: list[str], jobs: int, rounds: int, lanes: int, single: int
) -> None:
    b_name = candidate or "the working tree"
    print(f"A = {baseline}'s {', '.join(paths)}, B = {b_name}'s; REST sync through each rig's edge")
    print(f"{jobs} jobs at {lanes} callers and {single} one at a time a round, {rounds} rounds each")
    print(f"at start: {throughput.load_line()}", flush=True)
    cpu: dict[str, list[dict[str, float]]] = {"A": [], "B": []}
    loaded: dict[str, list[float]] = {"A": [], "B": []}
    alone: dict[str, list[float]] = {"A": [], "B": []}
    with ab.code_of(baseline, paths) as code, contextlib.ExitStack() as stack:
        code_b = stack.enter_context(ab.code_of(candidate, paths)) if candidate else None
        async with (
            ab.rig_on(code, edge=True) as rig_a,
            ab.rig_on(code_b, edge=True) as rig_b,
            aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session,
        ):
            calls = {"A": throughput.rest_caller(rig_a, session), "B": throughput.rest_caller(rig_b, session)}
            numbered = 0
            for call in calls.values():
                await throughput.run_lanes(call, numbered, throughput.WARMUP, lanes)
                numbered += throughput.WARMUP
            print(f"\n{'round':<8}{'jobs/s':>8}" + "".join(f"{role + ' µs':>18}" for role in ROLES), flush=True)
            for r in range(rounds):
                for design in ("A", "B") if r % 2 == 0 else ("B", "A"):
                    before = throughput.cpu_seconds()
                    started = time.perf_counter()
                    await timed_lanes(calls[design], numbered, jobs, lanes, loaded[design])
                    rate = jobs / (time.perf_counter() - started)
                    after = throughput.cpu_seconds()
                    numbered += jobs
                    per_job = {role: (after.get(role, 0.0) - before.get(role, 0.0)) / jobs * 1e6 for role in ROLES}
                    cpu[design].append(per_job)
                    print(f"{design} {r + 1:<6}{rate:>8.0f}" + "".join(f"{per_job[role]:>18.0f}" for role in ROLES))
                    await timed_lanes(calls[design], numbered, single, 1, alone[design])
                    numbered += single
    print(f"\n{'median of rounds, CPU µs a job':<34}{'total':>8}" + "".join(f"{role:>15}" for role in ROLES))
    totals = {}
    for design in ("A", "B"):
        medians = {role: statistics.median(s[role] for s in cpu[design]) for role in ROLES}
        totals[design] = statistics.median(sum(s.values()) for s in cpu[design])
        row = "".join(f"{medians[role]:>15.0f}" for role in ROLES)
        label = f"{design} ({baseline if design == 'A' else b_name})"
        print(f"{label:<34}{totals[design]:>8.0f}{row}")
    ratio = totals["B"] / totals["A"]
    lower = sum(sum(b.values()) < sum(a.values()) for a, b in zip(cpu["A"], cpu["B"], strict=True))
    print(f"whole job's CPU B / A = {ratio:.3f}x (B lower in {lower} of {rounds} paired rounds)")
    for name, kept in (("loaded", loaded), ("one at a time", alone)):
        a50, b50 = quantile(kept["A"], 0.5) * 1e3, quantile(kept["B"], 0.5) * 1e3
        a99, b99 = quantile(kept["A"], 0.99) * 1e3, quantile(kept["B"], 0.99) * 1e3
        print(
            f"latency {name}, ms: p50 A {a50:.2f} B {b50:.2f} ({b50 / a50:.2f}x), "
            f"p99 A {a99:.2f} B {b99:.2f} ({b99 / a99:.2f}x)"
        )
    verdict = "B (within +10 %)" if ratio <= 1.10 else "A (B's CPU up more than 10 %)"
    print(f"rule: B unless the whole job's CPU rises more than 10 %: {verdict}; at end: {throughput.load_line()}")


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default=BASELINE, help=f"the revision A runs (default {BASELINE})")
    parser.add_argument("--candidate", help="the revision B runs (default: the working tree)")
    parser.add_argument(
        "--paths", default="services,libs", help="comma-separated folders A takes from it (default services,libs)"
    )
    parser.add_argument("--jobs", type=int, default=1500, help="loaded jobs a round (default 1500)")
    parser.add_argument("--single", type=int, default=300, help="jobs one at a time a round (default 300)")
    parser.add_argument("--rounds", type=int, default=4, help="rounds a design (default 4)")
    parser.add_argument("--clients", type=int, default=32, help="concurrent callers when loaded (default 32)")
    args = parser.parse_args()
    paths = [path.strip().strip("/") for path in args.paths.split(",") if path.strip()]
    asyncio.run(main(args.baseline, args.candidate, paths, args.jobs, args.rounds, args.clients, args.single))


if __name__ == "__main__":
    cli()
