"""What the OpenAI endpoint adds to a request (issue 34): the warm path against a direct call to the same engine, and
the cold path against the engine's own start.

Run: .venv/bin/python bench/gateway_latency.py [--requests 300] [--engine simulated|vllm]

Starts the stack the way `make run` does (the dev stack's Stack): an embedded Postgres in a temporary directory, the
RunPod simulator (its simulated engine, or with `--engine vllm` a real vLLM behind the pod), the pod controller, the
idle monitor, the gateway and Envoy, each a process of its own. Then, in one run:

- Warm path. `--requests` streamed completions, interleaved three ways on keep-alive clients: through the edge and
  the gateway (`/openai/v1/completions`), straight at the pod's proxy URL (the same engine, nothing of Thermostat's
  between), and straight again (A/A: what the machine's noise alone makes of two identical paths, the floor the
  goal is judged beside). Time to first byte of the body, and each chunk's arrival after the first, paired by
  round and chunk: the added time per chunk is the gateway's offset minus the direct call's. Every chunk counted
  on both paths: none may be held back or lost.
- Cold path. The pod stopped and seen down, then one streamed request through the edge: request → the first
  token, beside the engine's own start (the simulator's configured boot for the simulated engine; for a real vLLM
  the same engine started alone in this run, process start → first token) and the wake's own phases.

Goal (issue 34): warm p50 ≤ 1 ms and p99 ≤ 5 ms added to the first byte and per chunk, no chunk held back.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests" / "gen"), str(ROOT)]

import httpx  # noqa: E402

from thermostat.chassis.ports import free_port  # noqa: E402
from thermostat.chassis.registry import GATEWAY, IDLE_MONITOR, POD_CONTROLLER  # noqa: E402
from thermostat.dev.engine.recipe import VENV_ENV, installation  # noqa: E402
from thermostat.dev.stack.supervisor import Stack, StackConfig  # noqa: E402

TOKEN = "bench-inference-token"  # noqa: S105 - a throwaway token for a throwaway stack
OPERATOR = "bench-operator-token"
BROWSER = {"User-Agent": "Mozilla/5.0 (X11; Linux x86_64) Firefox/128.0"}
ENV = {
    "THERMOSTAT_INFERENCE_TOKEN": TOKEN,
    "RIG_OPERATOR_TOKEN": OPERATOR,
    "RUNPOD_WAKE_POLL_SECONDS": "0.2",
    "WATCH_POLL_SECONDS": "0.5",
    "CHECK_SECONDS": "1",
    "IDLE_MINUTES": "60",
    "LOG_LEVEL": "WARNING",
}
SIM_BOOT = {"provisioning": 1.0, "starting": 1.0, "model_ready": 3.0}
GOAL_P50_MS, GOAL_P99_MS = 1.0, 5.0


@dataclass
class Timings:
    ttfb: list[float] = field(default_factory=list)  # seconds from send to the first byte of the body
    offsets: list[list[float]] = field(default_factory=list)  # each chunk's arrival after the first, a list a request
    chunks: list[int] = field(default_factory=list)


async def streamed(
    client: httpx.AsyncClient, url: str, body: dict[str, object], headers: dict[str, str]
) -> tuple[float, list[float]]:
    """One streamed completion: time to the first body byte and each SSE event's arrival after it."""
    began = time.perf_counter()
    arrivals: list[float] = []
    async with client.stream("POST", url, json=body, headers=headers) as answer:
        if answer.status_code != 200:
            raise RuntimeError(f"{url} answered {answer.status_code}: {(await answer.aread())[:300]!r}")
        async for line in answer.aiter_lines():
            if line.startswith("data: "):
                arrivals.append(time.perf_counter())
    return arrivals[0] - began, [t - arrivals[0] for t in arrivals]


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def added(a: Timings, b: Timings) -> tuple[list[float], list[float]]:
    """Per round, a's first byte minus b's; per round and chunk, a's offset minus b's (milliseconds)."""
    first = [(x - y) * 1000 for x, y in zip(a.ttfb, b.ttfb, strict=True)]
    per_chunk = [
        (x - y) * 1000
        for oa, ob in zip(a.offsets, b.offsets, strict=True)
        for x, y in zip(oa[1:], ob[1:], strict=False)
    ]
    return first, per_chunk


