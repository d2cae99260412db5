"""A catalogue read without the admin token and written back with it: the redaction marker is never stored.

`GET /v1/machine-types` shows `env` and `provider_options` values as `<redacted>` to a caller without the admin
token (machine_type.py). Issue 35: a cockpit read the catalogue with the pool token, wrote it back with the admin
token, and the PUT stored the literal, so every new machine of those types got `STRATA_WORKER_HANDLER=<redacted>`,
exited at once, and the stored catalogue kept it across restarts. So a value equal to the marker in a PUT means
"keep what is stored": the stored value for that type and key, and where none is stored (a new type or a new key)
a 400 naming the field, since there is nothing the marker could stand for. The marker is never stored.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from .machine_type import REDACTED, Catalogue, CatalogueError, CatalogueRejected, MachineType


def keep_redacted(catalogue: Catalogue, stored: Catalogue) -> Catalogue | CatalogueRejected:
    """`catalogue` with every value equal to the marker replaced by the stored value of the same type and key, or
    a rejection naming each marker that has no stored value."""
    errors: list[CatalogueError] = []
    types: list[MachineType] = []
    for index, machine_type in enumerate(catalogue.types):
        before = stored.get(machine_type.name) or MachineType(name=machine_type.name, image=machine_type.image)
        env = _kept(machine_type.env, before.env, errors, index, machine_type.name, "env")
        options = _kept(
            machine_type.provider_options, before.provider_options, errors, index, machine_type.name, "provider_options"
        )
        types.append(replace(machine_type, env=env, provider_options=options))
    if errors:
        return CatalogueRejected(errors=tuple(errors))
    return Catalogue(types=tuple(types))


def _kept(
    given: Mapping[str, Any], known: Mapping[str, Any], errors: list[CatalogueError], index: int, name: str, field: str
) -> dict[str, Any]:
    values = dict(given)
    for key, value in given.items():
        if value != REDACTED:
            continue
        if key in known and known[key] != REDACTED:  # a marker stored before this rule is no value
            values[key] = known[key]
        else:
            errors.append(_unknown(index, name, field, key))
    return values


def _unknown(index: int, name: str, field: str, key: str) -> CatalogueError:
    return CatalogueError(
        index=index,
        name=name,
        field=field,
        key=key,
        message=(
            f"is {REDACTED!r}, the mark a read without the admin token shows, and no value is stored for it "
            "to keep: send the value"
        ),
    )
