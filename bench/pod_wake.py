"""What the control plane adds to a wake, and how many RunPod calls each wake outcome makes.

Run: .venv/bin/python bench/pod_wake.py [--samples 150]

Starts the stack the way `make run` does (the dev stack's Stack): an embedded Postgres in a temporary directory, the
RunPod simulator with zero lifecycle delays, the pod controller and Envoy, each a process of its own. Then,
in one run:

- AlreadyRunning: POST /api/pods/qwen/start through the edge on a RUNNING pod, `--samples` times. After each
  wake the simulator's request log says which RunPod calls it made; the bench replays exactly those calls
  straight at the simulator (same bearer, keep-alive client) and times them. Control-plane time added is
  the wake's latency minus its own calls' time, per sample: the edge, transcoding, gRPC, the wake gate's
  Postgres lease and history rows, and the controller's Python, but not RunPod.
- Created: the same with no pod on the volume (the simulator is reset before each wake and before each
  replay, with the created pod's id pinned, so the replay's POSTs answer as the wake's did).
- RunPod API calls per outcome (AlreadyRunning, Started, Created), listed and checked against the pod-control seed's
  flow: every call must be one the flow needs (pod-control seed: Wake service part 2b).

PASS when the p50 of control-plane time added is under 50 ms for both wakes and no outcome makes a call
beyond the pod-control seed's flow. Client-side Python (httpx) is in both the wake and the replay, so it cancels out of
the difference; the ratios, not the absolute values, are the result on a shared machine.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests" / "gen"), str(ROOT)]

import httpx  # noqa: E402

from thermostat.chassis.registry import POD_CONTROLLER  # noqa: E402
from thermostat.dev.stack.supervisor import SIMULATOR_API_KEY, Stack, StackConfig  # noqa: E402

BUDGET_S = 150.0
WARMUP = 15
LIMIT_MS = 50.0
OPERATOR_TOKEN = "bench-operator-token"  # noqa: S105 - a throwaway token for a throwaway stack
VOLUME = "bjn7d94ej9"
SEEDED_POD = "benchpod00001a"
ZERO_DELAYS = ("--provisioning-seconds", "0", "--starting-seconds", "0", "--model-ready-seconds", "0")
ENV = {
    "RIG_OPERATOR_TOKEN": OPERATOR_TOKEN,
    # the only sleep on these paths is the poll after a start: keep it from dominating the Started count run
    "RUNPOD_WAKE_POLL_SECONDS": "0.001",
    "LOG_LEVEL": "INFO",
}
# The pod-control seed's flow for each outcome against the simulator's catalogue (the 2026-09-11 incident's: the
# cheapest card listed in EU-RO-1 answers 400, the A100 places): nothing more may be asked of RunPod.
EXPECTED = {
    "AlreadyRunning": ["GET /v2/pods", "GET /v2/pods/{id}"],
    "Started": ["GET /v2/pods", "GET /v2/pods/{id}", "POST /v2/pods/{id}/action", "GET /v2/pods/{id}"],
    "Created": ["GET /v2/pods", "GET /v2/catalog/gpus", "POST /v2/pods", "POST /v2/pods", "GET /v2/pods/{id}"],
}


@dataclass
class Series:
    wake: list[float] = field(default_factory=list)
    provider: list[float] = field(default_factory=list)

    @property
    def added(self) -> list[float]:
        return [w - p for w, p in zip(self.wake, self.provider, strict=True)]


@dataclass(frozen=True)
class Call:
    method: str
    path: str
    query: str
    json: object


def _percentile(samples: list[float], q: int) -> float:
    return statistics.quantiles(samples, n=100, method="inclusive")[q - 1] if len(samples) > 1 else samples[0]


def _shape(call: Call, pod_ids: set[str]) -> str:
    path = call.path
    for pod_id in pod_ids:
        path = path.replace(pod_id, "{id}")
    return f"{call.method} {path}"


class Bench:
    def __init__(self, edge: httpx.AsyncClient, sim: httpx.AsyncClient, api: httpx.AsyncClient) -> None:
        self.edge = edge
        self.sim = sim
        self.api = api

    async def control(self, method: str, path: str, body: object = None) -> object:
        response = await self.sim.request(method, path, json=body)
        response.raise_for_status()
        return response.json()

    async def seed(self, status: str) -> None:
        await self.control("POST", "/pods", {"id": SEEDED_POD, "status": status, "volumeId": VOLUME})

    async def calls(self) -> list[Call]:
        rows = await self.control("GET", "/requests?prefix=/v2/")
        assert isinstance(rows, list)
        return [Call(r["method"], r["path"], r["query"], r["json"]) for r in rows]

    async def wake(self, outcome: str) -> tuple[float, dict[str, object]]:
        started = time.perf_counter()
        response = await self.edge.post("/api/pods/qwen/start", headers={"X-Rig-Operator-Token": OPERATOR_TOKEN})
        elapsed = time.perf_counter() - started
        body = response.json()
        if response.status_code != 200 or body.get("outcome") != outcome:
            raise RuntimeError(f"expected {outcome}, got {response.status_code} {response.text}")
        return elapsed, body

    async def replay(self, calls: list[Call]) -> float:
        """Time the wake's own RunPod calls, made directly, one after another as the wake made them."""
        started = time.perf_counter()
        for call in calls:
            url = call.path + (f"?{call.query}" if call.query else "")
            await self.api.request(call.method, url, json=call.json if call.method == "POST" else None)
        return time.perf_counter() - started

    async def already_running(self, samples: int, deadline: float) -> Series:
        await self.control("POST", "/reset")
        await self.seed("RUNNING")
        series = Series()
        for i in range(WARMUP + samples):
            if time.monotonic() > deadline:
                break
            await self.control("DELETE", "/requests")
            elapsed, _ = await self.wake("AlreadyRunning")
            provider = await self.replay(await self.calls())
            if i >= WARMUP:
                series.wake.append(elapsed)
                series.provider.append(provider)
        return series

    async def created(self, samples: int, deadline: float) -> Series:
        series = Series()
        for i in range(WARMUP + samples):
            if time.monotonic() > deadline:
                break
            await self.control("POST", "/reset")
            elapsed, body = await self.wake("Created")
            calls = await self.calls()
            await self.control("POST", "/reset")
            await self.control("POST", "/next-pod-ids", {"ids": [body["podId"]]})
            provider = await self.replay(calls)
            if i >= WARMUP:
                series.wake.append(elapsed)
                series.provider.append(provider)
        return series

    async def calls_per_outcome(self) -> dict[str, list[str]]:
        shapes: dict[str, list[str]] = {}
        for outcome, seeded in (("AlreadyRunning", "RUNNING"), ("Started", "EXITED"), ("Created", None)):
            await self.control("POST", "/reset")
            if seeded:
                await self.seed(seeded)
            _, body = await self.wake(outcome)
            shapes[outcome] = [_shape(c, {SEEDED_POD, str(body["podId"])}) for c in await self.calls()]
        return shapes


