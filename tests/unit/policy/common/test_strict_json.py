"""A REST body read strictly: one named test per rule, each refusal naming what was wrong."""

from __future__ import annotations

import pytest

from thermostat.policy.common.strict_json import (
    KEY_ECHO_CHARS,
    BodyError,
    BodyField,
    BodyValues,
    JsonKind,
    decode_json,
    is_object,
    lower_camel,
    read_json_object,
    read_pairs,
    unknown_field,
)

BUDGET = (BodyField("daily_usd", JsonKind.NUMBER), BodyField("monthly_usd", JsonKind.NUMBER))
CANCEL = (BodyField("build_id", JsonKind.STRING),)
RANKED = (BodyField("priority", JsonKind.INTEGER), BodyField("daily_usd", JsonKind.NUMBER))


def values(body: bytes, fields: tuple[BodyField, ...] = BUDGET, **bound: str) -> dict[str, float | str]:
    read = read_json_object(body, fields, bound=bound)
    assert isinstance(read, BodyValues), read
    return dict(read.values)


def refusal(body: bytes, fields: tuple[BodyField, ...] = BUDGET, **bound: str) -> str:
    read = read_json_object(body, fields, bound=bound)
    assert isinstance(read, BodyError), read
    return read.detail


@pytest.mark.parametrize(
    ("body", "read"),
    [
        pytest.param(b'{"daily_usd": 5, "monthly_usd": 100.5}', {"daily_usd": 5.0, "monthly_usd": 100.5}, id="proto"),
        pytest.param(b'{"dailyUsd": 5, "monthlyUsd": 100.5}', {"daily_usd": 5.0, "monthly_usd": 100.5}, id="camel"),
        pytest.param(b'{"dailyUsd": 0}', {"daily_usd": 0.0}, id="zero-is-a-ceiling"),
        pytest.param(b"{}", {}, id="empty-object"),
        pytest.param(b' \n{"monthly_usd": 1e2}\n', {"monthly_usd": 100.0}, id="whitespace-and-exponent"),
    ],
)
def test_a_field_is_read_under_its_proto_name_or_its_lower_camel_json_name(body: bytes, read: dict[str, float]) -> None:
    assert values(body) == read


def test_a_field_left_out_is_absent_so_the_caller_can_tell_unset_from_zero() -> None:
    assert "monthly_usd" not in values(b'{"daily_usd": 0}')


def test_a_string_field_is_read_as_a_string() -> None:
    assert values(b'{"buildId": "b-1"}', CANCEL) == {"build_id": "b-1"}


@pytest.mark.parametrize("key", ["daily", "dailyUSD", "Daily_usd", "daily-usd", "budget"])
def test_an_unknown_field_is_refused_naming_it_and_the_known_ones(key: str) -> None:
    assert refusal(f'{{"{key}": 5}}'.encode()) == f"body.{key}: unknown field; known: daily_usd, monthly_usd"


def test_an_unknown_field_beside_known_ones_refuses_the_whole_body() -> None:
    assert refusal(b'{"daily_usd": 5, "monthly": 100}').startswith("body.monthly: unknown field")


def test_an_unknown_key_that_is_not_a_word_is_quoted_in_the_detail() -> None:
    assert refusal(b'{"a b\\"c": 1}') == 'body["a b\\"c"]: unknown field; known: daily_usd, monthly_usd'


def test_an_unknown_key_holding_a_lone_surrogate_is_named_in_ascii() -> None:
    """A JSON escape can decode to a lone surrogate; repeated raw, it would break the status carrying it."""
    detail = refusal(b'{"\\ud800": 1}')
    assert detail == 'body["\\ud800"]: unknown field; known: daily_usd, monthly_usd'
    assert detail.isascii()


def test_a_long_unknown_key_is_cut_in_the_detail() -> None:
    detail = refusal(b'{"' + b"k" * 20_000 + b'": 1}')
    assert detail == f"body.{'k' * KEY_ECHO_CHARS}…: unknown field; known: daily_usd, monthly_usd"


