"""The simulated RunPod v2 API against the published spec's facts (runpod/docs `api-reference-v2/openapi.json`,
Frontdoor v2.9.0): every field a schema marks required is present, of the type the schema gives it."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.integration.simulator.conftest import API_KEY
from tests.integration.simulator.test_runpod_simulator_lifecycle import A100, VOLUME, create_body
from thermostat.dev.simulators.runpod.catalog import SimDatacenterStock, SimGpu
from thermostat.dev.simulators.runpod.server import RunPodSimulator
from thermostat.policy.wake.create_walk import CreateOutcome, classify
from thermostat.providers.runpod.client import RunPodV2Client
from thermostat.providers.runpod.shapes import read_catalog

# components.schemas.Pod (allOf ContainerConfig + this list): `required`
POD_REQUIRED = {
    "id", "name", "status", "actions", "image", "args", "disk", "mounts", "ports", "env", "registry", "cloud",
    "dataCenterId", "cudaVersion", "ssh", "template", "cost", "locked", "runtime", "createdAt", "startedAt",
    "globalNetworking",
}  # fmt: skip
# components.schemas.GpuType: `required`; price and maxCount each require `secure` and `community`
GPU_TYPE_REQUIRED = {"id", "name", "pool", "manufacturer", "memory", "secure", "community", "price", "maxCount"}
# components.schemas.DataCenterAvailability: `required`
DATACENTER_AVAILABILITY_REQUIRED = {"id", "name", "availability"}
GPU_MANUFACTURERS = {"NVIDIA", "AMD", "UNKNOWN"}  # components.schemas.GpuManufacturer: `enum`


def created(http: httpx.Client, headers: dict[str, str], **overrides: Any) -> dict[str, Any]:
    answer = http.post("/v2/pods", json=create_body(**overrides), headers=headers)
    assert answer.status_code == 201, answer.text
    pod: dict[str, Any] = answer.json()
    return pod


def every_read_of(http: httpx.Client, headers: dict[str, str], pod: dict[str, Any]) -> list[dict[str, Any]]:
    """The pod as the create answered it, as GET /v2/pods/{id} reads it, and as GET /v2/pods lists it."""
    got = http.get(f"/v2/pods/{pod['id']}", headers=headers).json()
    (listed,) = [p for p in http.get("/v2/pods", headers=headers).json()["pods"] if p["id"] == pod["id"]]
    return [pod, got, listed]


def test_a_gpu_pod_carries_every_field_the_spec_requires(
    sim: RunPodSimulator, http: httpx.Client, api_headers: dict[str, str]
) -> None:
    """Pod.required, in the create's answer, a GET and the list; `cpu` "omitted from GPU pods"."""
    for pod in every_read_of(http, api_headers, created(http, api_headers)):
        assert pod.keys() >= POD_REQUIRED, POD_REQUIRED - pod.keys()
        assert "cpu" not in pod
        assert pod["gpu"]["id"] == A100


def test_a_pod_carries_template_never_template_id_and_a_template_created_pod_keeps_no_link(
    sim: RunPodSimulator, http: httpx.Client, api_headers: dict[str, str]
) -> None:
    """CreatePodRequest.templateId: "the created pod does not retain a link to the template (`template` stays
    null)"; `templateId` is a create field, never a pod's."""
    for pod in every_read_of(http, api_headers, created(http, api_headers, templateId="cnz5fxyadi")):
        assert "templateId" not in pod
        assert pod["template"] is None


def test_cuda_ssh_locked_and_global_networking_are_as_the_spec_shapes_them(
    sim: RunPodSimulator, http: httpx.Client, api_headers: dict[str, str]
) -> None:
    """cudaVersion a string for a GPU host (null for a CPU pod: "not applicable"); ssh {proxy, direct} with
    PodSshEndpoint {host, port, username, command} or null; locked a boolean; globalNetworking {enabled}."""
    gpu_pod = created(http, api_headers)
    assert isinstance(gpu_pod["cudaVersion"], str)
    proxy = gpu_pod["ssh"]["proxy"]
    assert set(gpu_pod["ssh"]) == {"proxy", "direct"}
    assert {"host", "port", "username", "command"} == set(proxy)
    assert isinstance(proxy["port"], int)
    assert proxy["command"] == f"ssh {proxy['username']}@{proxy['host']}"
    assert gpu_pod["ssh"]["direct"] is None  # "Null unless `22/tcp` is in `ports`"
    assert gpu_pod["locked"] is False
    assert gpu_pod["globalNetworking"] == {"enabled": False}
    cpu_pod = created(
        http, api_headers, gpu=None, cpu={"id": "cpu3g", "vcpuCount": 2}, image="busybox", mounts=None, name="cpu"
    )
    assert cpu_pod["cudaVersion"] is None
    assert "gpu" not in cpu_pod


