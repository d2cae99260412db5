"""What the fuzzing scenario sends: hypothesis strategies for REST requests on an annotated route and for protobuf
messages of any public RPC, and a runner that drives a hypothesis search from a worker thread against the
event loop the stack lives on."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from google.protobuf import descriptor, message, message_factory
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from tests.e2e.test_path_bound_queries import Route

# ids and build ids as an attacker writes them: traversal, NUL, encoded separators, unicode, very long
HOSTILE_SEGMENTS = (
    "qwen",
    "QWEN",
    "llama",
    "..",
    "%2e%2e",
    "..%2f..%2fetc%2fpasswd",
    "%2F",
    "%00",
    "%0d%0aX-Injected:%201",
    "%E2%80%AE",
    "a" * 600,
    "%F0%9F%94%A5",
    "%ff%fe",
)
# a header value as HTTP/1.1 carries it: visible ASCII, inner spaces only
SAFE_HEADER_TEXT = st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=80).map(str.strip)
HEADER_NAME = st.from_regex(r"\A[a-z][a-z0-9-]{0,20}\Z").filter(lambda n: not n.startswith("grpc-") and n != "host")
QUERY_KEY = st.from_regex(r"\A[a-z_][a-z0-9_.]{0,15}\Z")
FUZZ_TEXT = st.one_of(st.text(max_size=60), st.sampled_from(["../../etc/passwd", "..", "\x00", "名前", "\u202e", ""]))
JSON_VALUE = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(2**70), max_value=2**70),
        st.floats(allow_nan=False, allow_infinity=False),
        FUZZ_TEXT,
    ),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=10), inner, max_size=3)),
    max_leaves=6,
)


@dataclass(frozen=True, slots=True)
class RestCase:
    """One request on a route: the path with fuzzed bound segments, query, headers and body."""

    method: str
    path: str
    params: tuple[tuple[str, str], ...]
    headers: dict[str, str]
    content: bytes | None
    json_keys: tuple[str, ...] = ()


def segment() -> st.SearchStrategy[str]:
    return st.one_of(
        st.sampled_from(HOSTILE_SEGMENTS),
        st.text(min_size=1, max_size=40).map(lambda s: quote(s, safe="")),
    )


def _fill(route: Route, values: list[str]) -> str:
    path = route.path.replace("seg-a/seg-b", "path-value")
    for value in values:
        path = path.replace("path-value", value, 1)
    return path


def batch_body(field_names: tuple[str, ...]) -> st.SearchStrategy[tuple[str, Any]]:
    """A batch of jobs (POST /v1/jobs/batch) near enough to valid that some run: each job's keys from the route's
    field names, values either random or the kind the field takes."""
    plausible = st.one_of(
        st.sampled_from(["local", "nope", "aGk=", "aGl=", "", "\x00"]),
        st.integers(min_value=-(2**64), max_value=2**64),
        st.floats(min_value=0.001, max_value=2.0),
    )
    job = st.dictionaries(
        st.sampled_from([n for n in field_names if n != "jobs"]), st.one_of(plausible, JSON_VALUE), max_size=6
    )
    return st.lists(job, max_size=4).map(lambda jobs: ("json", {"jobs": jobs}))


def rest_cases(route: Route, auth: list[dict[str, str]], field_names: tuple[str, ...]) -> st.SearchStrategy[RestCase]:
    """Requests on `route`: its bound segments fuzzed (sometimes a junk suffix), the request message's own field
    names and random ones as query keys, one of the callers' credentials (or none, or garbage), random headers,
    and for a body route JSON naming the message's fields, random JSON, unicode, binary or a multi-megabyte body."""
    holes = route.path.count("path-value") + route.path.count("seg-a/seg-b")
    has_body = route.verb in {"POST", "PUT", "PATCH"}
    json_body = st.dictionaries(
        st.one_of(st.sampled_from(field_names or ("x",)), st.text(max_size=12)), JSON_VALUE, max_size=4
    )
    body = st.one_of(
        st.none(),
        json_body.map(lambda d: ("json", d)),
        *([batch_body(field_names)] if "jobs" in field_names else []),
        JSON_VALUE.map(lambda v: ("json", v)),
        st.text(max_size=200).map(lambda t: ("text", t)),
        st.binary(max_size=2048).map(lambda b: ("bytes", b)),
        st.sampled_from([64 * 1024, 3 * 1024 * 1024]).map(lambda n: ("bytes", (bytes(range(256)) * (n // 256)))),
    )

    @st.composite
    def build(draw: st.DrawFn) -> RestCase:
        values = [draw(segment()) for _ in range(holes)]
        path = _fill(route, values)
        if draw(st.integers(0, 9)) == 0:
            path += "/" + draw(segment())
        params = tuple(
            draw(
                st.lists(st.tuples(st.one_of(st.sampled_from(field_names or ("x",)), QUERY_KEY), FUZZ_TEXT), max_size=3)
            )
        )
        headers = dict(draw(st.sampled_from([{}, *auth, {"Authorization": "Bearer not-a-token"}])))
        headers.update(draw(st.dictionaries(HEADER_NAME, SAFE_HEADER_TEXT, max_size=3)))
        content: bytes | None = None
        keys: tuple[str, ...] = ()
        if has_body:
            chosen = draw(body)
            if chosen is not None:
                kind, value = chosen
                if kind == "json":
                    content = json.dumps(value).encode()
                    keys = tuple(value) if isinstance(value, dict) else ()
                    headers.setdefault("content-type", "application/json")
                elif kind == "text":
                    content = value.encode()
                else:
                    content = value
        return RestCase(route.verb, path, params, headers, content, keys)

    return build()


# --- protobuf messages ------------------------------------------------------------------------------------------

_INT_RANGES = {
    descriptor.FieldDescriptor.TYPE_INT32: (-(2**31), 2**31 - 1),
    descriptor.FieldDescriptor.TYPE_SINT32: (-(2**31), 2**31 - 1),
    descriptor.FieldDescriptor.TYPE_SFIXED32: (-(2**31), 2**31 - 1),
    descriptor.FieldDescriptor.TYPE_UINT32: (0, 2**32 - 1),
    descriptor.FieldDescriptor.TYPE_FIXED32: (0, 2**32 - 1),
    descriptor.FieldDescriptor.TYPE_INT64: (-(2**63), 2**63 - 1),
    descriptor.FieldDescriptor.TYPE_SINT64: (-(2**63), 2**63 - 1),
    descriptor.FieldDescriptor.TYPE_SFIXED64: (-(2**63), 2**63 - 1),
    descriptor.FieldDescriptor.TYPE_UINT64: (0, 2**64 - 1),
    descriptor.FieldDescriptor.TYPE_FIXED64: (0, 2**64 - 1),
}


def _scalar(fd: descriptor.FieldDescriptor, depth: int) -> st.SearchStrategy[Any] | None:
    kind = fd.type
    if kind == descriptor.FieldDescriptor.TYPE_STRING:
        return st.one_of(FUZZ_TEXT, st.sampled_from(["qwen", "local", "acme"]), st.just("x" * 70_000))
    if kind == descriptor.FieldDescriptor.TYPE_BYTES:
        return st.one_of(st.binary(max_size=4096), st.just(b"\x00" * 1_000_000))
    if kind == descriptor.FieldDescriptor.TYPE_BOOL:
        return st.booleans()
    if kind in _INT_RANGES:
        low, high = _INT_RANGES[kind]
        return st.integers(min_value=low, max_value=high)
    if kind == descriptor.FieldDescriptor.TYPE_DOUBLE:
        return st.floats()
    if kind == descriptor.FieldDescriptor.TYPE_FLOAT:
        return st.floats(width=32)
    if kind == descriptor.FieldDescriptor.TYPE_ENUM:
        return st.integers(min_value=-1, max_value=8)
    if fd.message_type is not None:
        if depth >= 2 or fd.message_type.GetOptions().map_entry:
            return None
        return messages(fd.message_type, depth + 1)
    return None


def messages(desc: descriptor.Descriptor, depth: int = 0) -> st.SearchStrategy[message.Message]:
    """Messages of type `desc` with any subset of their fields set to hostile values (two levels deep)."""
    cls = message_factory.GetMessageClass(desc)
    optional: dict[str, st.SearchStrategy[Any]] = {}
    for fd in desc.fields:
        value = _scalar(fd, depth)
        if value is None:
            continue
        optional[fd.name] = st.lists(value, max_size=3) if fd.is_repeated else value

    def build(values: dict[str, Any]) -> message.Message:
        built = cls()
        for name, value in values.items():
            fd = desc.fields_by_name[name]
            target = getattr(built, name) if fd.is_repeated or fd.message_type else None
            if fd.is_repeated:
                assert target is not None
                if fd.message_type:
                    for item in value:
                        target.add().CopyFrom(item)
                else:
                    target.extend(value)
            elif fd.message_type:
                assert target is not None
                target.CopyFrom(value)
            else:
                setattr(built, name, value)
        return built

    return st.fixed_dictionaries({}, optional=optional).map(build)


# --- running a search -------------------------------------------------------------------------------------------


async def search(
    strategy: st.SearchStrategy[Any], check: Callable[[Any], Coroutine[Any, Any, None]], examples: int
) -> None:
    """Run `examples` hypothesis examples of `strategy` through `check` on this event loop; a failing check is
    shrunk and re-raised as hypothesis reports it."""
    loop = asyncio.get_running_loop()

    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        derandomize=True,
        phases=(Phase.explicit, Phase.generate, Phase.shrink),
        suppress_health_check=list(HealthCheck),
    )
    @given(strategy)
    def one(example: Any) -> None:
        asyncio.run_coroutine_threadsafe(check(example), loop).result(timeout=120)

    await asyncio.to_thread(one)
