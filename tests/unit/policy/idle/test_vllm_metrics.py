"""vLLM /metrics parsing: one scrape → how many requests are in flight and how much work is done (#2075)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from thermostat.policy.idle.vllm_metrics import PodActivity, parse_vllm_metrics

# The exposition written in provider-apis.md §2 (recent V1, engine + model_name labels).
RECENT_V1 = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="Qwen/Qwen2.5-7B-Instruct"} 3.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="Qwen/Qwen2.5-7B-Instruct"} 1.0
# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="Qwen/Qwen2.5-7B-Instruct"} 18422.0
# HELP vllm:generation_tokens_total Number of generation tokens processed.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="Qwen/Qwen2.5-7B-Instruct"} 27453.0
# HELP vllm:request_success_total Count of successfully processed requests.
# TYPE vllm:request_success_total counter
vllm:request_success_total{engine="0",finished_reason="stop",model_name="Qwen/Qwen2.5-7B-Instruct"} 120.0
vllm:request_success_total{engine="0",finished_reason="length",model_name="Qwen/Qwen2.5-7B-Instruct"} 11.0
vllm:request_success_total{engine="0",finished_reason="abort",model_name="Qwen/Qwen2.5-7B-Instruct"} 2.0
vllm:request_success_total{engine="0",finished_reason="error",model_name="Qwen/Qwen2.5-7B-Instruct"} 0.0
vllm:request_success_total{engine="0",finished_reason="repetition",model_name="Qwen/Qwen2.5-7B-Instruct"} 0.0
"""

RECENT_V1_COMPLETED = 18422.0 + 27453.0 + 120.0 + 11.0 + 2.0


def test_the_recent_v1_exposition_reads_gauges_and_every_counter_series() -> None:
    """active = running + waiting; completed sums every label series of the three work families."""
    assert parse_vllm_metrics(RECENT_V1) == PodActivity(active=4, completed=RECENT_V1_COMPLETED)


def test_an_idle_server_reads_zero_active_and_its_counter() -> None:
    """Zero gauges are a real reading (0), not an absent one (None)."""
    text = "vllm:num_requests_running 0.0\nvllm:num_requests_waiting 0.0\nvllm:request_success_total 7.0\n"
    assert parse_vllm_metrics(text) == PodActivity(active=0, completed=7.0)


def test_no_counter_family_reads_completed_none_never_zero() -> None:
    """A constant 0 across ticks would read idle forever and re-create #2075, so absent is None."""
    text = "vllm:num_requests_running 0.0\nvllm:num_requests_waiting 0.0\n"
    assert parse_vllm_metrics(text) == PodActivity(active=0, completed=None)


def test_a_page_without_any_vllm_family_reads_nothing() -> None:
    """An HTML error page answered with 200 is not evidence that vLLM serves."""
    activity = parse_vllm_metrics("<html><body>502 Bad Gateway</body></html>\n")
    assert activity == PodActivity(active=None, completed=None)
    assert not activity.is_vllm


def test_counters_alone_still_count_as_a_vllm_exposition() -> None:
    """A scrape with counters but no gauges answers: the direction of the counter decides."""
    activity = parse_vllm_metrics("vllm:generation_tokens_total 5\n")
    assert activity == PodActivity(active=None, completed=5.0)
    assert activity.is_vllm


def line(sample: str) -> str:
    return f"vllm:num_requests_running 0\n{sample}\n"


@pytest.mark.parametrize(
    ("text", "completed"),
    [
        pytest.param(line("vllm:request_success_total 3"), 3.0, id="v0-wire-name"),
        pytest.param(line("vllm:request_success 3"), 3.0, id="counter-exposed-without-total"),
        pytest.param(line("vllm:prompt_tokens 4\nvllm:generation_tokens 5"), 9.0, id="v1-registered-names"),
        pytest.param(line("vllm:request_success_created 1.7e9"), None, id="created-series-ignored"),
        pytest.param(
            line("vllm:request_success_total 3\nvllm:request_success_created 1.7e9"), 3.0, id="created-beside-total"
        ),
        pytest.param(line("vllm:prompt_tokens_total 10 1712345678901"), 10.0, id="timestamp-ignored"),
        pytest.param(
            line('vllm:request_success_total{finished_reason="stop"} 4 # {trace_id="a b}c"} 1.0 1712345678.1'),
            4.0,
            id="openmetrics-exemplar-ignored",
        ),
        pytest.param(line("vllm:request_success_total NaN\nvllm:prompt_tokens_total 2"), 2.0, id="nan-ignored"),
        pytest.param(line("vllm:request_success_total +Inf\nvllm:prompt_tokens_total 2"), 2.0, id="inf-ignored"),
        pytest.param(line("vllm:request_success_total -Inf"), None, id="only-non-finite-is-absent"),
        pytest.param(line("vllm:request_success_total_bucket 3"), None, id="unknown-suffix-ignored"),
        pytest.param(line("vllm:prompt_tokens_total 1\n# EOF\nvllm:prompt_tokens_total 100"), 1.0, id="eof-ends"),
        pytest.param(line("vllm:cache_config_info 1\nvllm:prompt_tokens_total 1"), 1.0, id="other-families"),
        pytest.param(line('{"vllm:request_success_total",finished_reason="stop"} 6'), 6.0, id="utf8-quoted-name"),
    ],
)
def test_work_counter_samples_are_found_by_exact_name(text: str, completed: float | None) -> None:
    """The three work families count in every spelling vLLM has exposed, and nothing else does."""
    assert parse_vllm_metrics(text).completed == completed