def row(name: str, values: list[float]) -> str:
    return f"  {name:<44} p50 {statistics.median(values):7.3f} ms   p99 {quantile(values, 0.99):7.3f} ms"


async def warm_path(stack: Stack, requests: int, served: str) -> tuple[Timings, Timings, Timings, Timings]:
    async with httpx.AsyncClient(base_url=stack.edge_url, timeout=60) as edge:
        proxy = (await edge.get("/api/pods/qwen")).json()["proxyUrl"]
    body = {"prompt": "hello world what is a pod", "max_tokens": 24, "temperature": 0, "stream": True}
    via, direct, again, least = Timings(), Timings(), Timings(), Timings()
    limits = httpx.Limits(max_keepalive_connections=4)
    least_port = free_port()
    relay = await asyncio.create_subprocess_exec(
        sys.executable, str(ROOT / "bench" / "_least_proxy.py"), str(least_port), proxy
    )
    async with (
        httpx.AsyncClient(base_url=stack.edge_url, timeout=60, limits=limits) as gateway_client,
        httpx.AsyncClient(timeout=60, limits=limits) as direct_client,
        httpx.AsyncClient(timeout=60, limits=limits) as again_client,
        httpx.AsyncClient(timeout=60, limits=limits) as least_client,
    ):
        for _ in range(100):
            try:
                await least_client.get(f"http://127.0.0.1:{least_port}/")
                break
            except httpx.HTTPError:
                await asyncio.sleep(0.1)
        paths = [
            (
                via,
                gateway_client,
                "/openai/v1/completions",
                {**body, "model": "qwen"},
                {"Authorization": f"Bearer {TOKEN}"},
            ),
            (direct, direct_client, f"{proxy}/v1/completions", {**body, "model": served}, BROWSER),
            (again, again_client, f"{proxy}/v1/completions", {**body, "model": served}, BROWSER),
            (least, least_client, f"http://127.0.0.1:{least_port}/v1/completions", {**body, "model": served}, {}),
        ]
        for _ in range(10):  # warm every connection and the engine's caches
            for _, client, url, payload, headers in paths:
                await streamed(client, url, payload, headers)
        for index in range(requests):
            turn = index % len(paths)
            order = paths[turn:] + paths[:turn]  # who goes first rotates: no path always follows another
            for timings, client, url, payload, headers in order:
                first, offsets = await streamed(client, url, payload, headers)
                timings.ttfb.append(first)
                timings.offsets.append(offsets)
                timings.chunks.append(len(offsets))
    relay.terminate()
    await relay.wait()
    return via, direct, again, least


async def wait_down(stack: Stack) -> None:
    async with httpx.AsyncClient(base_url=stack.edge_url, timeout=30) as edge:
        await edge.post("/api/pods/qwen/stop", headers={"X-Rig-Operator-Token": OPERATOR})
        for _ in range(600):
            models = (await edge.get("/openai/v1/models", headers={"Authorization": f"Bearer {TOKEN}"})).json()
            if models["data"][0]["state"] == "down":
                return
            await asyncio.sleep(0.1)
    raise RuntimeError("the pod did not go down")


async def cold_path(stack: Stack) -> float:
    await wait_down(stack)
    body = {"model": "qwen", "prompt": "hello", "max_tokens": 4, "stream": True}
    async with httpx.AsyncClient(base_url=stack.edge_url, timeout=900) as edge:
        began = time.perf_counter()
        async with edge.stream(
            "POST", "/openai/v1/completions", json=body, headers={"Authorization": f"Bearer {TOKEN}"}
        ) as answer:
            async for line in answer.aiter_lines():
                if line.startswith("data: "):
                    if '"error"' in line:
                        raise RuntimeError(f"the cold request was refused: {line}")
                    return time.perf_counter() - began
    raise RuntimeError("no token came back")