@pytest.mark.parametrize(
    ("body", "wrong"),
    [
        pytest.param(b'{"buildId": "b\\u0000"}', "must not contain a NUL character (U+0000)", id="nul"),
        pytest.param(b'{"buildId": "b\\ud800"}', "is not valid Unicode text (a lone surrogate)", id="lone-surrogate"),
    ],
)
def test_a_string_that_is_not_text_is_refused_naming_the_field(body: bytes, wrong: str) -> None:
    assert refusal(body, CANCEL) == f"body.buildId: {wrong}"


@pytest.mark.parametrize(
    ("body", "named", "kind"),
    [
        pytest.param(b'{"daily_usd": "5"}', "daily_usd", "a string", id="string-for-number"),
        pytest.param(b'{"dailyUsd": true}', "dailyUsd", "a boolean", id="boolean-for-number"),
        pytest.param(b'{"monthly_usd": [5]}', "monthly_usd", "an array", id="array-for-number"),
        pytest.param(b'{"monthly_usd": {"v": 5}}', "monthly_usd", "an object", id="object-for-number"),
    ],
)
def test_a_value_of_the_wrong_type_is_refused_naming_the_field(body: bytes, named: str, kind: str) -> None:
    assert refusal(body) == f"body.{named}: must be a JSON number, not {kind}"


def test_a_number_for_a_string_field_is_refused_naming_the_field() -> None:
    assert refusal(b'{"build_id": 42}', CANCEL) == "body.build_id: must be a JSON string, not a number"


def test_null_is_refused_naming_the_field_so_unset_is_only_ever_a_field_left_out() -> None:
    assert refusal(b'{"dailyUsd": null}').startswith("body.dailyUsd: null is not a value")


def test_a_number_past_a_doubles_range_is_refused_naming_the_field() -> None:
    assert refusal(b'{"daily_usd": 1e999}') == "body.daily_usd: must be a finite number"
    assert refusal(b'{"daily_usd": ' + b"9" * 400 + b"}") == "body.daily_usd: must be a finite number"


@pytest.mark.parametrize("literal", [b"NaN", b"Infinity", b"-Infinity"])
def test_nan_and_infinity_literals_are_not_json(literal: bytes) -> None:
    assert refusal(b'{"daily_usd": ' + literal + b"}").startswith("body: not JSON")


@pytest.mark.parametrize(
    ("body", "kind"),
    [
        pytest.param(b"[1, 2]", "an array", id="array"),
        pytest.param(b'"five"', "a string", id="string"),
        pytest.param(b"7", "a number", id="number"),
        pytest.param(b"null", "null", id="null"),
        pytest.param(b"true", "a boolean", id="boolean"),
    ],
)
def test_a_body_that_is_not_a_json_object_is_refused_naming_the_body(body: bytes, kind: str) -> None:
    assert refusal(body) == f"body: must be a JSON object, not {kind}"


@pytest.mark.parametrize(
    ("body", "start"),
    [
        pytest.param(b"", "body: empty", id="empty"),
        pytest.param(b"  \n", "body: empty", id="blank"),
        pytest.param(b"{", "body: not JSON", id="truncated"),
        pytest.param(b"daily_usd=5", "body: not JSON", id="form-encoded"),
        pytest.param(b'{"daily_usd": 5} {}', "body: not JSON", id="trailing-data"),
        pytest.param(b"\x80", "body: not UTF-8", id="not-utf8"),
        pytest.param(b"[" * 100_000 + b"]" * 100_000, "body: not JSON", id="nested-too-deeply"),
    ],
)
def test_a_body_that_cannot_be_read_is_refused_naming_the_body(body: bytes, start: str) -> None:
    assert refusal(body).startswith(start)


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(b'{"daily_usd": 5, "daily_usd": 6}', id="same-key-twice"),
        pytest.param(b'{"daily_usd": 5, "dailyUsd": 6}', id="both-spellings"),
    ],
)
def test_a_field_given_twice_is_refused_naming_it(body: bytes) -> None:
    assert refusal(body).startswith("body.daily")
    assert "given twice" in refusal(body)


@pytest.mark.parametrize("key", ["name", "tenant_id", "tenantId"])
def test_a_path_bound_field_with_another_value_is_refused_naming_it(key: str) -> None:
    bound = "tenant_id" if key.startswith("tenant") else "name"
    detail = refusal(f'{{"{key}": "other", "daily_usd": 5}}'.encode(), **{bound: "qwen"})
    assert detail == f'body.{key}: conflicts with the path\'s {bound} "qwen"; leave it out of the body'


