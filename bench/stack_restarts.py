"""`make run` started and stopped N times in a row: how many starts failed to bind a port (issue 35 item 3).

Run: .venv/bin/python bench/stack_restarts.py [--runs 50] [--free-edge] [--data-dir DIR]

Each run is `python -m thermostat.dev.stack` as `make run` starts it, read up to its "Thermostat is up" summary,
then Ctrl-C (SIGINT) and waited for until it has exited. The services keep the stack's fixed ports (the registry's
moved below the ephemeral range: thermostat.dev.stack.ports) and the embedded Postgres takes a free port each run,
so a free port landing on a fixed one (how `make run` used to fail at random) shows as a bind failure.
`--free-edge` puts the edge, Envoy's admin and stats listeners and the RunPod simulator on free ports, for a
machine where another `make run` holds 8080 or 9100. One data directory (a temp one unless `--data-dir`) for every
run, as `make run` restarts over `.data`. Prints one line per run and the count of bind failures, other
failures and ports in use before a start (another process's, not the stack's). Each run takes about 5–15 s.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
UP = "Thermostat is up"
BIND_FAILURES = ("Address already in use", "address already in use", "Failed to bind", "failed to bind",
                 "cannot bind", "EADDRINUSE")  # fmt: skip
BUSY_BEFORE = "is in use by"  # the stack's own check before anything starts: another process holds a fixed port


def one_run(env: dict[str, str], timeout: float) -> tuple[str, float, list[str]]:
    """('up' | 'bind' | 'busy' | 'failed', seconds to up, its output)."""
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "thermostat.dev.stack"], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip
    assert proc.stdout is not None
    lines: list[str] = []
    up_after = 0.0
    deadline = started + timeout
    for line in proc.stdout:
        lines.append(line.rstrip())
        if UP in line:
            up_after = time.monotonic() - started
            proc.send_signal(signal.SIGINT)
        if time.monotonic() > deadline and not up_after:
            proc.send_signal(signal.SIGINT)
            break
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    said = "\n".join(lines)
    if any(word in said for word in BIND_FAILURES):
        return "bind", up_after, lines
    if BUSY_BEFORE in said:
        return "busy", up_after, lines
    if not up_after or proc.returncode != 0:
        return "failed", up_after, lines
    return "up", up_after, lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--free-edge", action="store_true", help="edge, admin, stats and simulator on free ports")
    parser.add_argument("--data-dir", type=Path, default=None)
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds a run may take to come up")
    args = parser.parse_args()
    data_dir = args.data_dir or Path(tempfile.mkdtemp(prefix="stack-restarts-"))
    env = {**os.environ, "THERMOSTAT_DATA_DIR": str(data_dir)}
    for name in ("DATABASE_URL", "RUNPOD_V2_BASE_URL", "RUNPOD_API_KEY", "POOL_DEMO_BACKENDS"):
        env.pop(name, None)
    if args.free_edge:
        env.update({name: "0" for name in ("EDGE_PORT", "EDGE_ADMIN_PORT", "EDGE_STATS_PORT", "RUNPOD_SIMULATOR_PORT")})
    counts = {"up": 0, "bind": 0, "busy": 0, "failed": 0}
    print(f"data in {data_dir}; load average {os.getloadavg()[0]:.1f}", flush=True)
    for run in range(1, args.runs + 1):
        outcome, up_after, lines = one_run(env, args.timeout)
        counts[outcome] += 1
        print(f"run {run:>3}: {outcome:<6} up after {up_after:5.1f}s", flush=True)
        if outcome != "up":
            print("\n".join(f"    | {line}" for line in lines[-15:]), flush=True)
    print(
        f"{args.runs} starts and stops: {counts['bind']} bind failure(s), {counts['up']} up and stopped cleanly, "
        f"{counts['failed']} other failure(s), {counts['busy']} refused before start (a fixed port held by another "
        f"process); load average {os.getloadavg()[0]:.1f}"
    )
    return 1 if counts["bind"] or counts["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
