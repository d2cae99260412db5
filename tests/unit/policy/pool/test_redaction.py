"""A catalogue written back as a read without the admin token showed it: the redaction marker is never stored."""

from __future__ import annotations

from typing import Any

import pytest

from thermostat.policy.pool.machine_type import REDACTED, Catalogue, CatalogueRejected, parse_catalogue
from thermostat.policy.pool.redaction import keep_redacted


def catalogue(*entries: dict[str, Any]) -> Catalogue:
    parsed = parse_catalogue([{"image": "strata-worker:latest", **entry} for entry in entries])
    assert isinstance(parsed, Catalogue), parsed
    return parsed


STORED = catalogue(
    {"name": "gpu", "env": {"HANDLER": "app:run", "HF_TOKEN": "s3cr3t"}, "provider_options": {"cloud": "SECURE"}},
    {"name": "cpu", "env": {"HANDLER": "cpu:run"}},
)


@pytest.mark.parametrize(
    ("given", "env", "options"),
    [
        pytest.param(
            {"env": {"HANDLER": REDACTED, "HF_TOKEN": REDACTED}, "provider_options": {"cloud": REDACTED}},
            {"HANDLER": "app:run", "HF_TOKEN": "s3cr3t"},
            {"cloud": "SECURE"},
            id="all-markers-keep-the-stored-values",
        ),
        pytest.param(
            {"env": {"HANDLER": "new:run", "HF_TOKEN": REDACTED}},
            {"HANDLER": "new:run", "HF_TOKEN": "s3cr3t"},
            {},
            id="a-new-value-beside-a-marker",
        ),
        pytest.param(
            {"env": {"HF_TOKEN": REDACTED}},
            {"HF_TOKEN": "s3cr3t"},
            {},
            id="a-key-left-out-is-dropped",
        ),
        pytest.param(
            {"env": {"HANDLER": "app:run"}, "provider_options": {"cloud": "COMMUNITY", "gpu": {"a": REDACTED}}},
            {"HANDLER": "app:run"},
            {"cloud": "COMMUNITY", "gpu": {"a": REDACTED}},
            id="no-marker-at-the-top-level-is-taken-as-given",
        ),
    ],
)
def test_a_marker_keeps_the_stored_value_of_that_type_and_key(
    given: dict[str, Any], env: dict[str, str], options: dict[str, Any]
) -> None:
    """A value equal to `<redacted>` is the stored value of that type and key; any other value is taken as given."""
    kept = keep_redacted(catalogue({"name": "gpu", **given}), STORED)
    assert isinstance(kept, Catalogue), kept
    (machine_type,) = kept.types
    assert dict(machine_type.env) == env
    assert dict(machine_type.provider_options) == options


def test_a_marker_takes_the_value_of_its_own_type_not_another() -> None:
    """Two types with the same key each keep their own stored value."""
    kept = keep_redacted(
        catalogue({"name": "cpu", "env": {"HANDLER": REDACTED}}, {"name": "gpu", "env": {"HANDLER": REDACTED}}), STORED
    )
    assert isinstance(kept, Catalogue), kept
    assert [dict(t.env) for t in kept.types] == [{"HANDLER": "cpu:run"}, {"HANDLER": "app:run"}]


@pytest.mark.parametrize(
    ("given", "named"),
    [
        pytest.param(
            {"name": "new", "env": {"HANDLER": REDACTED}}, "machine_types[1] ('new').env.HANDLER", id="new-type"
        ),
        pytest.param(
            {"name": "cpu", "env": {"HF_TOKEN": REDACTED}}, "machine_types[1] ('cpu').env.HF_TOKEN", id="new-key"
        ),
        pytest.param(
            {"name": "cpu", "provider_options": {"cloud": REDACTED}},
            "machine_types[1] ('cpu').provider_options.cloud",
            id="new-option",
        ),
    ],
)
def test_a_marker_with_nothing_stored_is_refused_naming_the_field(given: dict[str, Any], named: str) -> None:
    """Nothing stored for that type and key: the marker stands for nothing, so the PUT is a 400 naming `env.KEY`."""
    result = keep_redacted(catalogue({"name": "gpu"}, given), STORED)
    assert isinstance(result, CatalogueRejected)
    assert result.detail.startswith(f"{named}: is '<redacted>'")


def test_a_marker_stored_before_the_rule_is_no_value_to_keep() -> None:
    """A catalogue stored with the literal marker (before this rule) does not lend it to the next PUT."""
    stored = catalogue({"name": "gpu", "env": {"HANDLER": REDACTED}})
    assert isinstance(
        keep_redacted(catalogue({"name": "gpu", "env": {"HANDLER": REDACTED}}), stored), CatalogueRejected
    )


def test_every_marker_without_a_value_is_reported_and_no_value_is_echoed() -> None:
    """Each refused marker is named; no stored value reaches the error."""
    result = keep_redacted(
        catalogue(
            {"name": "gpu", "env": {"HF_TOKEN": REDACTED, "NEW": REDACTED}}, {"name": "x", "env": {"A": REDACTED}}
        ),
        STORED,
    )
    assert isinstance(result, CatalogueRejected)
    assert [(e.index, e.field, e.key) for e in result.errors] == [(0, "env", "NEW"), (1, "env", "A")]
    assert "s3cr3t" not in result.detail