def test_a_path_bound_field_of_another_type_is_refused_naming_it() -> None:
    assert refusal(b'{"name": 7}', name="7").startswith("body.name: conflicts with the path's name")


def test_a_path_bound_field_repeating_the_paths_value_is_ignored() -> None:
    """As Envoy's own collision check: the same value changes nothing, so only another one is refused."""
    assert values(b'{"name": "qwen", "dailyUsd": 5}', name="qwen") == {"daily_usd": 5.0}


@pytest.mark.parametrize("body_name", ["QWEN", "Qwen", "qwen"])
def test_a_folded_path_bound_field_repeating_the_paths_value_in_another_case_is_ignored(body_name: str) -> None:
    """A pod's name is case-insensitive wherever a route resolves it, so a case-only difference names the same pod."""
    body = f'{{"name": "{body_name}", "dailyUsd": 5}}'.encode()
    assert read_json_object(body, BUDGET, bound={"name": "qwen"}, folded=("name",)) == BodyValues(
        values={"daily_usd": 5.0}
    )


def test_a_folded_path_bound_field_with_another_value_is_still_refused() -> None:
    read = read_json_object(b'{"name": "llama"}', BUDGET, bound={"name": "qwen"}, folded=("name",))
    assert read == BodyError('body.name: conflicts with the path\'s name "qwen"; leave it out of the body')


def test_a_bound_field_not_folded_differs_by_case() -> None:
    """A tenant id is compared as given: only the fields a route folds ignore case."""
    assert refusal(b'{"tenant_id": "ACME"}', tenant_id="acme").startswith("body.tenant_id: conflicts with the path")


def test_a_path_bound_field_is_unknown_where_the_path_binds_nothing() -> None:
    assert refusal(b'{"name": "qwen"}').startswith("body.name: unknown field")


def test_the_first_fault_in_the_bodys_order_is_the_one_named() -> None:
    assert refusal(b'{"daily": 5, "monthly_usd": "x"}').startswith("body.daily:")
    assert refusal(b'{"monthly_usd": "x", "daily": 5}').startswith("body.monthly_usd:")


@pytest.mark.parametrize(("name", "camel"), [("daily_usd", "dailyUsd"), ("build_id", "buildId"), ("name", "name")])
def test_lower_camel_is_protocs_default_json_name(name: str, camel: str) -> None:
    assert lower_camel(name) == camel


# --- INTEGER: a JSON number written without a fraction or exponent, read exactly as an int64 -------------------


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(2**53 + 1, id="past-2**53-where-a-double-rounds"),
        pytest.param(2**63 - 1, id="int64-max"),
        pytest.param(-(2**63), id="int64-min"),
        pytest.param(0, id="zero"),
    ],
)
def test_an_integer_field_is_read_exactly_as_an_int(value: int) -> None:
    read = values(f'{{"priority": {value}}}'.encode(), RANKED)
    assert read == {"priority": value} and type(read["priority"]) is int


@pytest.mark.parametrize(
    ("literal", "kind"),
    [
        pytest.param("1.0", "a number", id="written-with-a-fraction"),
        pytest.param("1e3", "a number", id="written-with-an-exponent"),
        pytest.param('"5"', "a string", id="string"),
        pytest.param("true", "a boolean", id="boolean"),
    ],
)
def test_an_integer_field_refuses_anything_but_an_integer_literal_naming_it(literal: str, kind: str) -> None:
    assert (
        refusal(f'{{"priority": {literal}}}'.encode(), RANKED) == f"body.priority: must be a JSON integer, not {kind}"
    )


@pytest.mark.parametrize(
    "literal",
    [str(2**63), str(-(2**63) - 1), "9" * 399, "9" * 400, "-" + "9" * 400, "9" * 5000],
)
def test_an_integer_outside_int64_is_refused_naming_it_however_many_digits(literal: str) -> None:
    """Past 400 digits the literal is not converted (int() refuses past 4,300): it still reads as out of range,
    never as some other value."""
    assert refusal(f'{{"priority": {literal}}}'.encode(), RANKED) == "body.priority: must be a 64-bit integer"