def test_a_pods_container_fields_are_of_the_spec_types(
    sim: RunPodSimulator, http: httpx.Client, api_headers: dict[str, str]
) -> None:
    """ContainerConfig: image and args strings, disk an integer, env an object of strings, registry null here."""
    pod = created(http, api_headers, image="busybox", env={"K": "V"}, disk=20)
    shown = (pod["image"], pod["args"], pod["disk"], pod["env"], pod["registry"])
    assert shown == ("busybox", "", 20, {"K": "V"}, None)
    from_template = created(http, api_headers, name="templated")
    assert isinstance(from_template["image"], str) and from_template["image"]


def test_every_catalogue_row_carries_what_gpu_type_requires_and_no_null_price(
    sim: RunPodSimulator, http: httpx.Client, api_headers: dict[str, str]
) -> None:
    """GpuType.required with `pool` (string or null); price.secure and price.community are numbers, never null,
    even for a cloud that does not offer the GPU (its flag says so); manufacturer from the enum."""
    for query in ("", "?include=AVAILABILITY&product=POD"):
        rows = http.get(f"/v2/catalog/gpus{query}", headers=api_headers).json()["gpus"]
        assert rows
        for row in rows:
            assert row.keys() >= GPU_TYPE_REQUIRED, (row["id"], GPU_TYPE_REQUIRED - row.keys())
            assert row["pool"] is None or isinstance(row["pool"], str)
            assert row["manufacturer"] in GPU_MANUFACTURERS
            for cloud in ("secure", "community"):
                assert isinstance(row["price"][cloud], int | float), (row["id"], cloud)
                assert isinstance(row["maxCount"][cloud], int)
    mi300x = next(row for row in rows if row["id"] == "AMD Instinct MI300X OAM")
    assert (mi300x["community"], mi300x["price"]["community"], mi300x["manufacturer"]) == (False, 0.0, "AMD")


def test_a_gpu_offered_on_no_secure_cloud_is_said_by_its_flag_and_the_client_reads_no_price(
    sim: RunPodSimulator, http: httpx.Client, api_headers: dict[str, str]
) -> None:
    """A community-only GPU answers `secure: false` beside a numeric price: never null, never a 0 $/h to rank."""
    sim.set_catalogue([
        SimGpu(id="NVIDIA Community Only", name="CO", manufacturer="NVIDIA", memory_gb=48, secure_price=None,
               community_price=0.2, datacenters=(SimDatacenterStock(id="EU-RO-1", availability="HIGH"),)),
    ])  # fmt: skip
    body = http.get("/v2/catalog/gpus", headers=api_headers).json()
    (row,) = body["gpus"]
    assert (row["secure"], row["price"]) == (False, {"secure": 0.0, "community": 0.2})
    (entry,) = read_catalog(body)
    assert entry.secure_price is None  # the wake's selection then excludes it as PriceUnknown


@pytest.mark.parametrize("query", ["?include=AVAILABILITY&product=POD"])
def test_every_data_center_entry_carries_its_name(
    sim: RunPodSimulator, http: httpx.Client, api_headers: dict[str, str], query: str
) -> None:
    """DataCenterAvailability.required: id, name, availability."""
    rows = http.get(f"/v2/catalog/gpus{query}", headers=api_headers).json()["gpus"]
    entries = [dc for row in rows for dc in row["dataCenters"]]
    assert entries
    for entry in entries:
        assert entry.keys() >= DATACENTER_AVAILABILITY_REQUIRED
        assert isinstance(entry["name"], str) and entry["name"]
    assert {"id": "US-TX-3", "name": "US Texas 3", "availability": "HIGH"} in entries


@pytest.mark.parametrize(
    "malformed",
    [
        pytest.param({"gpu": {"count": 1}}, id="gpu-without-id"),
        pytest.param({"cloud": "secure"}, id="cloud-not-in-the-enum"),
        pytest.param({"mounts": {"network": [{"volumeId": VOLUME}]}}, id="mount-without-path"),
    ],
)
async def test_the_real_client_reads_a_malformed_create_as_422_which_the_create_walk_aborts_on(
    sim: RunPodSimulator, malformed: dict[str, Any]
) -> None:
    """The client passes the 422 through untouched, its detail naming the violation, and the walk's classify
    reads it as Abort: "Fix the request. Never retry." """
    async with RunPodV2Client(API_KEY, base_url=sim.base_url) as client:
        result = await client.create_pod_from_body(create_body(**malformed))
    assert result.http_status == 422
    assert result.pod_id is None
    assert "Request validation failed. ($." in (result.detail or "")
    assert classify(result.http_status) is CreateOutcome.ABORT
    assert sim.pods() == []