def engine_alone(served: str) -> float:
    """A real vLLM started alone: process start → its first token, the floor of any cold path."""
    engine = installation()
    port = free_port()
    began = time.perf_counter()
    process = subprocess.Popen(
        engine.serve_argv(port=port, served_model_name=served),
        env=engine.serve_env(os.environ),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        body = {"model": served, "prompt": "hello", "max_tokens": 4, "stream": True}
        with httpx.Client(timeout=5) as client:
            while time.perf_counter() - began < 600:
                try:
                    with client.stream("POST", f"http://127.0.0.1:{port}/v1/completions", json=body) as answer:
                        if answer.status_code == 200:
                            for line in answer.iter_lines():
                                if line.startswith("data: "):
                                    return time.perf_counter() - began
                except httpx.HTTPError:
                    pass
                time.sleep(0.2)
        raise RuntimeError("the engine did not answer within 600 s")
    finally:
        os.killpg(process.pid, 15)
        process.wait(timeout=30)


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=300, help="streamed completions a path (warm)")
    parser.add_argument("--engine", choices=("simulated", "vllm"), default="simulated")
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    sim = [f"--{name.replace('_', '-')}-seconds" for name in SIM_BOOT]
    sim_args = [x for pair in zip(sim, (str(v) for v in SIM_BOOT.values()), strict=True) for x in pair]
    sim_args += ["--stopped-pod", "--stream-chunk-seconds", "0.01", "--engine", args.engine]
    env = dict(ENV)
    if args.engine == "vllm":
        env[VENV_ENV] = str(installation().venv)
    with tempfile.TemporaryDirectory(prefix="gateway-bench-") as data:
        stack = Stack(
            StackConfig(
                data_dir=Path(data),
                edge_port=0,
                admin_port=0,
                stats_port=0,
                simulator_port=0,
                services=(POD_CONTROLLER, IDLE_MONITOR, GATEWAY),
                relay_logs=False,
                extra_env=env,
                simulator_args=sim_args,
                durable_db=False,
            )
        )
        await stack.start()
        try:
            served = "tiny"
            first_wake = await cold_path(stack)  # the first wake also warms the paths
            via, direct, again, least = await warm_path(stack, args.requests, served)
            cold = await cold_path(stack)
        finally:
            await stack.stop()
    own = sum(SIM_BOOT.values()) if args.engine == "simulated" else engine_alone("tiny")
    load_after = os.getloadavg()[0]
    first_added, chunk_added = added(via, direct)
    first_floor, chunk_floor = added(again, direct)
    held_back = sum(1 for a, b in zip(via.chunks, direct.chunks, strict=True) if a != b)
    print(f"gateway_latency: engine {args.engine}, {args.requests} streamed completions a path, "
          f"{statistics.median(via.chunks):.0f} chunks each; load {load_before:.1f} → {load_after:.1f}")  # fmt: skip
    print("warm path: added by the edge and the gateway (through them − direct, paired by round and chunk)")
    print(row("time to first byte", first_added))
    print(row("each chunk after the first", chunk_added))
    print("floor: the same engine asked directly twice (direct − direct): the machine's noise")
    print(row("time to first byte", first_floor))
    print(row("each chunk after the first", chunk_floor))
    least_first, least_chunk = added(least, direct)
    print("floor: the least Python hop, an aiohttp pass-through in front of the same engine (least − direct)")
    print(row("time to first byte", least_first))
    print(row("each chunk after the first", least_chunk))
    print(f"  direct time to first byte p50 {statistics.median(direct.ttfb) * 1000:.3f} ms; "
          f"through the gateway {statistics.median(via.ttfb) * 1000:.3f} ms")  # fmt: skip
    print(f"  requests whose chunk count differs between the paths: {held_back}")
    print("cold path: request to first token through the edge, the pod stopped")
    print(f"  first wake {first_wake:.2f} s, after a stop {cold:.2f} s; the engine's own start {own:.2f} s "
          f"({'the simulated boot' if args.engine == 'simulated' else 'a vLLM started alone, to its first token'}); "
          f"Thermostat's share {cold - own:.2f} s ({cold / own:.2f}×)")  # fmt: skip
    p50, p99 = statistics.median(first_added), quantile(first_added, 0.99)
    c50, c99 = statistics.median(chunk_added), quantile(chunk_added, 0.99)
    met = p50 <= GOAL_P50_MS and p99 <= GOAL_P99_MS and c50 <= GOAL_P50_MS and c99 <= GOAL_P99_MS and not held_back
    floor_met = statistics.median(least_first) <= GOAL_P50_MS and quantile(least_first, 0.99) <= GOAL_P99_MS
    verdict = "met" if met else "NOT met"
    print(f"goal (p50 ≤ {GOAL_P50_MS} ms, p99 ≤ {GOAL_P99_MS} ms added, no chunk held back): {verdict}; "
          f"the least Python hop {'meets' if floor_met else 'misses'} it in this run")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