def test_an_integer_literal_is_a_plain_float_to_a_number_field() -> None:
    read = values(b'{"daily_usd": 5}')
    assert read == {"daily_usd": 5.0} and type(read["daily_usd"]) is float


@pytest.mark.parametrize("literal", ["1" + "0" * 309, "-1" + "0" * 309])
def test_an_integer_literal_past_a_doubles_range_is_not_finite_to_a_number_field(literal: str) -> None:
    assert refusal(f'{{"daily_usd": {literal}}}'.encode()) == "body.daily_usd: must be a finite number"


def test_a_bodys_integers_decode_as_plain_ints_so_a_body_of_millions_costs_no_more_than_ints() -> None:
    """An authenticated caller may send tens of MiB of integers under any key: nothing heavier than an int is made
    for each before the body is refused (a float subclass carrying the exact value cost ~12x the memory)."""
    decoded = decode_json(b'{"x": [1, -2, 12345678901234567890]}')
    assert is_object(decoded)
    [(_, numbers)] = decoded
    assert [type(n) for n in numbers] == [int, int, int]  # type: ignore[attr-defined]


@pytest.mark.parametrize("literal", ["9" * 400, "-" + "9" * 400])
def test_a_long_integer_literal_is_not_finite_to_a_number_field_whatever_its_sign(literal: str) -> None:
    assert refusal(f'{{"daily_usd": {literal}}}'.encode()) == "body.daily_usd: must be a finite number"


# --- where: an object inside the body, named by its place ------------------------------------------------------


def inner(text: bytes) -> object:
    decoded = decode_json(text)
    assert not isinstance(decoded, BodyError) and is_object(decoded), decoded
    (only,) = [value for _, value in decoded]
    return only


def test_an_object_inside_the_body_is_read_as_a_body_is() -> None:
    read = read_pairs(inner(b'{"x": {"dailyUsd": 5, "priority": 3}}'), RANKED, where="body.x[0]")
    assert read == BodyValues(values={"daily_usd": 5.0, "priority": 3})


@pytest.mark.parametrize(
    ("text", "detail"),
    [
        pytest.param(
            b'{"x": {"bogus": 1}}', "body.jobs[3].bogus: unknown field; known: priority, daily_usd", id="unknown"
        ),
        pytest.param(
            b'{"x": {"a b": 1}}', 'body.jobs[3]["a b"]: unknown field; known: priority, daily_usd', id="quoted"
        ),
        pytest.param(
            b'{"x": {"priority": "1"}}', "body.jobs[3].priority: must be a JSON integer, not a string", id="type"
        ),
        pytest.param(b'{"x": {"daily_usd": null}}', "body.jobs[3].daily_usd: null is not a value", id="null"),
        pytest.param(b'{"x": {"priority": 1, "priority": 2}}', "body.jobs[3].priority: given twice", id="twice"),
        pytest.param(b'{"x": [1]}', "body.jobs[3]: must be a JSON object, not an array", id="not-an-object"),
    ],
)
def test_a_fault_inside_an_object_is_named_by_its_place_in_the_body(text: bytes, detail: str) -> None:
    read = read_pairs(inner(text), RANKED, where="body.jobs[3]")
    assert isinstance(read, BodyError) and read.detail.startswith(detail), read


def test_where_defaults_to_the_body() -> None:
    assert unknown_field("x", CANCEL) == BodyError("body.x: unknown field; known: build_id")
    assert unknown_field("x", ()) == BodyError("body.x: unknown field; known: none")


@pytest.mark.parametrize(
    ("text", "object_"),
    [(b"{}", True), (b'{"a": 1}', True), (b"[]", False), (b"null", False), (b'"{}"', False)],
)
def test_decode_json_keeps_objects_as_their_pairs_which_is_object_tells_apart(text: bytes, object_: bool) -> None:
    assert is_object(decode_json(text)) is object_


def test_decode_json_names_a_body_that_cannot_be_read() -> None:
    assert decode_json(b"{") == BodyError(
        "body: not JSON (Expecting property name enclosed in double quotes at line 1 column 2)"
    )
    assert decode_json(b"") == BodyError("body: empty; a JSON object is expected")