@pytest.mark.parametrize(
    ("text", "active"),
    [
        pytest.param('vllm:num_requests_running{engine="0"} 1\nvllm:num_requests_running{engine="1"} 2', 3, id="sum"),
        pytest.param("vllm:num_requests_waiting 2", 2, id="waiting-alone"),
        pytest.param(
            'vllm:num_requests_running 0\nvllm:num_requests_waiting_by_reason{reason="capacity"} 5', 0, id="by-reason"
        ),
        pytest.param("vllm:num_requests_running 0.25", 1, id="fraction-rounds-up-toward-busy"),
        pytest.param("vllm:num_requests_running NaN\nvllm:num_requests_waiting 0", 0, id="nan-gauge-ignored"),
        pytest.param("vllm:num_requests_running NaN", None, id="only-nan-gauge-is-absent"),
        pytest.param("vllm:num_requests_running -1", 0, id="negative-floors-at-zero"),
    ],
)
def test_active_sums_running_and_waiting_over_every_series(text: str, active: int | None) -> None:
    """Only the two exact gauge names count: the newer waiting_by_reason would double-count waiting."""
    assert parse_vllm_metrics(text).active == active


@pytest.mark.parametrize(
    "label_value",
    [
        pytest.param(r"a \"quoted\" value", id="escaped-quote"),
        pytest.param(r"back\\slash", id="escaped-backslash"),
        pytest.param(r"line\nbreak", id="escaped-newline"),
        pytest.param("brace } inside", id="closing-brace"),
        pytest.param("hash # inside 99", id="hash-and-number"),
        pytest.param(r"ends with backslash \\", id="trailing-escaped-backslash"),
    ],
)
def test_escaped_label_values_do_not_break_the_sample(label_value: str) -> None:
    """A label value may hold quotes, backslashes, braces and '#'; the sample value is still read."""
    text = f'vllm:num_requests_running{{model_name="{label_value}",engine="0"}} 2\nvllm:prompt_tokens_total 5\n'
    assert parse_vllm_metrics(text) == PodActivity(active=2, completed=5.0)


@pytest.mark.parametrize(
    "garbage",
    [
        pytest.param('vllm:num_requests_running{model_name="unterminated} 5', id="unterminated-label"),
        pytest.param("vllm:num_requests_running", id="no-value"),
        pytest.param("vllm:num_requests_running many", id="non-numeric-value"),
        pytest.param("vllm:num_requests_running5", id="name-glued-to-value"),
        pytest.param("{} 5", id="no-name"),
        pytest.param("\x00\xff", id="binary"),
    ],
)
def test_malformed_lines_are_skipped_not_fatal(garbage: str) -> None:
    """One bad line never hides the rest of the scrape, and never raises."""
    text = f"{garbage}\nvllm:num_requests_waiting 1\r\nvllm:prompt_tokens_total 2\n"
    assert parse_vllm_metrics(text) == PodActivity(active=1, completed=2.0)


def test_comments_help_and_type_lines_never_count_as_samples() -> None:
    """A HELP text that looks like a sample is still a comment."""
    text = "# HELP vllm:num_requests_running vllm:num_requests_running 9\n#vllm:num_requests_waiting 9\n"
    assert parse_vllm_metrics(text) == PodActivity(active=None, completed=None)


def test_absurd_magnitudes_never_raise() -> None:
    """Sums that overflow a float still answer: in-flight work stays busy, an unusable counter is absent."""
    text = (
        "vllm:num_requests_running 1e308\nvllm:num_requests_waiting 1e308\n"
        "vllm:prompt_tokens_total 1e308\nvllm:generation_tokens_total 1e308\n"
    )
    activity = parse_vllm_metrics(text)
    assert activity.active is not None
    assert activity.active >= 1
    assert activity.completed is None


_LINE_PARTS = st.sampled_from(
    [
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:num_requests_waiting_by_reason",
        "vllm:generation_tokens_total",
        "vllm:generation_tokens_created",
        "vllm:prompt_tokens",
        "vllm:request_success_total",
        "vllm:e2e_request_latency_seconds_bucket",
        "vllm:num_requests_running5",
        "# HELP vllm:num_requests_running x",
        '{engine="0",model_name="q"}',
        '{finished_reason="st\\"op}"}',
        '{le="+Inf"',
        " ",
        "\t",
        "\r",
        "1.0",
        "NaN",
        "-3",
        "1e308",
        "abc",
        "",
    ]
)


@given(st.lists(st.lists(_LINE_PARTS, max_size=4).map("".join), max_size=12).map("\n".join))
@settings(max_examples=400, deadline=None)
def test_the_one_scan_reading_equals_the_line_by_line_reading(text: str) -> None:
    """An indented line sends the exposition down the careful line-by-line path; it must read the same."""
    assert parse_vllm_metrics(text) == parse_vllm_metrics(text + "\n  # indented: the careful path")
