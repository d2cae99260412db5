"""A `POST /v2/pods` body read as RunPod's REST v2 spec (v2.9.0, `api-reference-v2/openapi.json`) judges it.

The spec's create documents two refusals apart (its "Which failures are worth retrying" table):
- 422: "The body does not match the contract. `errors` lists each violation. Fix the request. Never retry."
  Every schema rule of `CreatePodRequest` is one: `name` required (minLength 1), `templateId` minLength 1,
  `cloud` SECURE or COMMUNITY, `gpu.id` required and `gpu.count` >= 1, `cpu.id` and `cpu.vcpuCount` (>= 2)
  required, `dataCenterIds` strings, `env` an object of strings, `ports` strings, `mounts.network` at most one
  entry carrying both `volumeId` and `path` ("Missing required fields → 422"). So is a `templateId` naming a
  serverless template ("must not be a serverless template (→ 422)"), judged where templates are known.
- 400: "The body matches the contract but was rejected — either it breaks a cross-field rule, or this GPU and
  data center combination could not be placed." Cross-field: exactly one of `gpu` / `cpu` ("enforced at the
  handler layer"), `image` unless `templateId`, a vCPU count the flavor does not offer, a port that is not
  `port/protocol`. Placement (volumes, capacity) is the world's.
A body that is not JSON at all is malformed before any contract applies: 400, as the server answers it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# cpu3g and its siblings come in powers of two (worker-pool seed, "The RunPod backend")
CPU_VCPU_COUNTS = (2, 4, 8, 16, 32)
VALIDATION_FAILED = "Request validation failed."
DEFAULT_DISK_GB = 50  # v1's containerDiskInGb default: the v2 spec names none


class ApiError(Exception):
    """ApiError is a v2 error answer: application/problem+json {title, status, detail, errors?}."""

    def __init__(self, status: int, title: str, detail: str, errors: tuple[str, ...] = ()) -> None:
        super().__init__(detail)
        self.status = status
        self.title = title
        self.detail = detail
        self.errors = errors

    def problem(self) -> dict[str, object]:
        problem: dict[str, object] = {"title": self.title, "status": self.status, "detail": self.detail}
        if self.errors:
            problem["errors"] = list(self.errors)
        return problem


def unprocessable(*errors: str) -> ApiError:
    """The spec's 422: the body does not match the contract, each violation listed in `errors`."""
    return ApiError(422, "Unprocessable Entity", VALIDATION_FAILED, errors)


def port_number(entry: str) -> int | None:
    try:
        return int(entry.split("/", 1)[0])
    except ValueError:
        return None


