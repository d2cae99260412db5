"""FlyBackend: machines as Fly Machines in one app and region, reached on the organization's private network.

Theory of operation (worker-pool seed, "The Fly Machines backend"; notes/provider-apis.md §3):
- start: `POST {base}/apps/{app}/machines` with `{name, region, config}`; the config carries the image, the
  type's env plus the worker token, `restart: {policy: "no"}` and `auto_destroy: false` (the machine's
  lifetime is the pool's, not its process's), and a `guest` block only when the type sets cpus, memory_mb
  or gpu_type: `cpus` rounded up to a whole CPU, `memory_mb` up to Fly's multiple of 256, `gpu_kind` and
  `gpus` (Fly's own gpu_kind string; Fly has announced the end of its GPUs, so expect CPU types).
  `provider_options` overrides anything in the config (dict values such as `guest` merge); an `env`
  override merges too, the worker token always put back, and one that is not an object of strings cannot
  hold the token and is refused before any request is sent.
- Any 2xx with a machine id is a machine the pool owns, whatever the exact status (Fly documents 200; an
  off-spec 201/202 must not orphan the machine it made, issue 35).
- A create that got no answer, a 5xx, or was cancelled in flight may still have made a machine, and a 2xx
  without a machine id did make one: the app's machines are listed and any named as this one is destroyed
  before the start fails, so nothing bills. The id-less 2xx is logged at warning: a machine Fly does not list
  yet escapes that listing, and the orphan sweep finds it by its name (its row is gone with the failed boot).
- The endpoint is `http://{id}.vm.{app}.internal:{port}` (POOL_FLY_ENDPOINT_TEMPLATE overrides it, for the
  simulator); region is the answer's `region`.
- stop destroys by force (`DELETE …/machines/{id}?force=true`); a 404 is already gone.
- health needs Fly to report the machine `started` before the worker's `GET /health` is probed: a stopped
  machine's private address can be reused by another.
- Errors name the machine and carry Fly's `error`, bounded, never the API token or the worker token.
"""

from __future__ import annotations

import asyncio
import logging
import math
from typing import Any, Final
from urllib.parse import quote

import httpx

from thermostat.chassis.tracing import http_transport
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
from thermostat.providers.pool.provider_errors import json_object, machine_subject, provider_error, refusal
from thermostat.providers.pool.worker_client import WorkerClient

DEFAULT_FLY_BASE_URL: Final = "https://api.machines.dev/v1"
DEFAULT_ENDPOINT_TEMPLATE: Final = "http://{id}.vm.{app}.internal:{port}"
DEFAULT_NAME_PREFIX: Final = "thermostat"
FLY_MEMORY_STEP_MB: Final = 256

_log = logging.getLogger(__name__)


def create_body(spec: MachineSpec, *, region: str, name_prefix: str) -> dict[str, Any]:
    """The `POST /apps/{app}/machines` body for one machine (pure); BackendError for an env override that
    cannot hold the worker token."""
    machine_type = spec.machine_type
    subject = machine_subject(spec.machine_id, machine_type.name)
    config: dict[str, Any] = {
        "image": machine_type.image,
        "env": dict(machine_type.env),
        "restart": {"policy": "no"},
        "auto_destroy": False,
    }
    guest: dict[str, Any] = {}
    if machine_type.cpus is not None:
        guest["cpus"] = math.ceil(machine_type.cpus)
    if machine_type.memory_mb is not None:
        guest["memory_mb"] = math.ceil(machine_type.memory_mb / FLY_MEMORY_STEP_MB) * FLY_MEMORY_STEP_MB
    if machine_type.gpu_type is not None:
        guest["gpu_kind"] = machine_type.gpu_type
        guest["gpus"] = machine_type.gpu_count
    if guest:
        config["guest"] = guest
    for key, value in machine_type.provider_options.items():
        if key == "env":
            if not isinstance(value, dict) or not all(isinstance(setting, str) for setting in value.values()):
                raise BackendError(
                    f"fly: {subject}: provider_options.env cannot hold the worker token: it must be "
                    "an object of strings"
                )
            config["env"] = {**config["env"], **value}
        elif isinstance(value, dict) and isinstance(config.get(key), dict):
            config[key] = {**config[key], **value}
        else:
            config[key] = value
    config["env"][WORKER_TOKEN_VARIABLE] = spec.worker_token
    return {"name": f"{name_prefix}-{machine_type.name}-{spec.machine_id}", "region": region, "config": config}


