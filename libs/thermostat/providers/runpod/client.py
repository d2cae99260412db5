"""RunPodV2Client: the RunPod REST v2 adapter the pod controller and the idle monitor drive.

Transport and JSON shaping only; every decision is a policy. Each call is pinned to its exact method, path,
query and body by tests against the simulator's request log (the v1 include-flag bug, rig-conductor#2013,
slipped because a test faked the response shape). Errors never escape (caller cancellation does), and the API
key lives only in the Authorization header of API calls: log lines carry method, path and status, never
headers or exception text (an h11 "Illegal header value" error quotes the header).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import re
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Final, Self
from urllib.parse import quote

import httpx

from thermostat.chassis.tracing import http_transport
from thermostat.policy.common.pod_model import (
    CreateResult,
    GpuCatalogEntry,
    ListedPod,
    Lookup,
    PodObservation,
    VolumeLookup,
)
from thermostat.policy.wake.create_walk import CreateOutcome, classify
from thermostat.providers.runpod.shapes import (
    created_pod_datacenter,
    created_pod_id,
    decode_json,
    is_problem_not_found,
    needs_observing_by_id,
    problem_detail,
    read_catalog,
    read_pod,
    read_pod_ids_named,
    read_pods_listed,
    read_pods_on_volume,
    read_retry_after,
    read_volume_pods,
)
from thermostat.providers.vllm.scrape import get_metrics

DEFAULT_BASE_URL: Final = "https://api.runpod.io/v2"
DEFAULT_PROXY_URL_TEMPLATE: Final = "https://{podId}-{port}.proxy.runpod.net"
# Cloudflare fronts the pod proxy and answers 403 to library default user agents (pod-control seed, "Idle auto-stop").
NETWORK_VOLUME_MOUNT_PATH: Final = "/workspace"

_SENDABLE_KEY = re.compile(r"[\x21-\x7e]+")

_log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class ActionResult:
    """ActionResult is one start / stop / terminate call: whether RunPod accepted it, and the HTTP status.

    `http_status` is 0 when no answer was read (unconfigured, transport failure); the billable-action audit
    trail (#2050) records it either way, because a refused call is recorded too.
    """

    ok: bool
    http_status: int
    not_found: bool = False  # RunPod's own problem+json 404: the pod is gone (a bare 404 says nothing)
    detail: str | None = None  # the problem's detail on a refusal
    # what a 2xx answer's Pod body says the pod costs (USD/h) and runs on, when it carries one (start/stop
    # answer 200 + Pod); None otherwise. Metering prices a started pod at this rate.
    cost_per_hour: float | None = None
    gpu_id: str | None = None


def path_segment(value: str) -> str:
    """path_segment escapes an id into exactly one path segment.

    quote(safe="") covers "/", "?", "#" and "%"; dots are escaped too, because HTTP clients collapse a literal
    "." or ".." segment (…/pods/.. would become a list call) before the request leaves the process.
    """
    return quote(value, safe="").replace(".", "%2E")


class RunPodV2Client:
    """RunPodV2Client talks to RunPod REST v2 and to a pod's public vLLM proxy.

    Unconfigured (no API key) it answers every call without a network request: catalogue (), observe and
    lookup UNREADABLE, create status 0, actions not ok, metrics None — the safe boot state before the secret
    is mounted, instead of a 401 warning per tick.
    """

    def __init__(
        self,
        api_key: str | None,
        *,
        base_url: str = DEFAULT_BASE_URL,
        proxy_url_template: str = DEFAULT_PROXY_URL_TEMPLATE,
        timeout_seconds: float = 30.0,
        metrics_timeout_seconds: float = 10.0,
        transport: httpx.AsyncBaseTransport | None = None,
        http_client: httpx.AsyncClient | None = None,
    ) -> None:
        # A mounted secret file often ends in a newline; a key that is blank once stripped is no key.
        key = (api_key or "").strip()
        if key and not _SENDABLE_KEY.fullmatch(key):
            # httpcore's DEBUG trace quotes a header value the transport rejects, key and all; a key that
            # cannot be sent is refused here, before any request is built.
            _log.warning("RUNPOD_API_KEY holds characters a header cannot carry; the client stays unconfigured")
            key = ""
        self._authorization: str | None = f"Bearer {key}" if key else None
        self._base_url = base_url.rstrip("/")
        self._proxy_url_template = proxy_url_template
        self._timeout = httpx.Timeout(timeout_seconds)
        self._metrics_timeout_seconds = metrics_timeout_seconds
        self._owns_client = http_client is None
        self._http = http_client or httpx.AsyncClient(
            transport=http_transport(transport, verify=_tls_context()), follow_redirects=False, verify=_tls_context()
        )

    def __repr__(self) -> str:
        return f"RunPodV2Client(base_url={self._base_url!r}, configured={self.is_configured})"

    @property
    def is_configured(self) -> bool:
        return self._authorization is not None

    def proxy_url(self, pod_id: str, port: int) -> str:
        """proxy_url is the pod's public base URL, e.g. https://{podId}-{port}.proxy.runpod.net."""
        return self._proxy_url_template.replace("{podId}", path_segment(pod_id)).replace("{port}", str(port))

    async def aclose(self) -> None:
        if self._owns_client:
            await self._http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def _api(self, method: str, path: str, *, json_body: object = None) -> httpx.Response | None:
        """_api sends one API request; None when no answer was read. Never raises except on cancellation."""
        if self._authorization is None:
            return None
        try:
            request = self._http.build_request(
                method,
                self._base_url + path,
                headers={"Authorization": self._authorization, "Accept": "application/json"},
                json=json_body,
                timeout=self._timeout,
            )
            # Never follow a redirect: it could carry the bearer to another host.
            response = await self._http.send(request, follow_redirects=False)
        except Exception as error:  # every transport failure is an answer we could not read
            _log.warning("runpod %s %s failed: %s", method, path, type(error).__name__)
            return None
        _log.debug("runpod %s %s -> %d", method, path, response.status_code)
        return response

    async def get_catalog(self) -> tuple[GpuCatalogEntry, ...]:
        """GET /catalog/gpus?include=AVAILABILITY&product=POD; empty on any failure (nothing to bill)."""
        response = await self._api("GET", "/catalog/gpus?include=AVAILABILITY&product=POD")
        if response is None or not response.is_success:
            return ()
        return read_catalog(decode_json(response.content))

    async def observe_pod(self, pod_id: str) -> PodObservation:
        """GET /pods/{id}; NOT_FOUND only for RunPod's problem+json 404, any other failure UNREADABLE."""
        unreadable = PodObservation(lookup=Lookup.UNREADABLE, pod_id=pod_id)
        if not pod_id:
            return unreadable
        response = await self._api("GET", f"/pods/{path_segment(pod_id)}")
        if response is None:
            return unreadable
        if response.is_success:
            return read_pod(pod_id, decode_json(response.content))
        if response.status_code == 404 and is_problem_not_found(response.headers.get("content-type"), response.content):
            return PodObservation(lookup=Lookup.NOT_FOUND, pod_id=pod_id)
        return unreadable

    async def lookup_pods_by_volume(self, volume_id: str) -> VolumeLookup:
        """GET /pods (v2 has no volume filter), matched on mounts.network[].volumeId.

        NOT_FOUND is the only affirmative "no pod on our volume" — the gate before any create — so a failed
        or unreadable list is UNREADABLE, never NOT_FOUND.
        """
        if not volume_id:
            return VolumeLookup(lookup=Lookup.UNREADABLE)
        response = await self._api("GET", "/pods")
        if response is None or not response.is_success:
            return VolumeLookup(lookup=Lookup.UNREADABLE)
        pod_ids = read_pods_on_volume(decode_json(response.content), volume_id)
        if pod_ids is None:
            _log.warning("runpod GET /pods answered a body that is not a pod list")
            return VolumeLookup(lookup=Lookup.UNREADABLE)
        if len(pod_ids) > 1:
            # A stale pod and its replacement coexist after a Waiting wake; every one of them is returned.
            _log.warning("runpod volume %s has %d pods attached: %s", volume_id, len(pod_ids), ", ".join(pod_ids))
        return VolumeLookup(lookup=Lookup.FOUND if pod_ids else Lookup.NOT_FOUND, pod_ids=pod_ids)

    async def observe_volume(self, volume_id: str) -> tuple[VolumeLookup, tuple[PodObservation, ...]]:
        """GET /pods once: the volume lookup and every listed pod read from the same answer.

        A list entry that carries the pod's `runtime` is read as it stands, so reporting (GET, the monitor's
        observe) costs one call instead of 1 + N; a RUNNING entry without a `runtime` key is observed by id
        (GET /pods/{id}), as the pod-control seed does — read from the list, a serving pod would be STARTING. The
        wake keeps observing each pod by id, as the pod-control seed's flow pins.
        """
        if not volume_id:
            return VolumeLookup(lookup=Lookup.UNREADABLE), ()
        response = await self._api("GET", "/pods")
        if response is None or not response.is_success:
            return VolumeLookup(lookup=Lookup.UNREADABLE), ()
        pods = read_volume_pods(decode_json(response.content), volume_id)
        if pods is None:
            _log.warning("runpod GET /pods answered a body that is not a pod list")
            return VolumeLookup(lookup=Lookup.UNREADABLE), ()
        ids = tuple(pod_id for pod_id, _ in pods)
        lookup = VolumeLookup(lookup=Lookup.FOUND if ids else Lookup.NOT_FOUND, pod_ids=ids)

        async def read(pod_id: str, pod: dict[str, object]) -> PodObservation:
            return await self.observe_pod(pod_id) if needs_observing_by_id(pod) else read_pod(pod_id, pod)

        return lookup, tuple(await asyncio.gather(*(read(pod_id, pod) for pod_id, pod in pods)))

    async def create_pod(
        self, *, name: str, template_id: str, datacenter_id: str, gpu_id: str, volume_id: str
    ) -> CreateResult:
        """POST /pods on one GPU type; the status passes through untouched for the create-outcome walk."""
        body = {
            "name": name,
            "templateId": template_id,
            "cloud": "SECURE",
            "dataCenterIds": [datacenter_id],
            "gpu": {"id": gpu_id, "count": 1},
            "mounts": {"network": [{"volumeId": volume_id, "path": NETWORK_VOLUME_MOUNT_PATH}]},
        }
        return await self.create_pod_from_body(body, what=f"gpu {gpu_id}")

    async def create_pod_from_body(self, body: Mapping[str, object], *, what: str = "-") -> CreateResult:
        """POST /pods with a body the caller built (the pool's image pods); `what` names it in the log line."""
        response = await self._api("POST", "/pods", json_body=dict(body))
        if response is None:
            # A create that timed out may still have placed a pod: status 0 is never retried blind.
            return CreateResult(http_status=0)
        retry_after = read_retry_after(response.headers.get("retry-after"))
        if response.is_success:
            pod_id = created_pod_id(response.content)
            if pod_id is None:
                _log.warning("runpod POST /pods -> %d without a pod id", response.status_code)
            return CreateResult(
                http_status=response.status_code,
                pod_id=pod_id,
                retry_after_seconds=retry_after,
                datacenter_id=created_pod_datacenter(response.content),
            )
        detail = problem_detail(response.content)
        # a card that cannot be placed (400, 403) is the create walk's expected answer: it posts the next GPU, and
        # says so itself when none is left; a warning there alarmed at every wake for nothing (issue 35)
        expected = classify(response.status_code) is CreateOutcome.TRY_NEXT_CANDIDATE
        level = logging.INFO if expected else logging.WARNING
        _log.log(level, "runpod POST /pods (%s) -> %d: %s", what, response.status_code, detail or "-")
        return CreateResult(http_status=response.status_code, retry_after_seconds=retry_after, detail=detail)

    async def pods_named(self, name: str) -> tuple[str, ...] | None:
        """GET /pods, the ids of live pods named `name` (the pool's names are unique); None when unreadable."""
        if not name:
            return None
        response = await self._api("GET", "/pods")
        if response is None or not response.is_success:
            return None
        return read_pod_ids_named(decode_json(response.content), name)

    async def pods_listed(self) -> tuple[ListedPod, ...] | None:
        """GET /pods, every live pod of the account; None when unreadable."""
        response = await self._api("GET", "/pods")
        if response is None or not response.is_success:
            return None
        return read_pods_listed(decode_json(response.content))

    async def _action(self, pod_id: str, action: str) -> ActionResult:
        if not pod_id:
            return ActionResult(ok=False, http_status=0)
        response = await self._api("POST", f"/pods/{path_segment(pod_id)}/action", json_body={"action": action})
        return _action_result(response)

    async def start(self, pod_id: str) -> ActionResult:
        """POST /pods/{id}/action {"action":"start"}."""
        return await self._action(pod_id, "start")

    async def stop(self, pod_id: str) -> ActionResult:
        """POST /pods/{id}/action {"action":"stop"}."""
        return await self._action(pod_id, "stop")

    async def terminate(self, pod_id: str) -> ActionResult:
        """DELETE /pods/{id}."""
        if not pod_id:
            return ActionResult(ok=False, http_status=0)
        return _action_result(await self._api("DELETE", f"/pods/{path_segment(pod_id)}"))

    async def fetch_metrics(self, pod_id: str, port: int) -> str | None:
        """GET {proxy}/metrics through the pod's public proxy; None on non-2xx, failure or unconfigured.

        The proxy is not the API: no bearer (the key must never leave for a pod's host), and a browser-like
        User-Agent because Cloudflare 403s library defaults.
        """
        if self._authorization is None or not pod_id:
            return None
        return await get_metrics(self._http, self.proxy_url(pod_id, port), timeout=self._metrics_timeout_seconds)


@functools.cache
def _tls_context() -> ssl.SSLContext:
    # Building a verifying context loads the CA bundle (~30 ms); one per process is enough.
    return httpx.create_ssl_context()


def _action_result(response: httpx.Response | None) -> ActionResult:
    if response is None:
        return ActionResult(ok=False, http_status=0)
    if response.is_success:
        pod = read_pod("", decode_json(response.content)) if response.content else None
        return ActionResult(
            ok=True,
            http_status=response.status_code,
            cost_per_hour=pod.cost_per_hour if pod is not None else None,
            gpu_id=pod.gpu_id if pod is not None else None,
        )
    return ActionResult(
        ok=False,
        http_status=response.status_code,
        not_found=response.status_code == 404
        and is_problem_not_found(response.headers.get("content-type"), response.content),
        detail=problem_detail(response.content),
    )
