"""What an error repeats of the caller's text and of a long list: bounded, so the status still reaches the caller."""

from __future__ import annotations

import pytest

from thermostat.policy.common.echo import ECHO_CHARS, LISTED_CHARS, LISTED_ITEMS, cut, key_path, listed, quoted


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        pytest.param("short", "short", id="short-text-whole"),
        pytest.param("k" * ECHO_CHARS, "k" * ECHO_CHARS, id="at-the-limit-whole"),
        pytest.param("k" * (ECHO_CHARS + 1), "k" * ECHO_CHARS + "…", id="past-the-limit-cut"),
    ],
)
def test_the_callers_text_is_cut_to_a_bounded_length(text: str, shown: str) -> None:
    assert cut(text) == shown


def test_quoted_text_is_ascii_whatever_the_caller_sent() -> None:
    """Non-ASCII and control characters are escaped, so no character grows to many bytes in the status."""
    shown = quoted("é\n" + "\U0001f600" * 100)
    assert shown.startswith("'\\xe9\\n\\U0001f600") and shown.endswith("'…") and shown[:-1].isascii()
    assert shown.count("\\U0001f600") == ECHO_CHARS - 2
    assert quoted("short") == "'short'"


@pytest.mark.parametrize(
    ("key", "path"),
    [
        pytest.param("cpus", "entry.cpus", id="a-word-is-plain"),
        pytest.param("a b", 'entry["a b"]', id="other-text-json-quoted"),
        pytest.param("ü", 'entry["\\u00fc"]', id="non-ascii-escaped"),
        pytest.param("k" * 100, "entry." + "k" * ECHO_CHARS + "…", id="a-long-word-cut"),
        pytest.param("ü" * 100, 'entry["' + "\\u00fc" * ECHO_CHARS + '"…]', id="long-other-text-cut-after-quotes"),
    ],
)
def test_a_key_is_named_under_where_it_was_found(key: str, path: str) -> None:
    assert key_path(key, "entry") == path


def test_a_short_list_is_spelt_out_whole() -> None:
    assert listed(["a", "b", "c"]) == "a, b, c"


def test_a_long_list_spells_out_its_first_items_and_counts_the_rest() -> None:
    names = [f"type-{i}" for i in range(400)]
    assert listed(names) == ", ".join(names[:LISTED_ITEMS]) + f", … and {400 - LISTED_ITEMS} more"


def test_long_items_stop_the_list_at_its_character_budget_but_the_first_is_always_shown() -> None:
    items = ["x" * 600] * 10
    shown = listed(items, sep="; ", noun="more errors")
    assert shown.count("x" * 600) == LISTED_CHARS // 602 and shown.endswith(
        f"… and {10 - LISTED_CHARS // 602} more errors"
    )
    assert listed(["y" * (LISTED_CHARS * 2), "z"]) == "y" * (LISTED_CHARS * 2) + ", … and 1 more"