class FlyBackend:
    """FlyBackend starts one Fly Machine per machine in `app`, in `region`."""

    def __init__(
        self,
        worker: WorkerClient,
        *,
        api_token: str,
        app: str,
        region: str,
        base_url: str = DEFAULT_FLY_BASE_URL,
        endpoint_template: str = DEFAULT_ENDPOINT_TEMPLATE,
        worker_port: int = DEFAULT_WORKER_PORT,
        name_prefix: str = DEFAULT_NAME_PREFIX,
        timeout_seconds: float = 30.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._worker = worker
        self._token = api_token.strip()
        self._app = app
        self._region = region
        self._endpoint_template = endpoint_template
        self._worker_port = worker_port
        self._prefix = name_prefix
        self._machines = f"{base_url.rstrip('/')}/apps/{quote(app, safe='')}/machines"
        self._http = httpx.AsyncClient(
            transport=http_transport(transport), timeout=httpx.Timeout(timeout_seconds), follow_redirects=False
        )

    def __repr__(self) -> str:
        return f"FlyBackend(app={self._app!r}, region={self._region!r})"

    async def aclose(self) -> None:
        await self._http.aclose()

    def endpoint(self, machine_id: str) -> str:
        return (
            self._endpoint_template.replace("{id}", machine_id)
            .replace("{app}", self._app)
            .replace("{port}", str(self._worker_port))
        )

    async def start(self, spec: MachineSpec) -> MachineHandle:
        subject = machine_subject(spec.machine_id, spec.machine_type.name)
        secrets = (self._token, spec.worker_token)
        body = create_body(spec, region=self._region, name_prefix=self._prefix)
        try:
            response = await self._call("POST", self._machines, subject, "create", secrets, json=body)
        except BackendError as error:
            raise BackendError(f"{error}; {await self._sweep(body['name'])}") from None
        except asyncio.CancelledError:
            # a boot abandoned mid-create (the caller's timeout) must not leave a machine billing unseen
            await asyncio.shield(self._sweep(body["name"]))
            raise
        if response.status_code >= 500:
            # a gateway error can follow a create Fly committed: find the machine and destroy it
            raise BackendError(f"{_refused(response, subject, 'create', secrets)}; {await self._sweep(body['name'])}")
        if not 200 <= response.status_code < 300:
            raise _refused(response, subject, "create", secrets)
        machine = json_object(response)
        machine_id = machine.get("id")
        if not isinstance(machine_id, str) or not machine_id:
            # a 2xx is a create Fly acted on: the machine exists whether or not its id came back
            swept = await self._sweep(body["name"])
            _log.warning(
                "fly: %s: create HTTP %d answered without a machine id; %s; the orphan sweep looks for %s",
                subject, response.status_code, swept, body["name"],
            )  # fmt: skip
            raise BackendError(
                f"fly: {subject}: create HTTP {response.status_code} answered without a machine id; {swept}"
            )
        region = machine.get("region")
        return MachineHandle(
            provider_id=machine_id,
            endpoint=self.endpoint(machine_id),
            region=region if isinstance(region, str) and region else self._region,
        )

    async def list_machines(self) -> tuple[ListedMachine, ...] | None:
        """The app's machines named with this pool's prefix and not destroyed (the orphan sweep's listing)."""
        machines = await self._listed()
        if machines is None:
            return None
        return tuple(
            ListedMachine(provider_id=machine["id"], name=machine["name"])
            for machine in machines
            if isinstance(machine.get("id"), str)
            and isinstance(machine.get("name"), str)
            and machine["name"].startswith(f"{self._prefix}-")
            and machine.get("state") not in ("destroyed", "destroying")
        )

    async def _listed(self) -> list[dict[str, Any]] | None:
        try:
            listed = await self._http.get(self._machines, headers=self._headers())
            machines = listed.json() if listed.status_code == 200 else None
        except (httpx.HTTPError, ValueError):
            return None
        if not isinstance(machines, list):
            return None
        return [machine for machine in machines if isinstance(machine, dict)]

    async def _sweep(self, name: str) -> str:
        """Destroy any machine a failed create left under `name`; what happened, for the error."""
        machines = await self._listed()
        if machines is None:
            return f"could not list machines: look for one named {name}"
        ids = [
            machine["id"] for machine in machines if machine.get("name") == name and isinstance(machine.get("id"), str)
        ]
        left = []
        for machine_id in ids:
            try:
                await self.stop(machine_id)
            except BackendError:
                left.append(machine_id)
        if left:
            return f"machine {', '.join(left)} named {name} could not be destroyed"
        return f"destroyed machine {', '.join(ids)} it had created" if ids else "no machine was created"

    async def stop(self, provider_id: str) -> None:
        subject = f"machine {provider_id}"
        response = await self._call(
            "DELETE",
            f"{self._machines}/{quote(provider_id, safe='')}",
            subject,
            "destroy",
            (self._token,),
            params={"force": "true"},
        )
        if response.status_code not in (200, 404):
            raise _refused(response, subject, "destroy", (self._token,))

    async def health(self, handle: MachineHandle) -> bool:
        try:
            response = await self._http.get(
                f"{self._machines}/{quote(handle.provider_id, safe='')}", headers=self._headers()
            )
        except httpx.HTTPError:
            return False
        if response.status_code != 200 or json_object(response).get("state") != "started":
            return False
        return await self._worker.health(handle.endpoint)

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self._token}", "Accept": "application/json"}

    async def _call(
        self, method: str, url: str, subject: str, what: str, secrets: tuple[str, ...], **kwargs: Any
    ) -> httpx.Response:
        try:
            response = await self._http.request(method, url, headers=self._headers(), **kwargs)
        except httpx.HTTPError as error:
            # the exception's text could quote the request; only its class leaves this function
            raise provider_error("fly", subject, what, f"no answer ({type(error).__name__})", secrets=secrets) from None
        _log.debug("fly %s %s -> %d", method, url, response.status_code)
        return response


def _refused(response: httpx.Response, subject: str, what: str, secrets: tuple[str, ...]) -> BackendError:
    return refusal("fly", response, subject, what, said_in="error", secrets=secrets)


def _conforms(backend: FlyBackend) -> Backend:
    """FlyBackend satisfies the Backend protocol (checked by mypy here)."""
    return backend


def _lists(backend: FlyBackend) -> ListsMachines:
    return backend
