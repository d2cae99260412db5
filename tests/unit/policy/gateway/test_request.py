"""An OpenAI request as the gateway reads it (policy/gateway/request.py): a 400 names the field."""

from __future__ import annotations

import json

import pytest

from thermostat.policy.gateway.openai_errors import GatewayError, Refusal
from thermostat.policy.gateway.request import InferenceRequest, parse_request, upstream_body


def test_a_request_names_its_pod_and_whether_it_streams() -> None:
    parsed = parse_request(b'{"model": " qwen ", "stream": true, "messages": []}')
    assert isinstance(parsed, InferenceRequest)
    assert (parsed.model, parsed.stream) == ("qwen", True)


@pytest.mark.parametrize(
    ("raw", "param"),
    [
        pytest.param(b"", None, id="no body"),
        pytest.param(b"{not json", None, id="not json"),
        pytest.param(b"[1]", None, id="not an object"),
        pytest.param(b'{"messages": []}', "model", id="no model"),
        pytest.param(b'{"model": 7}', "model", id="a model that is not a string"),
        pytest.param(b'{"model": "qwen", "stream": "yes"}', "stream", id="stream not a boolean"),
    ],
)
def test_a_bad_request_is_400_naming_the_field(raw: bytes, param: str | None) -> None:
    parsed = parse_request(raw)
    assert isinstance(parsed, GatewayError)
    assert (parsed.refusal, parsed.status, parsed.param) == (Refusal.BAD_REQUEST, 400, param)
    if param:
        assert parsed.message.startswith(f"{param}:")


def test_the_engine_gets_the_served_model_and_every_other_field_as_sent() -> None:
    parsed = parse_request(b'{"model": "qwen", "temperature": 0, "messages": [{"role": "user", "content": "hi"}]}')
    assert isinstance(parsed, InferenceRequest)
    assert json.loads(upstream_body(parsed, "Qwen/Qwen2.5-7B")) == {
        "model": "Qwen/Qwen2.5-7B",
        "temperature": 0,
        "messages": [{"role": "user", "content": "hi"}],
    }


def test_a_refusal_streams_as_one_sse_error_event() -> None:
    error = GatewayError(refusal=Refusal.WAKE_FAILED, message="qwen could not be woken: no GPU under 1.00 USD/h")
    event = error.sse_event()
    assert event.startswith(b"data: ") and event.endswith(b"\n\n")
    assert json.loads(event[6:])["error"]["code"] == "wake_failed"
