"""What tracing costs per internal call: a unary RPC from one chassis service to another, three ways.

Run: .venv/bin/python bench/tracing_overhead.py [--calls 2000] [--rounds 3]

Each way runs in its own process (a process has one tracer provider, and "absent" must never import
OpenTelemetry), with the same two hops: a client calls service A over a chassis channel, A's handler calls
service B over a chassis channel, and answers.

  absent     OpenTelemetry's import blocked: no interceptor, the caller's traceparent passed through
  api only   the API installed, no tracer provider set up: no hook either (context passed through)
  recording  the SDK recording every span into a no-op processor: two server and one client span per call

Prints each way's best p50 per call over `--rounds` turns and its ratio to `absent`, and its least CPU per call
(the one process's: client, A and B), all from this one run.
`--against REF` adds a fourth way in the same rounds, `recording` with chassis/tracing.py as it is at the git
revision REF (e.g. the commit before a change to it), for an A/B of the tracing hooks themselves.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_PROBE = """
import asyncio, json, statistics, sys, time
MODE = {mode!r}
if MODE == "absent":
    sys.modules["opentelemetry"] = None
if {tracing_file!r}:  # chassis/tracing.py as at another revision, in its place
    import importlib.util
    spec = importlib.util.spec_from_file_location("thermostat.chassis.tracing", {tracing_file!r})
    sys.modules["thermostat.chassis.tracing"] = module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
import grpc
if MODE == "recording":
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    trace.set_tracer_provider(TracerProvider())  # records every span; no processor exports them
from thermostat.chassis import tracing
from thermostat.chassis.request_context import insecure_channel, outgoing_metadata
from thermostat.chassis.server import ServiceHost, ServiceSpec

def generic(name, behaviour):
    return grpc.method_handlers_generic_handler("bench.Echo", {{name: grpc.unary_unary_rpc_method_handler(behaviour)}})

async def main():
    async def leaf(request, context):
        return request
    b = ServiceHost(ServiceSpec(name="b", service_names=["bench.Echo"],
                                register=lambda s: s.add_generic_rpc_handlers((generic("Leaf", leaf),))))
    b_port = await b.start()
    to_b = insecure_channel(f"127.0.0.1:{{b_port}}")
    leaf_call = to_b.unary_unary("/bench.Echo/Leaf")
    async def hop(request, context):
        return await leaf_call(request, metadata=outgoing_metadata())
    a = ServiceHost(ServiceSpec(name="a", service_names=["bench.Echo"],
                                register=lambda s: s.add_generic_rpc_handlers((generic("Hop", hop),))))
    a_port = await a.start()
    async with grpc.aio.insecure_channel(f"127.0.0.1:{{a_port}}") as channel:
        call = channel.unary_unary("/bench.Echo/Hop")
        metadata = (("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),)
        for _ in range(200):
            await call(b"warm", metadata=metadata)
        samples = []
        cpu = time.process_time()
        for _ in range({calls}):
            started = time.perf_counter()
            await call(b"x", metadata=metadata)
            samples.append(time.perf_counter() - started)
        cpu = (time.process_time() - cpu) / {calls}
    await to_b.close()
    await a.stop(0.1)
    await b.stop(0.1)
    print(json.dumps({{"p50": statistics.median(samples), "cpu": cpu, "enabled": tracing.enabled(),
                      "interceptors": len(a.interceptors)}}))

asyncio.run(main())
"""


def run(mode: str, calls: int, tracing_file: str = "") -> dict[str, float]:
    result = subprocess.run(
        [sys.executable, "-c", _PROBE.format(mode=mode, calls=calls, tracing_file=tracing_file)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
    )
    measured: dict[str, float] = json.loads(result.stdout.strip().splitlines()[-1])
    return measured


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--against", metavar="REF", help="also record with chassis/tracing.py as at this revision")
    args = parser.parse_args()
    calls = args.calls
    modes = [("absent", "absent", ""), ("api only", "api only", ""), ("recording", "recording", "")]
    with tempfile.TemporaryDirectory() as scratch:
        if args.against:
            then = Path(scratch, "tracing.py")
            shown = ["git", "show", f"{args.against}:libs/thermostat/chassis/tracing.py"]
            then.write_text(subprocess.run(shown, cwd=ROOT, capture_output=True, text=True, check=True).stdout)
            modes.append((f"recording at {args.against}", "recording", str(then)))
        # the ways take turns, round after round, and each keeps its best p50: load on a shared machine moves
        # between runs, and a way measured only while it peaked would look dearer than it is
        ways: dict[str, dict[str, float]] = {}
        for _ in range(args.rounds):
            for name, mode, tracing_file in modes:
                measured = run(mode, calls, tracing_file)
                best = ways.setdefault(name, measured)
                ways[name] = {**measured, **{k: min(best[k], measured[k]) for k in ("p50", "cpu")}}
    base = ways["absent"]["p50"]
    print(f"{calls} calls per way, best of {args.rounds} rounds, client → A → B, p50 and CPU per call")
    width = max(map(len, ways))
    for mode, measured in ways.items():
        print(
            f"  {mode:<{width}} {measured['p50'] * 1e6:8.0f} µs   x{measured['p50'] / base:.2f}"
            f"   CPU {measured['cpu'] * 1e6:6.0f} µs   (server interceptors: {int(measured['interceptors'])})"
        )


if __name__ == "__main__":
    main()
