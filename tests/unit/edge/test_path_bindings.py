"""The edge reads every path-bound field of every annotated route, in each spelling the transcoder accepts."""

from __future__ import annotations

import re

import pytest
from google.api import annotations_pb2
from google.protobuf import descriptor_pb2

from tools.path_bindings import json_name, path_bindings, template_regex


@pytest.mark.parametrize(
    ("template", "matches", "misses"),
    [
        pytest.param("/api/pods/{name}/start", "/api/pods/qwen/start", "/api/pods/a/b/start", id="one-segment"),
        pytest.param("/v1/{name=jobs/*}:cancel", "/v1/jobs/j1:cancel", "/v1/jobs/j1", id="pattern-and-custom-verb"),
        pytest.param("/v1/{path=**}", "/v1/a/b/c", "/v2/a", id="double-wildcard"),
        pytest.param("/v1/*/x", "/v1/any/x", "/v1/x", id="wildcard-literal"),
    ],
)
def test_a_template_matches_the_paths_the_transcoder_routes_to_it(template: str, matches: str, misses: str) -> None:
    regex = re.compile(template_regex(template))
    assert regex.fullmatch(matches)
    assert not regex.fullmatch(misses)


def test_the_json_name_is_protocs_lower_camel_case() -> None:
    assert [json_name(n) for n in ("name", "pod_id", "a_b_c")] == ["name", "podId", "aBC"]


def _descriptor_set() -> bytes:
    file = descriptor_pb2.FileDescriptorProto(name="t.proto", package="t.v1")
    inner = file.message_type.add(name="Inner")
    inner.field.add(name="job_id", number=1, type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING)
    request = file.message_type.add(name="Req")
    request.field.add(name="pod_id", number=1, type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING)
    request.field.add(
        name="inner_msg",
        number=2,
        type=descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE,
        type_name=".t.v1.Inner",
        json_name="innerMsg",
    )
    service = file.service.add(name="Svc")
    method = service.method.add(name="Get", input_type=".t.v1.Req", output_type=".t.v1.Req")
    rule = method.options.Extensions[annotations_pb2.http]
    rule.get = "/v1/pods/{pod_id}"
    rule.additional_bindings.add(post="/v1/x/{inner_msg.job_id}:run", body="*")
    service.method.add(name="Open", input_type=".t.v1.Req", output_type=".t.v1.Req")
    return descriptor_pb2.FileDescriptorSet(file=[file]).SerializeToString()


def test_every_binding_of_a_method_is_read_with_each_spelling_of_each_bound_field() -> None:
    """Additional bindings count; a nested field is spelled per segment; an unannotated method has no route."""
    bindings = path_bindings(_descriptor_set(), ["t.v1.Svc"])
    assert [(b.verb, b.template, b.bound) for b in bindings] == [
        ("GET", "/v1/pods/{pod_id}", ("podId", "pod_id")),
        (
            "POST",
            "/v1/x/{inner_msg.job_id}:run",
            ("innerMsg.jobId", "innerMsg.job_id", "inner_msg.jobId", "inner_msg.job_id"),
        ),
    ]
    assert path_bindings(_descriptor_set(), ["t.v1.Other"]) == ()
