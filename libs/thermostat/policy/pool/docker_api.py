"""Docker Engine API version negotiation: which `/v1.NN` the Docker backend speaks to a daemon (issue 35).

A daemon serves a range of API versions, `MinAPIVersion` to `ApiVersion` (its `GET /version`), and refuses a
path version outside it with a 400 ("client version 1.41 is too old. Minimum supported API version is 1.44").
The range moves: Engine 29.0 raised its minimum to 1.44 (moby#51186), 29.3 lowered it back to 1.40
(moby#52067). So the backend pins no version; as the Docker CLI and SDKs do, it speaks the highest version both
sides support: min(its own maximum, the daemon's ApiVersion), provided that is at least max(its own minimum, the
daemon's MinAPIVersion). When the ranges do not meet there is no version to speak, and the refusal names both.

A daemon that leaves `MinAPIVersion` out (one older than API 1.24, or a proxy that trims the answer) is bounded
by its `ApiVersion` alone, as the CLI does; one that answers no readable `ApiVersion` cannot be negotiated with.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final, Self

_VERSION = re.compile(r"^(\d{1,4})\.(\d{1,4})$")


@dataclass(frozen=True, slots=True, kw_only=True, order=True)
class ApiVersion:
    """ApiVersion is one Engine API version, `major.minor`, ordered as numbers (1.9 < 1.41)."""

    major: int
    minor: int

    @classmethod
    def parse(cls, text: object) -> Self | None:
        """`"1.44"` (a leading `v` allowed); None for anything else."""
        if not isinstance(text, str):
            return None
        found = _VERSION.match(text.strip().removeprefix("v"))
        return cls(major=int(found[1]), minor=int(found[2])) if found else None

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}"

    @property
    def prefix(self) -> str:
        """The path prefix a request in this version carries: `/v1.44`."""
        return f"/v{self}"


@dataclass(frozen=True, slots=True, kw_only=True)
class ApiRange:
    """ApiRange is the versions one side speaks, both ends included."""

    lowest: ApiVersion
    highest: ApiVersion

    def __str__(self) -> str:
        return f"{self.lowest}–{self.highest}"


# 1.41 is Engine 20.10; 1.52 is Engine 29.0. Every request the backend makes (create with HostConfig limits and
# port bindings, start, inspect's NetworkSettings.Ports, stop, force-remove, wait?condition=removed, the label
# filter) has kept its shape across that range (the Engine API's version history).
SUPPORTED: Final = ApiRange(lowest=ApiVersion(major=1, minor=41), highest=ApiVersion(major=1, minor=52))


@dataclass(frozen=True, slots=True, kw_only=True)
class Negotiated:
    """Negotiated is the version both sides speak."""

    version: ApiVersion


@dataclass(frozen=True, slots=True, kw_only=True)
class NoCommonVersion:
    """NoCommonVersion is a daemon the backend cannot speak to; `reason` is one line naming both ranges."""

    reason: str


def negotiate(
    *, daemon_api: object, daemon_min: object, supported: ApiRange = SUPPORTED
) -> Negotiated | NoCommonVersion:
    """The version to speak to a daemon whose `GET /version` answered `ApiVersion` `daemon_api` and
    `MinAPIVersion` `daemon_min` (raw JSON values: anything unreadable is said so)."""
    highest = ApiVersion.parse(daemon_api)
    if highest is None:
        return NoCommonVersion(
            reason=f"the daemon's GET /version gave no readable ApiVersion ({str(daemon_api)[:40]!r}); "
            f"this pool speaks Engine API {supported}"
        )
    lowest = ApiVersion.parse(daemon_min)
    choice = min(supported.highest, highest)
    if choice < supported.lowest or (lowest is not None and choice < lowest):
        daemon = ApiRange(lowest=lowest, highest=highest) if lowest is not None else f"up to {highest}"
        return NoCommonVersion(
            reason=f"the Docker daemon speaks Engine API {daemon} and this pool speaks {supported}: "
            "no version in common"
        )
    return Negotiated(version=choice)