def _row(label: str, samples: list[float]) -> str:
    return f"  {label:<40} {_percentile(samples, 50) * 1000:8.2f} {_percentile(samples, 99) * 1000:8.2f}"


async def _run(samples: int) -> bool:
    logging.basicConfig(level=logging.WARNING)
    deadline = time.monotonic() + BUDGET_S
    with tempfile.TemporaryDirectory(prefix="pod-wake-bench-") as workdir:
        stack = Stack(
            StackConfig(
                data_dir=Path(workdir),
                database_url=None,
                durable_db=False,
                edge_port=0,
                admin_port=0,
                simulator_port=0,
                service_ports={},
                services=(POD_CONTROLLER,),
                relay_logs=False,
                extra_env=ENV,
                simulator_args=ZERO_DELAYS,
            )
        )
        await stack.start()
        try:
            assert stack.simulator_url is not None
            async with (
                httpx.AsyncClient(base_url=stack.edge_url, timeout=30) as edge,
                httpx.AsyncClient(base_url=f"{stack.simulator_url}/_sim", timeout=10) as sim,
                httpx.AsyncClient(
                    base_url=stack.simulator_url,
                    timeout=10,
                    headers={"Authorization": f"Bearer {SIMULATOR_API_KEY}", "Accept": "application/json"},
                ) as api,
            ):
                bench = Bench(edge, sim, api)
                running = await bench.already_running(samples, deadline)
                created = await bench.created(max(samples // 2, 10), deadline)
                shapes = await bench.calls_per_outcome()
        finally:
            await stack.stop()

    print(
        f"pod wake through the edge, zero-delay simulator ({len(running.wake)} AlreadyRunning and "
        f"{len(created.wake)} Created wakes after {WARMUP} warm-up each)"
    )
    print(f"  {'':<40} {'p50 ms':>8} {'p99 ms':>8}")
    ok = True
    for name, series in (("AlreadyRunning", running), ("Created", created)):
        if not series.wake:
            print(f"  {name}: no samples within the {BUDGET_S:.0f} s budget")
            ok = False
            continue
        print(_row(f"{name} wake (REST via Envoy)", series.wake))
        print(_row("  its RunPod calls, made directly", series.provider))
        print(_row("  control-plane time added", series.added))
        added = _percentile(series.added, 50) * 1000
        ratio = _percentile(series.wake, 50) / _percentile(series.provider, 50)
        print(f"  {'  wake / its RunPod calls (p50)':<40} {ratio:8.2f}x")
        verdict = added < LIMIT_MS
        ok &= verdict
        print(f"  {'  p50 added under ' + f'{LIMIT_MS:.0f} ms':<40} {'yes' if verdict else 'NO':>8}")
    print("RunPod API calls per wake outcome (seed flow: Wake service part 2b)")
    for outcome, calls in shapes.items():
        matches = calls == EXPECTED[outcome]
        ok &= matches
        print(f"  {outcome:<15} {len(calls)} call(s){'' if matches else '  NOT the seed flow'}: {', '.join(calls)}")
        if not matches:
            print(f"  {'':<15} expected: {', '.join(EXPECTED[outcome])}")
    print("PASS" if ok else "FAIL")
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--samples", type=int, default=150)
    args = parser.parse_args()
    return 0 if asyncio.run(_run(args.samples)) else 1


if __name__ == "__main__":
    raise SystemExit(main())
