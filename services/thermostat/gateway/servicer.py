"""InferenceGateway.ListModels: the models of GET /openai/v1/models for a gRPC client or a probe; it wakes nothing."""

from __future__ import annotations

from collections.abc import Sequence

import grpc

from thermostat.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from thermostat.policy.common.pod_options import PodOptions
from thermostat.policy.gateway.hold import ModelState, model_state

from .views import PodViews

_STATES = {
    ModelState.DOWN: gateway_pb2.MODEL_STATE_DOWN,
    ModelState.BOOTING: gateway_pb2.MODEL_STATE_BOOTING,
    ModelState.READY: gateway_pb2.MODEL_STATE_READY,
}


class InferenceGatewayServicer(gateway_pb2_grpc.InferenceGatewayServicer):  # type: ignore[misc]
    def __init__(self, pods: Sequence[PodOptions], views: PodViews) -> None:
        self.pods = pods
        self.views = views

    async def ListModels(
        self, request: gateway_pb2.ListModelsRequest, context: grpc.aio.ServicerContext
    ) -> gateway_pb2.ListModelsResponse:
        response = gateway_pb2.ListModelsResponse()
        for pod in self.pods:
            snapshot = self.views.snapshot(pod.name)
            state = model_state(snapshot)
            model = gateway_pb2.Model(id=pod.name, state=_STATES[state], served_model=pod.served_model)
            if state is ModelState.BOOTING and snapshot.eta_seconds is not None:
                model.eta_seconds = round(snapshot.eta_seconds, 1)
            response.models.append(model)
        return response
