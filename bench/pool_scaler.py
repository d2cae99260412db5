"""Pool scaler pass time over 1,000 warm machines, probes included, a share of them black-holed.

Run: .venv/bin/python bench/pool_scaler.py [--machines 1000] [--black-holed 0.1]

Issue 10's third measure. A pass's cost is its SQL and its probes, not the machines' processes, so the
machines are rows: `--machines` warm machine rows owned by one dispatcher (in this process, over an embedded
Postgres with fsync off, its scaler driven by hand), whose endpoints point at three real reference workers
(`python -m thermostat.worker`, booted as bench/pool_calibration.py boots its worker) and, for the
`--black-holed` share, at a loopback socket that listens and never accepts or answers (a machine gone quiet:
its probe runs into the probe timeout). The type allows 3 health misses, so passes 1 and 2 count misses,
pass 3 retires the black-holed machines (stop and forget), and pass 4 probes only healthy ones. Each pass is
the service's whole `scaler_pass()`: lease, reclaim, catalogue, placement, reaping, probes, misses, stops.

Goal: every pass ≤ one probe timeout + 1 s. The load average is printed (the machine is shared).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import socket
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

import pool_calibration as calibration  # noqa: E402
from pool_throughput import load_line  # noqa: E402

from tests.fixtures.postgres import embedded_data_dir  # noqa: E402
from thermostat.dev.embedded_postgres import EmbeddedPostgres  # noqa: E402
from thermostat.policy.pool.machine_type import BackendKind, Catalogue, parse_catalogue  # noqa: E402
from thermostat.pool_dispatcher.dispatcher import Dispatcher  # noqa: E402
from thermostat.pool_dispatcher.repository import PoolRepository  # noqa: E402
from thermostat.providers.pool.local import LocalBackend  # noqa: E402
from thermostat.providers.pool.worker_client import DEFAULT_PROBE_TIMEOUT_SECONDS, WorkerClient  # noqa: E402
from thermostat.store.db import Store  # noqa: E402

TYPE = "probed"
HEALTH_SERVERS = 3
PASSES = 4
INSERT = """
INSERT INTO pool_machines (id, tenant_id, machine_type, image, backend, provider_id, endpoint, token, state, owner,
                           owner_term, cool_down_seconds, warm_at, last_active_at)
SELECT m.id, 'tenant-' || (m.n % 50), $1, $2, 'local', 'bench-' || m.n, m.endpoint, 'bench-token', 'warm', $3, $4,
       3600, now(), now()
FROM unnest($5::uuid[], $6::int[], $7::text[]) AS m(id, n, endpoint)
"""


def catalogue() -> Catalogue:
    parsed = parse_catalogue(
        [
            {
                "name": TYPE,
                "image": f"{sys.executable} -m thermostat.worker",
                "backend": "local",
                "cool_down_seconds": 3600,
                "health_check_failures": 3,
            }
        ]
    )
    assert isinstance(parsed, Catalogue), parsed
    return parsed


async def main(dsn: str, machines: int, black_holed_share: float) -> None:
    print(f"{machines} warm machines, {black_holed_share:.0%} black-holed; at start: {load_line()}", flush=True)
    logging.getLogger("thermostat").setLevel(logging.ERROR)  # not a retirement line per machine
    store = await Store.open(dsn, max_size=10, application_name="pool-scaler-bench")
    helper_client = WorkerClient()
    helpers = LocalBackend(helper_client)
    client = WorkerClient()
    kind = catalogue()
    dispatcher = Dispatcher(
        repository=PoolRepository(store.pool),
        leases=store.leases,
        backends={BackendKind.LOCAL: LocalBackend(client)},
        client=client,
        catalogue=kind,
        instance_id="scaler-bench",
        run_scaler=False,
    )
    hole = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    hole.bind(("127.0.0.1", 0))
    hole.listen(1)  # never accepted: connects queue or hang, requests get no answer
    black_hole = f"http://127.0.0.1:{hole.getsockname()[1]}"
    timings: list[tuple[float, int, int]] = []
    try:
        servers = [(await calibration.boot_worker(helpers)).endpoint for _ in range(HEALTH_SERVERS)]
        await dispatcher.start()
        quiet = round(machines * black_holed_share)
        endpoints = [black_hole if n < quiet else servers[n % len(servers)] for n in range(machines)]
        (machine_type,) = kind.types
        async with store.pool.acquire() as connection:
            await connection.execute(
                INSERT,
                TYPE,
                machine_type.image,
                dispatcher.ownership.owner.instance,
                dispatcher.ownership.owner.term,
                [uuid.uuid4() for _ in range(machines)],
                list(range(machines)),
                endpoints,
            )
        for _ in range(PASSES):
            started = time.perf_counter()
            await dispatcher.scaler.scaler_pass()
            elapsed = time.perf_counter() - started
            async with store.pool.acquire() as connection:
                row = await connection.fetchrow(
                    "SELECT count(*) FILTER (WHERE state = 'warm') AS warm, "
                    "coalesce(max(health_misses), 0) AS misses FROM pool_machines"
                )
            timings.append((elapsed, row["warm"], row["misses"]))
    finally:
        await dispatcher.close()
        hole.close()
        await helpers.aclose()
        await helper_client.aclose()
        await client.aclose()
        await store.close()
    goal = DEFAULT_PROBE_TIMEOUT_SECONDS + 1.0
    print(f"\nprobe timeout {DEFAULT_PROBE_TIMEOUT_SECONDS:g} s; goal per pass ≤ {goal:g} s")
    print(f"{'pass':>5}{'seconds':>10}{'× goal':>9}{'warm after':>12}{'max misses':>12}")
    for n, (elapsed, warm, misses) in enumerate(timings, 1):
        print(f"{n:>5}{elapsed:>10.2f}{elapsed / goal:>8.2f}x{warm:>12}{misses:>12}")
    worst = max(t[0] for t in timings)
    print(f"worst pass {worst:.2f} s = {worst / goal:.2f}x goal ({'met' if worst <= goal else 'NOT met'})")
    print(f"at end: {load_line()}")


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--machines", type=int, default=1000, help="warm machine rows (default 1000)")
    parser.add_argument("--black-holed", type=float, default=0.1, help="share that never answers (default 0.1)")
    args = parser.parse_args()
    with embedded_data_dir() as data_dir, EmbeddedPostgres(data_dir, durable=False) as server:
        asyncio.run(main(server.local_dsn, args.machines, args.black_holed))


if __name__ == "__main__":
    cli()
