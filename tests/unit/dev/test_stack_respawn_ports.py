"""A respawned child whose /metrics port another process took while it was down serves /metrics elsewhere; its
gRPC port (its address) stays. CI saw the chaos suite's restarted idle monitor die on `address already in use`:
the free port chosen at start is an ephemeral one, which an outgoing connection can be given meanwhile."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

from thermostat.chassis.ports import free_port
from thermostat.chassis.registry import IDLE_MONITOR
from thermostat.dev.stack.supervisor import Child, Stack, StackConfig

EXITS = [sys.executable, "-c", "pass"]


async def _exited_child(stack: Stack, name: str, metrics_port: int, grpc_port: int) -> Child:
    child = await stack._spawn(name, EXITS, {IDLE_MONITOR.metrics_port_env: str(metrics_port)}, port=grpc_port)
    await child.process.wait()
    return child


async def test_a_metrics_port_taken_while_the_child_was_down_moves_and_its_grpc_port_stays(tmp_path: Path) -> None:
    stack = Stack(StackConfig(data_dir=tmp_path, relay_logs=False, services=(IDLE_MONITOR,)))
    metrics, grpc_port = free_port(), free_port()
    stack.metrics_ports[IDLE_MONITOR.name] = metrics
    child = await _exited_child(stack, IDLE_MONITOR.name, metrics, grpc_port)
    with socket.socket() as taker:
        taker.bind(("127.0.0.1", metrics))
        taker.listen()
        await stack.respawn(child)
    await child.process.wait()
    moved = int(child.env[IDLE_MONITOR.metrics_port_env])
    assert moved != metrics and moved > 0
    assert stack.metrics_ports[IDLE_MONITOR.name] == moved  # the summary names where it serves now
    assert child.port == grpc_port


async def test_a_metrics_port_still_free_is_kept(tmp_path: Path) -> None:
    stack = Stack(StackConfig(data_dir=tmp_path, relay_logs=False, services=(IDLE_MONITOR,)))
    metrics = free_port()
    child = await _exited_child(stack, f"{IDLE_MONITOR.name}#2", metrics, free_port())
    await stack.respawn(child)
    await child.process.wait()
    assert child.env[IDLE_MONITOR.metrics_port_env] == str(metrics)
