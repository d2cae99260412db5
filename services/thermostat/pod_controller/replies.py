"""The start route's answer, shared by StartPod (the pod-control seed's REST route) and WakePod (the gateway's wake on
request), and the response metadata through which the servicers tell the edge what gRPC cannot say."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import grpc

from thermostat.pods.v1 import pods_pb2
from thermostat.policy.common.pod_options import PodOptions
from thermostat.policy.wake.wake_result import WakeFailureKind, WakeOutcome

from .wake_gate import WakeGateUnavailable

if TYPE_CHECKING:
    from .servicer import PodControl


async def set_status(
    context: grpc.aio.ServicerContext, code: int | None = None, title: str | None = None, nulls: Sequence[str] = ()
) -> None:
    """Tell the edge what gRPC cannot: an HTTP status, a problem title, the fields the pod-control seed prints as
    null."""
    metadata = []
    if code is not None:
        metadata.append(("x-http-code", str(code)))
    if title:
        metadata.append(("x-problem-title", title))
    if nulls:
        metadata.append(("x-json-nulls", ",".join(nulls)))
    if metadata:
        await context.send_initial_metadata(tuple(metadata))


def absent(message: Any, fields: Sequence[tuple[str, str]]) -> list[str]:
    """The JSON names of `fields` (proto name, JSON name) that the message leaves unset.

    A field with presence is unset when HasField says so; a plain proto3 string is unset when empty — then it
    is not on the wire at all, and making it `optional` would change the field's cardinality, which the
    FILE breaking rules forbid. The REST view writes either kind as null.
    """
    descriptor = message.DESCRIPTOR.fields_by_name
    return [
        json_name
        for proto_name, json_name in fields
        if not (message.HasField(proto_name) if descriptor[proto_name].has_presence else getattr(message, proto_name))
    ]


# podId / proxyUrl are null in the pod-control seed when no pod is named
NO_POD = (("pod_id", "podId"), ("proxy_url", "proxyUrl"))
WAKE_TRIGGERS = {pods_pb2.WAKE_TRIGGER_REQUEST: "request"}


async def answer_wake(
    control: PodControl, pod: PodOptions, context: grpc.aio.ServicerContext, trigger: str
) -> pods_pb2.StartPodResponse:
    """Run or join the pod's wake and answer as the start route does: a failed wake is ABORTED (409 "Failed"),
    or RESOURCE_EXHAUSTED when its budget refused it (the gateway's 429); unconfigured or ungated, UNAVAILABLE."""
    try:
        result = await control.run_wake(pod, trigger=trigger)  # an unconfigured pod is refused there, and recorded
    except WakeGateUnavailable as error:
        await context.abort(grpc.StatusCode.UNAVAILABLE, f"wake refused: {error}")
    outcome = result.outcome
    if result.failure_kind is WakeFailureKind.UNCONFIGURED:
        await context.abort(grpc.StatusCode.UNAVAILABLE, result.message)
    if outcome is WakeOutcome.FAILED:
        await set_status(context, 409, "Failed")
        over_budget = result.failure_kind is WakeFailureKind.OVER_BUDGET and trigger == "request"
        # the start route's seed answer stays ABORTED (409) for every failure; the gateway tells a budget apart
        code = grpc.StatusCode.RESOURCE_EXHAUSTED if over_budget else grpc.StatusCode.ABORTED
        await context.abort(code, result.message or "wake failed")
    response = pods_pb2.StartPodResponse(
        name=pod.name,
        outcome=str(outcome),
        pod_id=result.pod_id or "",
        proxy_url=result.proxy_url or "",
        message=result.message or "",
    )
    if result.gpu_id:
        response.gpu_id = result.gpu_id
    if result.price_per_hour is not None:
        response.price_per_hour = result.price_per_hour
    await set_status(
        context,
        202 if outcome is WakeOutcome.WAITING else None,
        nulls=absent(response, (*NO_POD, ("gpu_id", "gpuId"), ("price_per_hour", "pricePerHour"))),
    )
    return response
