"""What the wakes-under-faults scenario runs against and how it reads the aftermath.

Several pods, each on its own network volume of one RunPod simulator, behind one in-process pod controller
over loopback gRPC and real Postgres. Every RunPod request the controller sends carries the request id of the
RPC it serves (`TAG`), so the simulator's request log can be cut into one sequence of calls per wake even
though every wake lists the same `GET /v2/pods`.
"""

from __future__ import annotations

import contextlib
import functools
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass

import httpx
import pytest

import thermostat.pod_controller.__main__ as pod_controller_main
from tests.fixtures.services import RunningService, pod_controller_env, start_pod_controller
from thermostat.chassis.request_context import request_id_var
from thermostat.dev.simulators.runpod.server import RunPodSimulator
from thermostat.policy.common.pod_options import parse_pod_options
from thermostat.policy.wake.gpu_selection import select_gpus
from thermostat.providers.runpod.client import RunPodV2Client
from thermostat.store.db import Store

TAG = "x-chaos-request-id"
BILLING = frozenset({"PROVISIONING", "STARTING", "RUNNING"})
# one volume per pod; the first is the simulator's default EU-RO-1 volume
VOLUMES = {"qwen": "bjn7d94ej9", "llama": "chaosvol0001", "mistral": "chaosvol0002", "phi": "chaosvol0003"}


class _TaggingTransport(httpx.AsyncHTTPTransport):
    """Stamps each request with the request id of the RPC the controller is serving ("-" outside one)."""

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        request.headers[TAG] = request_id_var.get() or "-"
        return await super().handle_async_request(request)


@contextlib.contextmanager
def tagged_runpod_calls() -> Iterator[None]:
    """A pod controller built inside this block sends its RunPod calls through the tagging transport."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(
            pod_controller_main,
            "RunPodV2Client",
            functools.partial(RunPodV2Client, transport=_TaggingTransport()),
        )
        yield


def chaos_env(sim: RunPodSimulator, **overrides: str) -> dict[str, str]:
    """Every pod of VOLUMES on its volume; a RunPod call times out after 0.5 s (a hang costs little)."""
    env = pod_controller_env(
        sim,
        RUNPOD_PODS=",".join(VOLUMES),
        RUNPOD_TIMEOUT_SECONDS="0.5",
        WAKE_LEASE_SECONDS="5",
        **{f"RUNPOD_{name.upper()}_VOLUME_ID": volume for name, volume in VOLUMES.items()},
    )
    env.update(overrides)
    return env


def prepare_world(sim: RunPodSimulator) -> None:
    """The volumes, and a mixed start: qwen and phi have a stopped pod, llama a running one, mistral none."""
    for volume in VOLUMES.values():
        if volume not in sim.world.volumes():
            sim.add_volume(volume, "EU-RO-1")
    sim.configure(hang_seconds=1.0)
    sim.add_pod(volume_id=VOLUMES["qwen"], datacenter_id="EU-RO-1", status="EXITED")
    sim.add_pod(volume_id=VOLUMES["phi"], datacenter_id="EU-RO-1", status="EXITED")
    sim.add_pod(volume_id=VOLUMES["llama"], datacenter_id="EU-RO-1", status="RUNNING")


async def candidates_per_pod(sim: RunPodSimulator, env: Mapping[str, str]) -> dict[str, int]:
    """How many GPUs each pod's create walk may try: the catalogue through the real selection policy."""
    async with RunPodV2Client(env["RUNPOD_API_KEY"], base_url=sim.base_url) as client:
        catalog = await client.get_catalog()
    assert catalog, "the catalogue must be readable before faults start"
    return {pod.name: len(select_gpus(catalog, pod.gpu_criteria()).candidates) for pod in parse_pod_options(env).pods}


@contextlib.asynccontextmanager
async def chaos_controller(sim: RunPodSimulator, store: Store, env: Mapping[str, str]) -> AsyncIterator[RunningService]:
    with tagged_runpod_calls():
        async with start_pod_controller(env, store) as running:
            yield running


# --- the aftermath --------------------------------------------------------------------------------------------


def _volume_of(v2: Mapping[str, object]) -> str | None:
    mounts = v2.get("mounts")
    network = mounts.get("network") if isinstance(mounts, dict) else None
    for mount in network or ():
        if isinstance(mount, dict) and isinstance(mount.get("volumeId"), str):
            return str(mount["volumeId"])
    return None


def volumes_with_two_billing_pods(sim: RunPodSimulator) -> dict[str, list[str]]:
    """Volume → its billing pods, for every volume with more than one billing now."""
    billing: dict[str, list[str]] = defaultdict(list)
    for state in sim.pods():
        v2 = state["v2"]
        assert isinstance(v2, dict)
        volume = _volume_of(v2)
        if volume is not None and v2["status"] in BILLING:
            billing[volume].append(str(v2["id"]))
    return {volume: pods for volume, pods in billing.items() if len(pods) > 1}


def most_pods_billing_at_once_on_a_volume(sim: RunPodSimulator) -> int:
    """Over the whole run, from the world's billed stretches: the most pods of one volume billing at once."""
    moments: dict[str, list[tuple[float, int]]] = defaultdict(list)
    for stretch in sim.billed():
        if stretch.volume_id is None:
            continue
        moments[stretch.volume_id].append((stretch.start, 1))
        if stretch.end is not None:
            moments[stretch.volume_id].append((stretch.end, -1))
    most = 0
    for steps in moments.values():
        billing = 0
        # an end and a start at the same instant are a hand-over, not an overlap: ends sort first
        for _, step in sorted(steps):
            billing += step
            most = max(most, billing)
    return most


def reclaim(sim: RunPodSimulator, volume: str) -> bool:
    """RunPod takes a pod's host away: a billing pod on `volume` becomes TERMINATED (the next wake replaces it)."""
    for state in sim.pods():
        v2 = state["v2"]
        assert isinstance(v2, dict)
        if _volume_of(v2) == volume and v2["status"] in BILLING:
            sim.set_pod_status(str(v2["id"]), "TERMINATED")
            return True
    return False


@dataclass(frozen=True, slots=True)
class Call:
    method: str
    path: str
    faulted: str | None  # the fault kind the simulator answered with, None for a true answer


def calls_by_request(sim: RunPodSimulator) -> dict[str, list[Call]]:
    """Each tagged RPC's RunPod calls in the order the simulator received them, with the fault each got."""
    faulted = {id(entry.request): entry.fault.kind or "scripted" for entry in sim.served_faults()}
    calls: dict[str, list[Call]] = defaultdict(list)
    for request in sim.requests("/v2/"):
        tag = request.headers.get(TAG, "-")
        calls[tag].append(Call(request.method, request.path, faulted.get(id(request))))
    return calls


def is_lookup(call: Call) -> bool:
    return (call.method, call.path) == ("GET", "/v2/pods")


def is_create(call: Call) -> bool:
    return (call.method, call.path) == ("POST", "/v2/pods")


def creates_after_an_unreadable_lookup(calls: list[Call]) -> int:
    """Creates whose latest volume lookup (in the same wake) was answered by a fault, or that had none."""
    last_lookup: Call | None = None
    bad = 0
    for call in calls:
        if is_lookup(call):
            last_lookup = call
        elif is_create(call) and (last_lookup is None or last_lookup.faulted is not None):
            bad += 1
    return bad


def fault_counts(sim: RunPodSimulator) -> Counter[str]:
    return Counter(entry.fault.kind or "scripted" for entry in sim.served_faults())