def _int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _strings(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


@dataclass(frozen=True, slots=True, kw_only=True)
class CreateRequest:
    name: str
    cloud: str
    template_id: str | None
    image: str | None
    gpu_id: str | None
    gpu_count: int
    vcpu_count: int | None
    cpu_id: str | None
    env: dict[str, str]
    datacenter_ids: list[str]
    ports: list[str]
    mounts: list[dict[str, str]]
    disk: int

    @staticmethod
    def read(body: object) -> CreateRequest:
        """The body as a create, or the spec's refusal: 422 listing every contract violation, else a 400 for
        the first cross-field rule it breaks."""
        if not isinstance(body, dict):
            raise unprocessable("$: expected an object")
        errors = _contract_violations(body)
        if errors:
            raise unprocessable(*errors)
        if (body.get("gpu") is None) == (body.get("cpu") is None):
            raise ApiError(400, "Bad Request", "exactly one of gpu and cpu is required")
        template_id, image = body.get("templateId"), body.get("image")
        if template_id is None and not image:
            raise ApiError(400, "Bad Request", "image is required unless templateId is given")
        gpu, cpu = body.get("gpu"), body.get("cpu")
        vcpus = cpu["vcpuCount"] if isinstance(cpu, dict) else None
        if vcpus is not None and vcpus not in CPU_VCPU_COUNTS:
            raise ApiError(400, "Bad Request", f"cpu.vcpuCount must be one of {', '.join(map(str, CPU_VCPU_COUNTS))}")
        ports = body.get("ports", [])
        if not all(port_number(port) for port in ports):
            raise ApiError(400, "Bad Request", 'ports must be a list like ["8000/http"]')
        network = (body.get("mounts") or {}).get("network") or []
        return CreateRequest(
            name=body["name"],
            cloud=body.get("cloud", "SECURE"),
            template_id=template_id,
            image=image or None,
            gpu_id=gpu["id"] if isinstance(gpu, dict) else None,
            gpu_count=gpu.get("count", 1) if isinstance(gpu, dict) else 0,
            vcpu_count=vcpus,
            cpu_id=cpu["id"] if isinstance(cpu, dict) else None,
            env=dict(body.get("env", {})),
            datacenter_ids=list(body.get("dataCenterIds", [])),
            ports=list(ports),
            mounts=[{"volumeId": mount["volumeId"], "path": mount["path"]} for mount in network],
            disk=body.get("disk", DEFAULT_DISK_GB),
        )


def _contract_violations(body: dict[str, Any]) -> list[str]:
    """Every way `body` breaks the `CreatePodRequest` schema, one line each."""
    errors: list[str] = []
    name = body.get("name")
    if not isinstance(name, str) or not name.strip():
        errors.append("$.name: name is required (a non-empty string)")
    if "templateId" in body and not (isinstance(body["templateId"], str) and body["templateId"]):
        errors.append("$.templateId: must be a non-empty string")
    if "image" in body and not isinstance(body["image"], str):
        errors.append("$.image: must be a string")
    if body.get("cloud", "SECURE") not in ("SECURE", "COMMUNITY"):
        errors.append("$.cloud: cloud must be one of SECURE, COMMUNITY")
    gpu, cpu = body.get("gpu"), body.get("cpu")
    if gpu is not None:
        if not isinstance(gpu, dict) or not isinstance(gpu.get("id"), str) or not gpu["id"]:
            errors.append("$.gpu.id: gpu.id is required")
        elif not _int(gpu.get("count", 1)) or gpu.get("count", 1) < 1:
            errors.append("$.gpu.count: gpu.count must be an integer >= 1")
    if cpu is not None:
        if not isinstance(cpu, dict) or not isinstance(cpu.get("id"), str) or not cpu["id"]:
            errors.append("$.cpu.id: cpu.id is required (a CPU flavor such as cpu3g)")
        if not isinstance(cpu, dict) or not _int(cpu.get("vcpuCount")) or cpu["vcpuCount"] < 2:
            errors.append("$.cpu.vcpuCount: cpu.vcpuCount is required, an integer >= 2")
    if "dataCenterIds" in body and not _strings(body["dataCenterIds"]):
        errors.append("$.dataCenterIds: must be an array of strings")
    env = body.get("env", {})
    if not isinstance(env, dict) or not all(isinstance(value, str) for value in env.values()):
        errors.append("$.env: env must be an object of strings")
    if "disk" in body and (not _int(body["disk"]) or body["disk"] < 1):
        errors.append("$.disk: disk must be an integer >= 1 (GB)")
    if "ports" in body and not _strings(body["ports"]):
        errors.append("$.ports: must be an array of strings")
    errors.extend(_mount_violations(body.get("mounts")))
    return errors


def _mount_violations(mounts: object) -> list[str]:
    if mounts is None:
        return []
    network = mounts.get("network", []) if isinstance(mounts, dict) else None
    if not isinstance(network, list):
        return ["$.mounts.network: mounts.network must be an array"]
    if len(network) > 1:
        return ["$.mounts.network: at most 1 network mount"]
    errors = []
    for mount in network:
        for required in ("volumeId", "path"):
            if not isinstance(mount, dict) or not isinstance(mount.get(required), str):
                errors.append(f"$.mounts.network[0].{required}: each network mount needs a {required}")
    return errors
