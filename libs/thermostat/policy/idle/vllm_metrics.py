"""How busy a vLLM server is, read from ONE scrape of its Prometheus /metrics (rig-conductor#2075).

`active` is vllm:num_requests_running + vllm:num_requests_waiting summed over every series: an instantaneous
gauge, so a chat turn that began and ended between two scrapes never shows in it. `completed` is the sum of
the monotonic work counters vllm:request_success, vllm:generation_tokens and vllm:prompt_tokens over every
label series; the activity policy compares it with the previous scrape, and only its direction is used, so
mixing families is safe — and necessary, because the pod runs a floating vLLM tag and series move between
releases.

Decisions, each with the failure it prevents:
- `completed` is None, never 0, when no work family is present: a constant 0 would read idle on every tick
  and re-create #2075. `active` is likewise None when neither gauge is present, so an HTML page served with
  200 by a proxy reads as "no vLLM answered" (`is_vllm` is False), not as an idle server.
- Counter samples are matched by exact name, with and without `_total`: V0 and V1 both expose
  `vllm:request_success_total` (V1 registers `vllm:request_success` and prometheus_client appends `_total`),
  and a plain-text exposition may carry the bare family name. `*_created` series are timestamps, not work,
  and are ignored, as is every other family (e.g. `vllm:num_requests_waiting_by_reason`, which would
  double-count waiting).
- Non-finite samples (NaN, ±Inf) are ignored: one NaN would poison the sum and make every later comparison
  false, which reads as "no advance" — idle. A family whose every sample is non-finite counts as absent.
- A fractional in-flight gauge rounds up: any positive amount of in-flight work is at least one request.
  Absurd magnitudes never raise: an in-flight sum that overflows still reads busy, and a counter sum that
  overflows reads as absent (a constant infinity could never advance).
- The parser never raises: a malformed line is skipped, and the rest of the scrape still counts. Comments,
  HELP/TYPE lines, timestamps and OpenMetrics exemplars are ignored, label values may hold escaped quotes,
  backslashes and newlines as well as braces and '#', and `# EOF` ends the exposition.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field

ACTIVE_GAUGES = frozenset({"vllm:num_requests_running", "vllm:num_requests_waiting"})
WORK_COUNTER_FAMILIES = ("vllm:request_success", "vllm:generation_tokens", "vllm:prompt_tokens")
_WORK_COUNTER_SAMPLES = frozenset(f"{family}{suffix}" for family in WORK_COUNTER_FAMILIES for suffix in ("", "_total"))

# every line that can carry one of our samples starts with one of these (or with '{': a UTF-8 name in quotes)
_OURS = (*ACTIVE_GAUGES, *WORK_COUNTER_FAMILIES, "{")
# a label set without its quoted-name detail, in C: plain characters or quoted strings (escapes included), then '}'
_LABELS = re.compile(r'\{(?:[^"}]|"(?:[^"\\]|\\.)*")*\}')

# Our samples, each at the start of a line: the exact name (so `..._created` and `..._by_reason` never match), a
# label set on that line, whitespace, the value. A line this misses that the careful path would read
# (`_CAREFUL_NEEDED`) sends the whole exposition down the careful path.
# Both search "\n" + text for a literal "\n…" prefix, which the regex engine finds at C speed ("^" in MULTILINE mode
# would be tried at every position).
_OUR_SAMPLES = re.compile(
    r"\n(vllm:(?:num_requests_(?:running|waiting)|(?:request_success|generation_tokens|prompt_tokens)(?:_total)?))"
    # after a label set the value may follow at once, as the line-by-line reading allows; after a bare name, not
    r'(?:\{(?:[^"}\n]|"(?:[^"\\\n]|\\.)*")*\}[^\S\n]*|[^\S\n]+)(\S+)'
)
_CAREFUL_NEEDED = re.compile(r"\n(?:[^\S\n]|\{)")

_MAX_IN_FLIGHT = 1_000_000
_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_UNESCAPE = {"\\": "\\", '"': '"', "n": "\n"}


@dataclass(frozen=True, slots=True, kw_only=True)
class PodActivity:
    """PodActivity is one scrape of a pod's vLLM /metrics: requests in flight now and work done so far."""

    active: int | None = None
    completed: float | None = None
    # the two gauges apart, for the stall guard's log line only (`active` rounds their sum; these round each):
    # detail, not the reading, so they take no part in equality
    running: int | None = field(default=None, compare=False)
    waiting: int | None = field(default=None, compare=False)

    @property
    def is_vllm(self) -> bool:
        """Whether the scrape carried any vLLM family at all — only then did vLLM answer."""
        return self.active is not None or self.completed is not None


