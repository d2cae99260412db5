"""Which query parameters would override a field the REST path binds, read from the descriptor set.

The JSON transcoder applies query parameters after the path's bindings, so `POST /api/pods/qwen/start?name=llama`
acts on llama: a proxy in front that authorizes by path is bypassed. The edge refuses such a request before
the transcoder sees it (envoy_config.py): for every google.api.http annotation (additional bindings included)
of the routed services, each field its path template binds, in each spelling the transcoder accepts for a
query parameter (the proto name `pod_id` and the JSON name `podId`, per segment of a nested path `a.b`).

Pure: bytes of a FileDescriptorSet in, frozen values out.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from google.api import annotations_pb2, http_pb2
from google.protobuf import descriptor_pb2

_VARIABLE = re.compile(r"\{([^}=]+)(?:=([^}]*))?\}")


@dataclass(frozen=True, slots=True, kw_only=True)
class PathBinding:
    """One annotated route: its path template, the regex of the paths it matches, the spellings it binds."""

    method: str  # full gRPC method name, for messages
    verb: str
    template: str
    path_regex: str  # matches the path alone (no query), unanchored at neither end: callers anchor it
    bound: tuple[str, ...]  # every query parameter name that would set a path-bound field


def json_name(field: str) -> str:
    """protoc's default JSON name: lowerCamelCase of the proto name (`pod_id` → `podId`)."""
    parts = field.split("_")
    return parts[0] + "".join(p[:1].upper() + p[1:] for p in parts[1:])


def _segments_regex(text: str) -> str:
    """Literal template text (`/api/pods/`, `*`, `jobs/**`) as a regex: `*` one segment, `**` any number."""

    def one(segment: str) -> str:
        return "[^?#]*" if segment == "**" else "[^/?#]+" if segment == "*" else re.escape(segment)

    return "/".join(one(segment) for segment in text.split("/"))


def template_regex(template: str) -> str:
    """The paths a google.api.http template matches (`/api/pods/{name}/start`, `/v1/{name=jobs/*}:cancel`)."""
    verb = ""
    depth = 0
    for at, char in enumerate(template):  # the custom verb follows the last ':' outside a variable's braces
        depth += {"{": 1, "}": -1}.get(char, 0)
        if char == ":" and depth == 0:
            template, verb = template[:at], template[at:]
            break
    out: list[str] = []
    position = 0
    for match in _VARIABLE.finditer(template):
        out.append(_segments_regex(template[position : match.start()]))
        out.append(_segments_regex(match.group(2) or "*"))
        position = match.end()
    out.append(_segments_regex(template[position:]))
    return "".join(out) + re.escape(verb)


def _http_rules(rule: http_pb2.HttpRule) -> Iterator[http_pb2.HttpRule]:
    yield rule
    yield from rule.additional_bindings


def _verb_and_template(rule: http_pb2.HttpRule) -> tuple[str, str] | None:
    kind = rule.WhichOneof("pattern")
    if kind is None:
        return None
    if kind == "custom":
        return rule.custom.kind.upper(), rule.custom.path
    return kind.upper(), getattr(rule, kind)


def _spellings(field_path: str, request: str, messages: dict[str, descriptor_pb2.DescriptorProto]) -> set[str]:
    """Every dotted name the transcoder resolves to `field_path` of `request`: each segment's proto or JSON name."""
    options: list[set[str]] = []
    message: descriptor_pb2.DescriptorProto | None = messages.get(request)
    for segment in field_path.split("."):
        names = {segment, json_name(segment)}
        field = next((f for f in message.field if f.name == segment), None) if message else None
        if field is not None:
            if field.json_name:
                names.add(field.json_name)
            message = messages.get(field.type_name.lstrip("."))
        else:
            message = None
        options.append(names)
    return {".".join(combo) for combo in itertools.product(*options)}


def path_bindings(descriptor_set: bytes, services: Iterable[str]) -> tuple[PathBinding, ...]:
    """Every annotated route of `services` in the serialized FileDescriptorSet, in file order."""
    files = descriptor_pb2.FileDescriptorSet.FromString(descriptor_set).file
    messages: dict[str, descriptor_pb2.DescriptorProto] = {}

    def collect(prefix: str, types: Iterable[descriptor_pb2.DescriptorProto]) -> None:
        for message in types:
            name = f"{prefix}.{message.name}" if prefix else message.name
            messages[name] = message
            collect(name, message.nested_type)

    for file in files:
        collect(file.package, file.message_type)
    wanted = set(services)
    bindings: list[PathBinding] = []
    for file in files:
        for service in file.service:
            full = f"{file.package}.{service.name}" if file.package else service.name
            if full not in wanted:
                continue
            for method in service.method:
                if not method.options.HasExtension(annotations_pb2.http):
                    continue
                for rule in _http_rules(method.options.Extensions[annotations_pb2.http]):
                    found = _verb_and_template(rule)
                    if found is None:
                        continue
                    verb, template = found
                    bound: set[str] = set()
                    for match in _VARIABLE.finditer(template):
                        bound |= _spellings(match.group(1).strip(), method.input_type.lstrip("."), messages)
                    bindings.append(
                        PathBinding(
                            method=f"{full}/{method.name}",
                            verb=verb,
                            template=template,
                            path_regex=template_regex(template),
                            bound=tuple(sorted(bound)),
                        )
                    )
    return tuple(bindings)
