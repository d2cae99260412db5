"""RunPodBackend: machines as RunPod pods, created through the house's one RunPod client (RunPodV2Client).

Theory of operation (worker-pool seed, "The RunPod backend"; notes/provider-apis.md §1):
- start: `POST /v2/pods` named `{prefix}-{machine_type}-{machine_id}` (an orphan is findable in the console)
  with the image, the worker port as `"{port}/http"`, the type's env plus the worker token, `disk` only when
  the type sets disk_gb, and exactly one of `gpu: {id: gpu_type, count: gpu_count}` (a v2 create places
  exactly that GPU type, never another) or `cpu: {id: "cpu3g", vcpuCount}` with cpus rounded up to the
  power of two RunPod accepts (2-32; 4 GB of RAM per vCPU, so memory_mb is not sent). `provider_options`
  then merges into `gpu` / `cpu` / `env` and overrides any other body field, so a deployment can correct
  the API's shape without a release; the worker token is always put back last. Options that cannot be
  merged (an `env` that is not an object cannot hold the credential; a `gpu` block on a CPU type) are
  refused before any request is sent.
- The endpoint is the pod's proxy URL (RUNPOD_PROXY_URL_TEMPLATE, shared with the pod controller) on the
  worker port; region is the create answer's `dataCenterId`, None until the scheduler places the pod.
- A create that got no answer, a 5xx, or was cancelled in flight may still have placed a pod (a gateway
  error after the commit), and a 2xx without a pod id did place one: the pods are listed, and any named as
  this machine is terminated before the start fails, so nothing bills.
- stop terminates (`DELETE /v2/pods/{id}`); RunPod's own 404 means already gone, which is success.
- health is the worker's `GET /health` through the proxy: the proxy answers only for a RUNNING pod whose
  port listens, and an API read per probe would spend RunPod's rate limit on every scaler pass.
- Every job must finish within the proxy's 100 s (Cloudflare ends a longer request with a 524); catalogue
  validation refuses a runpod type whose job timeout is longer (thermostat.policy.pool.backends).
- Errors name the machine and carry RunPod's problem detail, bounded, never the key or the token.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any, Final

import httpx

from thermostat.policy.pool.backends import RUNPOD_MAX_VCPUS, runpod_vcpu_count
from thermostat.policy.pool.orphans import ListedMachine
from thermostat.providers.pool.backend import (
    DEFAULT_WORKER_PORT,
    WORKER_TOKEN_VARIABLE,
    Backend,
    BackendError,
    ListsMachines,
    MachineHandle,
    MachineSpec,
)
from thermostat.providers.pool.provider_errors import machine_subject, provider_error
from thermostat.providers.pool.worker_client import WorkerClient
from thermostat.providers.runpod.client import DEFAULT_BASE_URL, DEFAULT_PROXY_URL_TEMPLATE, RunPodV2Client

CPU_FLAVOR: Final = "cpu3g"
DEFAULT_NAME_PREFIX: Final = "thermostat"


def pod_name(spec: MachineSpec, *, prefix: str) -> str:
    return f"{prefix}-{spec.machine_type.name}-{spec.machine_id}"


def create_body(spec: MachineSpec, *, name_prefix: str, worker_port: int) -> dict[str, Any]:
    """The `POST /v2/pods` body for one machine (pure); BackendError for options that cannot be merged."""
    machine_type = spec.machine_type
    body: dict[str, Any] = {
        "name": pod_name(spec, prefix=name_prefix),
        "image": machine_type.image,
        "ports": [f"{worker_port}/http"],
        "env": dict(machine_type.env),
    }
    if machine_type.gpu_type is not None:
        body["gpu"] = {"id": machine_type.gpu_type, "count": machine_type.gpu_count}
    else:
        vcpus = runpod_vcpu_count(machine_type.cpus)
        if vcpus is None:
            raise BackendError(
                f"runpod: {machine_subject(spec.machine_id, machine_type.name)}: cpus {machine_type.cpus:g} is more "
                f"than the {RUNPOD_MAX_VCPUS} vCPUs a RunPod CPU pod has"
            )
        body["cpu"] = {"id": CPU_FLAVOR, "vcpuCount": vcpus}
    if machine_type.disk_gb is not None:
        body["disk"] = machine_type.disk_gb
    body = _merge_options(body, machine_type.provider_options, spec)
    body["env"][WORKER_TOKEN_VARIABLE] = spec.worker_token
    return body


def _merge_options(body: dict[str, Any], options: Mapping[str, Any], spec: MachineSpec) -> dict[str, Any]:
    subject = machine_subject(spec.machine_id, spec.machine_type.name)
    merged = dict(body)
    for key, value in options.items():
        if key in ("gpu", "cpu", "env"):
            if not isinstance(value, dict):
                why = "cannot hold the worker token" if key == "env" else "must be an object to merge into"
                raise BackendError(f"runpod: {subject}: provider_options.{key} {why}")
            if key not in merged:
                other = "cpu" if key == "gpu" else "gpu"
                raise BackendError(f"runpod: {subject}: provider_options.{key} given for a type that sends {other}")
            if key == "env" and not all(isinstance(setting, str) for setting in value.values()):
                raise BackendError(f"runpod: {subject}: provider_options.env values must be strings")
            merged[key] = {**merged[key], **value}
        else:
            merged[key] = value
    if not isinstance(merged.get("env"), dict):  # unreachable through the loop above; kept as the invariant
        raise BackendError(f"runpod: {subject}: env cannot hold the worker token")
    return merged


class RunPodBackend:
    """RunPodBackend rents one pod per machine; `api_key` is POOL_RUNPOD_API_KEY, else RUNPOD_API_KEY."""

    def __init__(
        self,
        worker: WorkerClient,
        *,
        api_key: str | None,
        base_url: str = DEFAULT_BASE_URL,
        proxy_url_template: str = DEFAULT_PROXY_URL_TEMPLATE,
        worker_port: int = DEFAULT_WORKER_PORT,
        name_prefix: str = DEFAULT_NAME_PREFIX,
        timeout_seconds: float = 30.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._worker = worker
        self._key = (api_key or "").strip()
        self._runpod = RunPodV2Client(
            api_key,
            base_url=base_url,
            proxy_url_template=proxy_url_template,
            timeout_seconds=timeout_seconds,
            transport=transport,
        )
        self._worker_port = worker_port
        self._prefix = name_prefix

    def __repr__(self) -> str:
        return f"RunPodBackend({self._runpod!r}, name_prefix={self._prefix!r})"

    async def aclose(self) -> None:
        await self._runpod.aclose()

    async def start(self, spec: MachineSpec) -> MachineHandle:
        subject = machine_subject(spec.machine_id, spec.machine_type.name)
        if not self._runpod.is_configured:
            raise BackendError(f"runpod: {subject}: not configured (set POOL_RUNPOD_API_KEY or RUNPOD_API_KEY)")
        body = create_body(spec, name_prefix=self._prefix, worker_port=self._worker_port)
        try:
            created = await self._runpod.create_pod_from_body(body, what=f"pool machine {spec.machine_id}")
        except asyncio.CancelledError:
            # a boot abandoned mid-create (the caller's timeout) must not leave a pod billing unseen
            await asyncio.shield(self._sweep(body["name"]))
            raise
        secrets = (self._key, spec.worker_token)
        if created.http_status == 0 or created.http_status >= 500:
            # no answer, or a gateway error, can follow a create RunPod committed: find the pod and end it
            swept = await self._sweep(body["name"])
            what = "create" if created.http_status == 0 else f"create HTTP {created.http_status}"
            said = created.detail or "RunPod did not answer"
            raise provider_error("runpod", subject, what, f"{said}; {swept}", secrets=secrets)
        if not 200 <= created.http_status < 300:
            raise provider_error(
                "runpod", subject, f"create HTTP {created.http_status}", created.detail or "", secrets=secrets
            )
        if created.pod_id is None:
            # a 2xx is a create RunPod committed: the pod bills whether or not its id came back, so find it by name
            swept = await self._sweep(body["name"])
            raise provider_error("runpod", subject, "create", f"the answer carried no pod id; {swept}", secrets=secrets)
        return MachineHandle(
            provider_id=created.pod_id,
            endpoint=self._runpod.proxy_url(created.pod_id, self._worker_port),
            region=created.datacenter_id,
        )

    async def _sweep(self, name: str) -> str:
        """Terminate any pod the failed create left under `name`; what happened, for the error."""
        pod_ids = await self._runpod.pods_named(name)
        if pod_ids is None:
            return f"could not list pods: look for one named {name}"
        left = [pod_id for pod_id in pod_ids if not await self._terminated(pod_id)]
        if left:
            return f"pod {', '.join(left)} named {name} could not be terminated"
        return f"terminated pod {', '.join(pod_ids)} it had created" if pod_ids else "no pod was created"

    async def _terminated(self, pod_id: str) -> bool:
        answer = await self._runpod.terminate(pod_id)
        return answer.ok or answer.not_found

    async def stop(self, provider_id: str) -> None:
        answer = await self._runpod.terminate(provider_id)
        if answer.ok or answer.not_found:
            return
        what = "terminate" if answer.http_status == 0 else f"terminate HTTP {answer.http_status}"
        raise provider_error(
            "runpod",
            f"pod {provider_id}",
            what,
            answer.detail or ("no answer" if answer.http_status == 0 else ""),
            secrets=(self._key,),
        )

    async def health(self, handle: MachineHandle) -> bool:
        return await self._worker.health(handle.endpoint)

    async def list_machines(self) -> tuple[ListedMachine, ...] | None:
        """The account's live pods named with this pool's prefix (the orphan sweep's listing)."""
        pods = await self._runpod.pods_listed()
        if pods is None:
            return None
        return tuple(
            ListedMachine(provider_id=pod.id, name=pod.name) for pod in pods if pod.name.startswith(f"{self._prefix}-")
        )


def _conforms(backend: RunPodBackend) -> Backend:
    """RunPodBackend satisfies the Backend protocol (checked by mypy here)."""
    return backend


def _lists(backend: RunPodBackend) -> ListsMachines:
    return backend