def parse_vllm_metrics(text: str) -> PodActivity:
    """Read one Prometheus (or OpenMetrics) text exposition into a PodActivity."""
    gauges = {"vllm:num_requests_running": 0.0, "vllm:num_requests_waiting": 0.0}
    seen: set[str] = set()
    counters: list[float] = []
    for name, value in _samples(text):
        if not math.isfinite(value):
            continue
        if name in ACTIVE_GAUGES:
            gauges[name] += value
            seen.add(name)
        elif name in _WORK_COUNTER_SAMPLES:
            counters.append(value)
    if not seen:
        return PodActivity(completed=_work_done(counters))
    running, waiting = gauges["vllm:num_requests_running"], gauges["vllm:num_requests_waiting"]
    return PodActivity(
        active=_in_flight(running + waiting),
        completed=_work_done(counters),
        running=_in_flight(running) if "vllm:num_requests_running" in seen else None,
        waiting=_in_flight(waiting) if "vllm:num_requests_waiting" in seen else None,
    )


def _samples(text: str) -> list[tuple[str, float]]:
    """Our samples in exposition order. The monitor parses every pod's scrape on every tick, and most of a real
    exposition is histogram buckets of other families: an exposition whose lines all start at column 0 with a
    bare metric name (prometheus_client's, vLLM's) is read by one C-level scan for our samples alone; anything
    else — `# EOF`, indented lines, Prometheus 3's quoted names — line by line."""
    lines = "\n" + text
    if "# EOF" not in text and _CAREFUL_NEEDED.search(lines) is None:
        samples: list[tuple[str, float]] = []
        for name, raw in _OUR_SAMPLES.findall(lines):
            try:
                samples.append((name, float(raw)))
            except ValueError:
                continue
        return samples
    return list(_careful_samples(text))


def _careful_samples(text: str) -> Iterator[tuple[str, float]]:
    for raw_line in text.split("\n"):
        line = raw_line.strip()
        if not line.startswith(_OURS):
            if line == "# EOF":
                return
            continue
        sample = _parse_sample(line)
        if sample is not None:
            yield sample


def _in_flight(total: float) -> int:
    if math.isnan(total):  # +Inf + -Inf from two overflowing series: in flight, but unmeasurable
        return 1
    return max(0, math.ceil(min(total, float(_MAX_IN_FLIGHT))))


def _work_done(counters: list[float]) -> float | None:
    """The exact sum of the counter samples; None when there are none or the sum overflows a float."""
    if not counters:
        return None
    try:
        total = math.fsum(counters)
    except OverflowError:
        return None
    return total if math.isfinite(total) else None


def _parse_sample(line: str) -> tuple[str, float] | None:
    """`name{labels} value [timestamp] [# exemplar]` → (name, value), or None for anything malformed."""
    match = _METRIC_NAME.match(line)
    name = match.group() if match else None
    position = match.end() if match else 0
    if position < len(line) and line[position] == "{":
        if name:  # the name is known: only where the labels end matters
            block = _LABELS.match(line, position)
            if block is None:
                return None
            position = block.end()
        else:
            labels = _scan_labels(line, position)
            if labels is None:
                return None
            position, name = labels
    elif position < len(line) and not line[position].isspace():
        return None
    if not name:
        return None
    fields = line[position:].split()
    if not fields:
        return None
    try:
        return name, float(fields[0])
    except ValueError:
        return None


def _scan_labels(line: str, start: int) -> tuple[int, str | None] | None:
    """Skip a `{...}` label set that starts at `start`; return the index after '}' and a quoted metric name.

    Prometheus 3 (UTF-8 names) may put the metric name inside the braces as a bare quoted string:
    `{"vllm:request_success_total",finished_reason="stop"}`. A quoted string right after '{' or ',' is that
    name; one after '=' is a label value. None when the set never closes.
    """
    quoted_name: str | None = None
    previous = "{"
    index = start + 1
    while index < len(line):
        char = line[index]
        if char == "}":
            return index + 1, quoted_name
        if char == '"':
            closing = _scan_quoted(line, index)
            if closing is None:
                return None
            end, value = closing
            if previous in "{," and quoted_name is None:
                quoted_name = value
            previous = '"'
            index = end
            continue
        if not char.isspace():
            previous = char
        index += 1
    return None


def _scan_quoted(line: str, start: int) -> tuple[int, str] | None:
    """Read the quoted string opening at `start`; return the index after its closing quote and its value."""
    chars: list[str] = []
    index = start + 1
    while index < len(line):
        char = line[index]
        if char == "\\" and index + 1 < len(line):
            escaped = line[index + 1]
            chars.append(_UNESCAPE.get(escaped, "\\" + escaped))
            index += 2
            continue
        if char == '"':
            return index + 1, "".join(chars)
        chars.append(char)
        index += 1
    return None
