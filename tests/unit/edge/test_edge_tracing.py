"""The edge's own spans: off unless EDGE_OTLP_ENDPOINT names a collector; on, the connection manager carries
Envoy's OpenTelemetry tracer exporting to a collector cluster over HTTP/2 (OTLP/gRPC)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from thermostat.chassis.registry import SERVICES
from tools.envoy_config import (
    COLLECTOR_CLUSTER,
    EdgeSpec,
    EdgeTracing,
    build_envoy_config,
    edge_tracing_from_env,
    upstreams,
)

ROOT = Path(__file__).resolve().parents[3]


def _config(tracing: EdgeTracing | None) -> dict[str, Any]:
    ports = {s.name: 5000 + i for i, s in enumerate(SERVICES)}
    spec = EdgeSpec(
        upstreams=upstreams(SERVICES, ports=ports, host="127.0.0.1"),
        descriptor_set=ROOT / "build" / "thermostat.pb",
        tracing=tracing,
    )
    return build_envoy_config(spec)


def _hcm(config: dict[str, Any]) -> dict[str, Any]:
    return config["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]


def _clusters(config: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in config["static_resources"]["clusters"]}


def test_by_default_the_edge_opens_no_span_and_has_no_collector() -> None:
    config = _config(None)
    assert "tracing" not in _hcm(config)
    assert COLLECTOR_CLUSTER not in _clusters(config)
    assert not any(k.startswith("tracing.") for k in config["layered_runtime"]["layers"][0]["static_layer"])


def test_with_a_collector_the_edge_exports_its_spans_over_otlp_grpc() -> None:
    config = _config(EdgeTracing(collector_host="otel-collector", collector_port=4317, flush_interval_ms=250))
    provider = _hcm(config)["tracing"]["provider"]
    assert provider["name"] == "envoy.tracers.opentelemetry"
    assert provider["typed_config"]["grpc_service"]["envoy_grpc"]["cluster_name"] == COLLECTOR_CLUSTER
    assert provider["typed_config"]["service_name"] == "thermostat-edge"
    collector = _clusters(config)[COLLECTOR_CLUSTER]
    assert collector["type"] == "STRICT_DNS"  # a name, resolved by DNS
    [endpoint] = collector["load_assignment"]["endpoints"][0]["lb_endpoints"]
    assert endpoint["endpoint"]["address"]["socket_address"] == {"address": "otel-collector", "port_value": 4317}
    options = collector["typed_extension_protocol_options"]["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]
    assert options["explicit_http_config"] == {"http2_protocol_options": {}}  # gRPC needs HTTP/2
    assert config["layered_runtime"]["layers"][0]["static_layer"]["tracing.opentelemetry.flush_interval_ms"] == 250


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param(None, None, id="unset-is-off"),
        pytest.param("  ", None, id="blank-is-off"),
        pytest.param("otel-collector:4317", ("otel-collector", 4317), id="host-and-port"),
        pytest.param("http://10.0.0.7:4317", ("10.0.0.7", 4317), id="a-url-prefix-is-tolerated"),
        pytest.param("[::1]:4317", ("::1", 4317), id="an-ipv6-literal"),
    ],
)
def test_edge_otlp_endpoint_names_the_collector(value: str | None, expected: tuple[str, int] | None) -> None:
    tracing = edge_tracing_from_env({} if value is None else {"EDGE_OTLP_ENDPOINT": value})
    assert (None if tracing is None else (tracing.collector_host, tracing.collector_port)) == expected


@pytest.mark.parametrize(
    "value", ["otel-collector", "otel-collector:http", ":4317", "collector:70000", "collector:4³17", "c:" + "9" * 5000]
)
def test_a_malformed_edge_otlp_endpoint_is_refused_naming_the_variable(value: str) -> None:
    with pytest.raises(ValueError, match="EDGE_OTLP_ENDPOINT"):
        edge_tracing_from_env({"EDGE_OTLP_ENDPOINT": value})
