"""When the standard OTEL_* variables ask a service to export its spans over OTLP."""

from __future__ import annotations

import logging

import pytest

from thermostat.chassis import tracing
from thermostat.chassis.tracing import export_asked

ENDPOINT = "http://collector:4318"


@pytest.mark.parametrize(
    ("environ", "asked"),
    [
        pytest.param({}, False, id="no-endpoint-no-export"),
        pytest.param({"OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT}, True, id="an-endpoint-exports"),
        pytest.param({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"{ENDPOINT}/v1/traces"}, True, id="a-traces-endpoint"),
        pytest.param({"OTEL_EXPORTER_OTLP_ENDPOINT": ""}, False, id="an-empty-endpoint-is-none"),
        pytest.param({"OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT, "OTEL_TRACES_EXPORTER": "otlp"}, True, id="otlp-named"),
        pytest.param(
            {"OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT, "OTEL_TRACES_EXPORTER": "none"}, False, id="exporter-none"
        ),
        pytest.param(
            {"OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT, "OTEL_TRACES_EXPORTER": "zipkin"},
            False,
            id="another-exporter-is-not-ours-to-build",
        ),
        pytest.param({"OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT, "OTEL_SDK_DISABLED": "true"}, False, id="sdk-disabled"),
    ],
)
def test_export_is_asked_for_by_an_otlp_endpoint_unless_turned_off(environ: dict[str, str], asked: bool) -> None:
    assert export_asked(environ) is asked


def test_an_endpoint_without_the_tracing_extra_exports_nothing_and_says_why(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Without OpenTelemetry's API or instrumentation importable, an asked-for export is a warning, not a crash."""
    monkeypatch.setattr(tracing, "otel", None)
    with caplog.at_level(logging.WARNING, logger="thermostat.chassis.tracing"):
        assert tracing.configure_from_environment("pod-controller", {"OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT}) is None
    assert "pip install -r requirements-tracing.txt" in caplog.text
