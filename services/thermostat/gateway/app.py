"""The OpenAI HTTP API at /openai/v1: chat and text completions that wake the pod on request, and the model list.

A request is authenticated (THERMOSTAT_INFERENCE_TOKEN or the operator token, as OpenAI's api_key), parsed for its
model (a pod's name) and then, by policy/gateway/hold.py: forwarded to a ready pod, held while the pod wakes, or
refused in OpenAI's error shape. A held `stream: true` request gets its headers at once and an SSE comment line every
GATEWAY_HOLD_COMMENT_SECONDS; its refusal then comes as an SSE `data: {"error": …}` event. A client that goes away
cancels its handler (aiohttp's handler cancellation), which closes the engine's connection: the engine frees the slot.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import aiohttp
from aiohttp import web

from thermostat.chassis.auth import HttpDenial, TokenRule, http_denial
from thermostat.policy.common.pod_options import PodOptions, find_pod
from thermostat.policy.gateway.hold import (
    Arrival,
    Hold,
    ModelState,
    admit,
    hold_step,
    model_state,
    rewake_due,
    wake_refusal,
)
from thermostat.policy.gateway.openai_errors import GatewayError, Refusal
from thermostat.policy.gateway.request import InferenceRequest, parse_request, upstream_body

from .activity import ActivityReporter
from .engine import Engines, EngineUnreachable, passed_headers, proxy_answered_for_no_pod
from .metrics import GatewayMetrics
from .views import PodViews, WakeAnswer

log = logging.getLogger("thermostat.gateway")

PREFIX = "/openai/v1"
MAX_BODY_BYTES = 32 * 1024 * 1024
ANNOUNCE_AFTER_SECONDS = 0.02
SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


@dataclass(frozen=True, slots=True, kw_only=True)
class HoldLimits:
    max_held: int
    wait_bound_seconds: float
    comment_seconds: float


class Gateway:
    def __init__(
        self,
        pods: Sequence[PodOptions],
        views: PodViews,
        engines: Engines,
        reporter: ActivityReporter,
        *,
        tokens: TokenRule,
        limits: HoldLimits,
        metrics: GatewayMetrics | None = None,
    ) -> None:
        self.metrics = metrics or GatewayMetrics()
        self.pods = pods
        self.views = views
        self.engines = engines
        self.reporter = reporter
        self.tokens = tokens
        self.limits = limits
        self.held: Counter[str] = Counter()
        self.started_at = int(time.time())

    def app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_BODY_BYTES)
        app.router.add_post(f"{PREFIX}/chat/completions", self.chat)
        app.router.add_post(f"{PREFIX}/completions", self.completions)
        app.router.add_get(f"{PREFIX}/models", self.models)
        return app

    # --- routes ------------------------------------------------------------------------------------------------

    async def models(self, request: web.Request) -> web.StreamResponse:
        refused = self._refused(request)
        if refused is not None:
            return error_response(refused)
        return web.json_response({"object": "list", "data": [self.model(pod) for pod in self.pods]})

    def model(self, pod: PodOptions) -> dict[str, object]:
        snapshot = self.views.snapshot(pod.name)
        entry: dict[str, object] = {
            "id": pod.name,
            "object": "model",
            "created": self.started_at,
            "owned_by": "thermostat",
            "state": str(model_state(snapshot)),
        }
        if snapshot.eta_seconds is not None and model_state(snapshot) is ModelState.BOOTING:
            entry["eta_seconds"] = round(snapshot.eta_seconds, 1)
        return entry

    async def chat(self, request: web.Request) -> web.StreamResponse:
        return await self._infer(request, "chat/completions")

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._infer(request, "completions")

    # --- one inference request -----------------------------------------------------------------------------------

    async def _infer(self, request: web.Request, path: str) -> web.StreamResponse:
        refused = self._refused(request)
        if refused is not None:
            return error_response(refused)
        parsed = parse_request(await request.read())
        if isinstance(parsed, GatewayError):
            return error_response(parsed)
        pod = find_pod(self.pods, parsed.model)
        if pod is None:
            known = ", ".join(p.name for p in self.pods)
            return error_response(
                GatewayError(
                    refusal=Refusal.UNKNOWN_MODEL,
                    message=f"model: no pod named {parsed.model!r}; the models are {known}",
                    param="model",
                )
            )
        admission = admit(self.views.snapshot(pod.name), held=self.held[pod.name], max_held=self.limits.max_held)
        if admission.arrival is Arrival.REFUSE:
            assert admission.refusal is not None
            log.warning("pod %s: request refused: %s", pod.name, admission.refusal.message)
            self.metrics.answered(pod.name, admission.refusal.code)
            return error_response(admission.refusal)
        if admission.arrival is Arrival.FORWARD:
            try:
                response = await self._forward(request, pod, parsed, path, None, warm=True)
                self.metrics.answered(pod.name, "forwarded")
                return response
            except EngineUnreachable:
                log.info("pod %s: its proxy answered for no pod (stopped since the last view); waking it", pod.name)
                await self.views.refresh(pod.name)
        return await self._held(request, pod, parsed, path)

    async def _held(
        self, request: web.Request, pod: PodOptions, parsed: InferenceRequest, path: str
    ) -> web.StreamResponse:
        self.held[pod.name] += 1
        self.metrics.held.labels(pod=pod.name).set(self.held[pod.name])
        stream: web.StreamResponse | None = None
        began = time.monotonic()
        try:
            if parsed.stream:
                stream = web.StreamResponse(status=200, headers=SSE_HEADERS)
                await stream.prepare(request)
            refusal = await self._hold(pod, stream)
        finally:
            self.held[pod.name] -= 1
            self.metrics.held.labels(pod=pod.name).set(self.held[pod.name])
        forwarded = "false" if refusal is not None else "true"
        self.metrics.hold_seconds.labels(pod=pod.name, forwarded=forwarded).observe(time.monotonic() - began)
        self.metrics.answered(pod.name, refusal.code if refusal is not None else "woken")
        if refusal is not None:
            log.warning("pod %s: held request refused: %s", pod.name, refusal.message)
            if stream is None:
                return error_response(refusal)
            await stream.write(refusal.sse_event())
            await stream.write_eof()
            return stream
        try:
            return await self._forward(request, pod, parsed, path, stream, warm=False)
        except EngineUnreachable:
            unreachable = GatewayError(
                refusal=Refusal.ENGINE_UNREACHABLE, message=f"{pod.name} was ready but its engine did not answer"
            )
            if stream is None:
                return error_response(unreachable)
            await stream.write(unreachable.sse_event())
            await stream.write_eof()
            return stream

    async def _hold(self, pod: PodOptions, stream: web.StreamResponse | None) -> GatewayError | None:
        """Hold until the pod is ready (None) or the request is refused (the refusal)."""
        limits = self.limits
        began = time.monotonic()
        last_comment = began if stream is None else began - limits.comment_seconds
        wake = asyncio.create_task(self.views.wake(pod.name), name=f"gateway-wake:{pod.name}")
        woken_at = began
        seen_up = False
        version = self.views.version(pod.name)
        try:
            while True:
                snapshot = self.views.snapshot(pod.name)
                if wake.done():
                    answer: WakeAnswer = wake.result()
                    refusal = wake_refusal(pod.name, answer.code, answer.message)
                    if refusal is not None:
                        return refusal
                state = model_state(snapshot)
                seen_up = seen_up or state is ModelState.BOOTING
                since = time.monotonic() - woken_at
                if rewake_due(snapshot, wake_answered=wake.done(), seen_up=seen_up, since_wake_seconds=since):
                    wake, woken_at = asyncio.create_task(self.views.wake(pod.name)), time.monotonic()
                down_after_up = state is ModelState.DOWN and seen_up and wake.done()
                stopped = await self.views.stop_reason(pod.name) if down_after_up else None
                now = time.monotonic()
                step = hold_step(
                    snapshot,
                    waited_seconds=now - began,
                    wait_bound_seconds=limits.wait_bound_seconds,
                    seen_up=seen_up and wake.done(),
                    stopped_by=stopped,
                )
                if step.hold is Hold.FORWARD:
                    return None
                if step.hold is Hold.REFUSE:
                    return step.refusal
                if stream is not None and now - last_comment >= limits.comment_seconds:
                    await stream.write(step.comment.encode() + b"\n\n")
                    last_comment = now
                wait = min(
                    limits.comment_seconds - (now - last_comment) if stream is not None else limits.comment_seconds,
                    limits.wait_bound_seconds - (now - began),
                )
                changed = asyncio.create_task(self.views.changed(pod.name, version, max(0.05, wait)))
                # a wake that already answered is no event to wait for (waiting on it again would spin)
                waiting = {changed} if wake.done() else {changed, wake}
                await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
                if not changed.done():
                    changed.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await changed
                else:
                    version = changed.result()
        finally:
            if not wake.done():
                wake.cancel()  # the wake itself runs on in the controller: only this caller's wait ends

    async def _forward(
        self,
        request: web.Request,
        pod: PodOptions,
        parsed: InferenceRequest,
        path: str,
        stream: web.StreamResponse | None,
        *,
        warm: bool,
    ) -> web.StreamResponse:
        """Send the request up and stream the answer back. EngineUnreachable while nothing of the engine's answer has
        reached the client (the caller wakes the pod, or refuses); after that, a break ends the answer where it is."""
        snapshot = self.views.snapshot(pod.name)
        served = await self.engines.served_model(pod.name, snapshot.proxy_url, pod.served_model)
        url = f"{snapshot.proxy_url.rstrip('/')}/v1/{path}"
        body = upstream_body(parsed, served)
        response: web.StreamResponse | None = None
        self.reporter.started(pod.name)
        # the start is reported a moment later, off the first byte's path (a report is a call on this event loop);
        # a request over by then is reported by its end, whose counts carry the start too
        announce = asyncio.get_running_loop().call_later(ANNOUNCE_AFTER_SECONDS, self.reporter.announce, pod.name)
        try:
            async with self.engines.post(url, body, request.headers.get("Accept", "")) as up:
                content_type = up.headers.get("Content-Type", "")
                if warm and stream is None and proxy_answered_for_no_pod(up.status, content_type):
                    raise EngineUnreachable(f"the proxy answered {up.status} ({content_type or 'no type'})")
                if stream is not None and up.status != 200:
                    await stream.write(engine_error_event(up.status, await up.read()))
                    await stream.write_eof()
                    return stream
                if stream is None:
                    response = web.StreamResponse(status=up.status, headers=passed_headers(up.headers))
                    await response.prepare(request)
                else:
                    response = stream
                async for chunk in up.content.iter_any():
                    await response.write(chunk)
                await response.write_eof()
        except (aiohttp.ClientError, TimeoutError, ConnectionError) as error:
            if response is None:
                raise EngineUnreachable(type(error).__name__) from error
            # the answer had begun: the client went away, or the engine broke off; either way it ends here
            log.info("pod %s: answer ended early (%s)", pod.name, type(error).__name__)
        finally:
            announce.cancel()
            report = self.reporter.finished(pod.name)
        # the end is on the monitor's record before the handler returns (bounded: a slow monitor delays no one long)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(asyncio.shield(report), self.reporter.timeout)
        return response

    def _refused(self, request: web.Request) -> GatewayError | None:
        denial = http_denial(self.tokens, request.headers)
        if denial is HttpDenial.MISSING:
            return GatewayError(
                refusal=Refusal.NO_TOKEN,
                message="no API key: send THERMOSTAT_INFERENCE_TOKEN as the bearer token (OpenAI's api_key)",
            )
        if denial is HttpDenial.WRONG:
            return GatewayError(
                refusal=Refusal.WRONG_TOKEN,
                message="the API key is not valid here: use THERMOSTAT_INFERENCE_TOKEN (or the operator token)",
            )
        return None


def error_response(error: GatewayError) -> web.Response:
    headers = {}
    if error.retry_after_seconds is not None:
        headers["Retry-After"] = str(error.retry_after_seconds)
    return web.json_response(error.body(), status=error.status, headers=headers)


def engine_error_event(status: int, body: bytes) -> bytes:
    """The engine's refusal of a stream whose headers were already sent, as an SSE error event."""
    text = body.decode("utf-8", "replace")[:500].strip()
    error = GatewayError(refusal=Refusal.ENGINE_UNREACHABLE, message=f"the engine answered {status}: {text}")
    return error.sse_event()
