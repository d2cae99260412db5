"""Warm hours: when a deployment wants a pod ready without anyone waking it (issue 26).

A chat that opens the working day waited three to nine minutes for a pod to boot. `RUNPOD_WARM_HOURS` (per pod
`RUNPOD_<NAME>_WARM_HOURS`, which wins) names the hours a pod should be ready:

    Mon-Fri 08:00-18:00 Europe/Berlin
    Mon,Wed 09:00-12:00; Sat 10:00-14:00 America/New_York      several windows, one zone, `;` between

Days are Mon … Sun, single or as a range (Fri-Mon wraps), comma-separated; times are 24-hour HH:MM with the end
after the start (24:00 is midnight at the end of the day; an overnight window is two windows); the zone is an
IANA name read by the standard library's zoneinfo (tzdata is pinned, so a container without /usr/share/zoneinfo
still has the database). Wall-clock times are local: 08:00 Europe/Berlin is 07:00 UTC in winter and 06:00 in
summer, and a window on the day clocks spring forward starts at the first valid instant (zoneinfo's fold=0).
Blank means no warm hours; the per-pod value `none` opts one pod out of the shared hours. Anything else that
does not read is a WarmHoursError naming the variable, for the service to refuse to start with.

Who uses it: the monitor does not idle-stop a pod inside its hours (nor in the idle window before they open,
so a pod woken early for them is not stopped just before they begin); the pod controller wakes the pod before
each window opens (policy/wake/scheduled_wake.py).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_DAY_INDEX = {day.casefold(): index for index, day in enumerate(DAYS)}
_TIME = re.compile(r"([01][0-9]|2[0-3]):([0-5][0-9])|24:00")
_WINDOW = re.compile(r"(?P<days>\S+)\s+(?P<start>\S+)-(?P<end>\S+)")
OPT_OUT = "none"


class WarmHoursError(ValueError):
    """WarmHoursError is a warm-hours value that does not read; its message names the variable."""


@dataclass(frozen=True, slots=True, kw_only=True)
class WarmWindow:
    """WarmWindow is one weekly window: the weekdays (0 = Monday) and the local start and end minute of day."""

    days: frozenset[int]
    start_minute: int
    end_minute: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Occurrence:
    """Occurrence is one dated window, in UTC: the pod should be ready from `start` until `end`."""

    start: datetime
    end: datetime

    def contains(self, now: datetime) -> bool:
        return self.start <= now < self.end


@dataclass(frozen=True, slots=True, kw_only=True)
class WarmHours:
    """WarmHours are a pod's weekly windows in one time zone, and the text they were read from."""

    text: str
    zone: str
    windows: tuple[WarmWindow, ...]

    @property
    def longest(self) -> timedelta:
        """The longest window's wall-clock length (a DST day may make it an hour longer or shorter)."""
        return timedelta(minutes=max(w.end_minute - w.start_minute for w in self.windows))

    def occurrences(self, around: datetime) -> Iterator[Occurrence]:
        """Every dated window from the day before `around` to eight days after it, in start order."""
        zone = ZoneInfo(self.zone)
        today = around.astimezone(zone).date()
        found = [occurrence for offset in range(-1, 9) for occurrence in self._on(today + timedelta(days=offset), zone)]
        return iter(sorted(found, key=lambda o: o.start))

    def current(self, now: datetime) -> Occurrence | None:
        """The window `now` is inside, or None."""
        return next((o for o in self.occurrences(now) if o.contains(now)), None)

    def upcoming(self, now: datetime) -> Occurrence | None:
        """The window `now` is inside, else the next one to open (None only for a schedule with no days)."""
        return next((o for o in self.occurrences(now) if o.end > now), None)

    def _on(self, day: date, zone: ZoneInfo) -> Iterator[Occurrence]:
        for window in self.windows:
            if day.weekday() in window.days:
                yield Occurrence(
                    start=_instant(day, window.start_minute, zone), end=_instant(day, window.end_minute, zone)
                )


def inside_warm_hours(hours: WarmHours | None, now: datetime, *, lead: timedelta = timedelta(0)) -> bool:
    """Whether `now` is inside a window, or within `lead` before one opens; never without warm hours."""
    if hours is None:
        return False
    upcoming = hours.upcoming(now)
    return upcoming is not None and upcoming.start - lead <= now < upcoming.end


def parse_warm_hours(raw: str, variable: str) -> WarmHours | None:
    """Read one warm-hours value; None when blank (or `none`); WarmHoursError naming `variable` otherwise."""
    text = " ".join(raw.split())
    if not text or text.casefold() == OPT_OUT:
        return None

    def bad(why: str) -> WarmHoursError:
        return WarmHoursError(f"{variable}={raw.strip()!r}: {why} (expected e.g. 'Mon-Fri 08:00-18:00 Europe/Berlin')")

    body, _, zone = text.rpartition(" ")
    if not body or re.search(r"[0-9]:[0-9]", zone):
        raise bad("no time zone: the value ends with an IANA zone name such as Europe/Berlin or UTC")
    try:
        ZoneInfo(zone)
    except (ZoneInfoNotFoundError, ValueError):
        raise bad(f"unknown time zone {zone!r}") from None
    windows = tuple(_window(part.strip(), bad) for part in body.split(";"))
    return WarmHours(text=text, zone=zone, windows=windows)


def warm_hours_of(env: Mapping[str, str], pod_name: str) -> WarmHours | None:
    """The pod's warm hours: RUNPOD_<NAME>_WARM_HOURS if it is not blank, else RUNPOD_WARM_HOURS."""
    own = f"RUNPOD_{re.sub(r'[^A-Z0-9]', '_', pod_name.upper())}_WARM_HOURS"
    raw = env.get(own, "")
    if raw.strip():
        return parse_warm_hours(raw, own)
    return parse_warm_hours(env.get("RUNPOD_WARM_HOURS", ""), "RUNPOD_WARM_HOURS")


_Fail = Callable[[str], WarmHoursError]


def _window(part: str, fail: _Fail) -> WarmWindow:
    match = _WINDOW.fullmatch(part)
    if match is None:
        raise fail(f"{part!r} is not 'DAYS HH:MM-HH:MM'")
    start, end = _minute(match["start"]), _minute(match["end"])
    if start is None or end is None:
        raise fail(f"{match['start']}-{match['end']} is not HH:MM-HH:MM in 24-hour time")
    if end <= start:
        raise fail(f"{match['start']}-{match['end']} ends before it starts; an overnight window is two windows")
    return WarmWindow(days=_days(match["days"], fail), start_minute=start, end_minute=end)


def _days(spec: str, fail: _Fail) -> frozenset[int]:
    days: set[int] = set()
    for item in spec.split(","):
        first, _, last = item.partition("-")
        a, b = _DAY_INDEX.get(first.casefold()), _DAY_INDEX.get((last or first).casefold())
        if a is None or b is None:
            raise fail(f"{item!r} is not a day or a day range ({', '.join(DAYS)})")
        days.update((a + step) % 7 for step in range((b - a) % 7 + 1))
    return frozenset(days)


def _minute(text: str) -> int | None:
    if not _TIME.fullmatch(text):
        return None
    hours, minutes = text.split(":")
    return int(hours) * 60 + int(minutes)


def _instant(day: date, minute: int, zone: ZoneInfo) -> datetime:
    if minute == 24 * 60:
        day, minute = day + timedelta(days=1), 0
    local = datetime.combine(day, time(minute // 60, minute % 60), tzinfo=zone)
    # a wall time that does not exist (spring forward) round-trips through UTC to the first valid instant
    return local.astimezone(UTC)
