"""Pod options: environment parsing that never widens a guard (pod-control seed: Config, Options)."""

from __future__ import annotations

import pytest

from thermostat.policy.common.pod_options import (
    DEFAULT_PROXY_URL_TEMPLATE,
    PodOptions,
    find_pod,
    parse_pod_options,
)


def only(env: dict[str, str]) -> tuple[PodOptions, tuple[str, ...]]:
    result = parse_pod_options(env)
    assert len(result.pods) == 1
    return result.pods[0], result.warnings


def test_defaults_follow_the_seed_config_table() -> None:
    """An empty environment configures one unconfigured pod named qwen with the documented defaults."""
    pod, warnings = only({})
    assert pod == PodOptions(
        name="qwen",
        volume_id="",
        template_id="",
        datacenter_id="EU-RO-1",
        min_vram_gb=32,
        max_price_per_hour=1.00,
        gpu_allowlist=(),
        pod_port=8000,
        proxy_url_template="https://{podId}-{port}.proxy.runpod.net",
        max_polls=30,
        poll_interval_seconds=10.0,
        max_retry_after_seconds=30.0,
    )
    assert warnings == ()


def test_every_setting_is_read_from_its_variable() -> None:
    """Each variable the pod-control seed names (and the wake bounds) lands in its field."""
    pod, warnings = only(
        {
            "RUNPOD_POD_NAME": "Mistral",
            "RUNPOD_VOLUME_ID": "bjn7d94ej9",
            "RUNPOD_TEMPLATE_ID": "cnz5fxyadi",
            "RUNPOD_DATACENTER_ID": "US-KS-2",
            "RUNPOD_MIN_VRAM_GB": "48",
            "RUNPOD_MAX_PRICE_PER_HOUR": "2.00",
            "RUNPOD_GPU_ALLOWLIST": "NVIDIA A100 80GB PCIe, NVIDIA L40S",
            "RUNPOD_POD_PORT": "8080",
            "RUNPOD_PROXY_URL_TEMPLATE": "http://127.0.0.1:9000/{podId}/{port}",
            "RUNPOD_WAKE_MAX_POLLS": "5",
            "RUNPOD_WAKE_POLL_SECONDS": "0.05",
            "RUNPOD_WAKE_MAX_RETRY_AFTER_SECONDS": "0.2",
        }
    )
    assert warnings == ()
    assert pod == PodOptions(
        name="Mistral",
        volume_id="bjn7d94ej9",
        template_id="cnz5fxyadi",
        datacenter_id="US-KS-2",
        min_vram_gb=48,
        max_price_per_hour=2.00,
        gpu_allowlist=("NVIDIA A100 80GB PCIe", "NVIDIA L40S"),
        pod_port=8080,
        proxy_url_template="http://127.0.0.1:9000/{podId}/{port}",
        max_polls=5,
        poll_interval_seconds=0.05,
        max_retry_after_seconds=0.2,
    )


@pytest.mark.parametrize(
    ("volume", "configured"),
    [
        pytest.param("bjn7d94ej9", True, id="set"),
        pytest.param("", False, id="empty"),
        pytest.param("   ", False, id="whitespace"),
    ],
)
def test_a_blank_volume_id_leaves_the_pod_unconfigured(volume: str, configured: bool) -> None:
    """The volume is the only identity of our pod; without it nothing may be called."""
    pod, _ = only({"RUNPOD_VOLUME_ID": volume})
    assert pod.configured is configured


@pytest.mark.parametrize(
    ("template", "can_create"),
    [pytest.param("cnz5fxyadi", True, id="set"), pytest.param(" ", False, id="blank")],
)
def test_a_blank_template_id_means_the_wake_refuses_to_create(template: str, can_create: bool) -> None:
    """Without a template there is nothing to create a replacement from."""
    pod, _ = only({"RUNPOD_TEMPLATE_ID": template})
    assert pod.can_create is can_create


@pytest.mark.parametrize(
    ("raw", "value", "warning"),
    [
        pytest.param("48", 48, None, id="valid"),
        pytest.param("0", 0, None, id="zero"),
        pytest.param(" 24 ", 24, None, id="surrounding-space"),
        pytest.param("many", 32, 'RUNPOD_MIN_VRAM_GB="many" is not a non-negative int; using 32', id="word"),
        pytest.param("-8", 32, 'RUNPOD_MIN_VRAM_GB="-8" is not a non-negative int; using 32', id="negative"),
        pytest.param("+8", 32, 'RUNPOD_MIN_VRAM_GB="+8" is not a non-negative int; using 32', id="signed"),
        pytest.param("2_4", 32, 'RUNPOD_MIN_VRAM_GB="2_4" is not a non-negative int; using 32', id="underscore"),
        pytest.param("24.0", 32, 'RUNPOD_MIN_VRAM_GB="24.0" is not a non-negative int; using 32', id="decimal"),
        pytest.param("٣٢", 32, 'RUNPOD_MIN_VRAM_GB="٣٢" is not a non-negative int; using 32', id="arabic-digits"),
    ],
)
def test_min_vram_must_be_a_non_negative_int_or_the_default_applies_with_a_warning(
    raw: str, value: int, warning: str | None
) -> None:
    """An unparseable floor keeps 32 rather than dropping to 0 and admitting every card."""
    pod, warnings = only({"RUNPOD_MIN_VRAM_GB": raw})
    assert pod.min_vram_gb == value
    assert warnings == ((warning,) if warning else ())


@pytest.mark.parametrize(
    ("raw", "value", "warning"),
    [
        pytest.param("2.00", 2.0, None, id="dot-decimal"),
        pytest.param("1.5", 1.5, None, id="short-decimal"),
        pytest.param("2", 2.0, None, id="integer"),
        pytest.param("0", 0.0, None, id="zero"),
        pytest.param(".75", 0.75, None, id="leading-dot"),
        pytest.param(
            "1,50",
            1.0,
            'RUNPOD_MAX_PRICE_PER_HOUR="1,50" is not a non-negative dot-decimal number; using 1.00',
            id="european-comma-is-not-150",
        ),
        pytest.param(
            "1,000.00",
            1.0,
            'RUNPOD_MAX_PRICE_PER_HOUR="1,000.00" is not a non-negative dot-decimal number; using 1.00',
            id="thousands-separator",
        ),
        pytest.param(
            "1_5",
            1.0,
            'RUNPOD_MAX_PRICE_PER_HOUR="1_5" is not a non-negative dot-decimal number; using 1.00',
            id="underscore",
        ),
        pytest.param(
            "-1",
            1.0,
            'RUNPOD_MAX_PRICE_PER_HOUR="-1" is not a non-negative dot-decimal number; using 1.00',
            id="negative",
        ),
        pytest.param(
            "1e3",
            1.0,
            'RUNPOD_MAX_PRICE_PER_HOUR="1e3" is not a non-negative dot-decimal number; using 1.00',
            id="exponent",
        ),
        pytest.param(
            "inf",
            1.0,
            'RUNPOD_MAX_PRICE_PER_HOUR="inf" is not a non-negative dot-decimal number; using 1.00',
            id="infinity",
        ),
        pytest.param(
            "nan",
            1.0,
            'RUNPOD_MAX_PRICE_PER_HOUR="nan" is not a non-negative dot-decimal number; using 1.00',
            id="nan",
        ),
        pytest.param(
            "9" * 400,
            1.0,
            f'RUNPOD_MAX_PRICE_PER_HOUR="{"9" * 400}" is not a non-negative dot-decimal number; using 1.00',
            id="overflows-to-infinity",
        ),
    ],
)
def test_the_price_cap_parses_dot_decimal_only_and_never_widens(raw: str, value: float, warning: str | None) -> None:
    """A European "1,50" is rejected (default 1.00 + warning) instead of being read as 150 (#2093 context)."""
    pod, warnings = only({"RUNPOD_MAX_PRICE_PER_HOUR": raw})
    assert pod.max_price_per_hour == value
    assert warnings == ((warning,) if warning else ())


@pytest.mark.parametrize(
    ("raw", "value", "warns"),
    [
        pytest.param("8000", 8000, False, id="default-port"),
        pytest.param("1", 1, False, id="lowest"),
        pytest.param("65535", 65535, False, id="highest"),
        pytest.param("0", 8000, True, id="zero"),
        pytest.param("65536", 8000, True, id="too-high"),
        pytest.param("http", 8000, True, id="word"),
        pytest.param("9" * 5000, 8000, True, id="thousands-of-digits"),
    ],
)
def test_the_pod_port_must_be_in_1_to_65535(raw: str, value: int, warns: bool) -> None:
    """An out-of-range port keeps 8000 and warns."""
    pod, warnings = only({"RUNPOD_POD_PORT": raw})
    assert pod.pod_port == value
    assert warnings == ((f'RUNPOD_POD_PORT="{raw}" is not a port in 1..65535; using 8000',) if warns else ())


@pytest.mark.parametrize(
    ("raw", "allowlist"),
    [
        pytest.param("", (), id="empty-is-none"),
        pytest.param(" , ,", (), id="only-separators-is-none"),
        pytest.param(" NVIDIA L40S ,NVIDIA A40", ("NVIDIA L40S", "NVIDIA A40"), id="trimmed"),
        pytest.param("NVIDIA L40S,nvidia l40s,NVIDIA A40", ("NVIDIA L40S", "NVIDIA A40"), id="case-duplicates"),
    ],
)
def test_the_gpu_allowlist_is_comma_separated_trimmed_and_case_insensitive(
    raw: str, allowlist: tuple[str, ...]
) -> None:
    """Blank entries are dropped; a blank list means no allowlist."""
    pod, _ = only({"RUNPOD_GPU_ALLOWLIST": raw})
    assert pod.gpu_allowlist == allowlist


def test_the_proxy_url_renders_pod_id_and_port() -> None:
    """proxyUrl = https://{podId}-{RUNPOD_POD_PORT}.proxy.runpod.net by default."""
    pod, _ = only({"RUNPOD_POD_PORT": "8001"})
    assert pod.proxy_url("abc123") == "https://abc123-8001.proxy.runpod.net"


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param("https://proxy.example/{port}", id="no-pod-id"),
        pytest.param("ftp://{podId}.example", id="not-http"),
        pytest.param("{podId}", id="not-a-url"),
    ],
)
def test_a_proxy_url_template_without_pod_id_or_http_scheme_keeps_the_default(raw: str) -> None:
    """Every pod would otherwise share one URL, and the monitor would scrape the wrong pod."""
    pod, warnings = only({"RUNPOD_PROXY_URL_TEMPLATE": raw})
    assert pod.proxy_url_template == DEFAULT_PROXY_URL_TEMPLATE
    assert warnings == (
        f'RUNPOD_PROXY_URL_TEMPLATE="{raw}" is not an http(s) URL template containing {{podId}}; '
        f"using {DEFAULT_PROXY_URL_TEMPLATE}",
    )


@pytest.mark.parametrize(
    ("variable", "raw", "field", "default", "warning"),
    [
        pytest.param(
            "RUNPOD_WAKE_MAX_POLLS", "0", "max_polls", 30, "is not an int in 1..1000; using 30", id="polls-zero"
        ),
        pytest.param(
            "RUNPOD_WAKE_MAX_POLLS", "5000", "max_polls", 30, "is not an int in 1..1000; using 30", id="polls-huge"
        ),
        pytest.param(
            "RUNPOD_WAKE_POLL_SECONDS",
            "0",
            "poll_interval_seconds",
            10.0,
            "is not a dot-decimal number of seconds in (0, 600]; using 10",
            id="poll-zero-would-spin",
        ),
        pytest.param(
            "RUNPOD_WAKE_POLL_SECONDS",
            "1,5",
            "poll_interval_seconds",
            10.0,
            "is not a dot-decimal number of seconds in (0, 600]; using 10",
            id="poll-comma",
        ),
        pytest.param(
            "RUNPOD_WAKE_MAX_RETRY_AFTER_SECONDS",
            "601",
            "max_retry_after_seconds",
            30.0,
            "is not a dot-decimal number of seconds in [0, 600]; using 30",
            id="retry-after-too-long",
        ),
    ],
)
def test_wake_bounds_are_overridable_but_an_invalid_value_keeps_the_default(
    variable: str, raw: str, field: str, default: float, warning: str
) -> None:
    """Tests and the demo shorten the bounds; a typo never unbounds a loop."""
    pod, warnings = only({variable: raw})
    assert getattr(pod, field) == default
    assert warnings == (f'{variable}="{raw}" {warning}',)


def test_retry_after_cap_may_be_zero() -> None:
    """Zero means a 429 is retried without waiting; the two-retry budget still bounds it."""
    pod, warnings = only({"RUNPOD_WAKE_MAX_RETRY_AFTER_SECONDS": "0"})
    assert (pod.max_retry_after_seconds, warnings) == (0.0, ())


def test_an_invalid_pod_name_keeps_qwen_with_a_warning() -> None:
    """The name is a URL path segment; one that cannot be routed is not accepted."""
    pod, warnings = only({"RUNPOD_POD_NAME": "qwen/evil"})
    assert pod.name == "qwen"
    assert warnings == ('RUNPOD_POD_NAME="qwen/evil" is not a pod name ([A-Za-z0-9][A-Za-z0-9._-]*); using qwen',)


def test_several_named_pods_read_prefixed_settings_then_unprefixed_then_defaults() -> None:
    """RUNPOD_PODS lists the names; RUNPOD_<NAME>_<SETTING> overrides the shared RUNPOD_<SETTING>."""
    result = parse_pod_options(
        {
            "RUNPOD_PODS": "qwen, llama-3",
            "RUNPOD_QWEN_VOLUME_ID": "vol-qwen",
            "RUNPOD_LLAMA_3_VOLUME_ID": "vol-llama",
            "RUNPOD_TEMPLATE_ID": "shared-template",
            "RUNPOD_LLAMA_3_MAX_PRICE_PER_HOUR": "2.50",
            "RUNPOD_MAX_PRICE_PER_HOUR": "1.20",
        }
    )
    assert result.warnings == ()
    qwen, llama = result.pods
    assert (qwen.name, qwen.volume_id, qwen.template_id, qwen.max_price_per_hour, qwen.min_vram_gb) == (
        "qwen",
        "vol-qwen",
        "shared-template",
        1.20,
        32,
    )
    assert (llama.name, llama.volume_id, llama.template_id, llama.max_price_per_hour) == (
        "llama-3",
        "vol-llama",
        "shared-template",
        2.50,
    )


def test_an_invalid_prefixed_value_keeps_the_default_and_names_the_prefixed_variable() -> None:
    """The warning names the variable that was actually read."""
    result = parse_pod_options(
        {"RUNPOD_PODS": "llama", "RUNPOD_LLAMA_MAX_PRICE_PER_HOUR": "1,50", "RUNPOD_MAX_PRICE_PER_HOUR": "2.00"}
    )
    assert result.pods[0].max_price_per_hour == 1.00
    assert result.warnings == (
        'RUNPOD_LLAMA_MAX_PRICE_PER_HOUR="1,50" is not a non-negative dot-decimal number; using 1.00',
    )


def test_a_shared_invalid_value_warns_once_not_once_per_pod() -> None:
    """One bad unprefixed variable is one line on startup."""
    result = parse_pod_options({"RUNPOD_PODS": "a,b", "RUNPOD_MIN_VRAM_GB": "many"})
    assert [p.min_vram_gb for p in result.pods] == [32, 32]
    assert result.warnings == ('RUNPOD_MIN_VRAM_GB="many" is not a non-negative int; using 32',)


@pytest.mark.parametrize(
    ("names", "kept", "warning"),
    [
        pytest.param("qwen,QWEN", ["qwen"], 'RUNPOD_PODS: "QWEN" duplicates "qwen"; ignored', id="case"),
        pytest.param("my-pod,my_pod", ["my-pod"], 'RUNPOD_PODS: "my_pod" duplicates "my-pod"; ignored', id="prefix"),
        pytest.param(
            "ok,bad/name",
            ["ok"],
            'RUNPOD_PODS: "bad/name" is not a pod name ([A-Za-z0-9][A-Za-z0-9._-]*); ignored',
            id="invalid",
        ),
    ],
)
def test_duplicate_or_invalid_names_keep_the_first_and_warn(names: str, kept: list[str], warning: str) -> None:
    """Two names that read the same variables would be one pod driven twice."""
    result = parse_pod_options({"RUNPOD_PODS": names})
    assert [p.name for p in result.pods] == kept
    assert result.warnings == (warning,)


def test_two_pods_on_one_volume_leave_the_second_unconfigured() -> None:
    """The volume is the pod's identity: two names on it would wake, stop and terminate each other's pods."""
    result = parse_pod_options({"RUNPOD_PODS": "qwen,llama", "RUNPOD_VOLUME_ID": "shared"})
    qwen, llama = result.pods
    assert (qwen.configured, llama.configured) == (True, False)
    assert result.warnings == (
        'RUNPOD_VOLUME_ID: volume "shared" already belongs to pod "qwen"; llama left unconfigured',
    )


def test_a_blank_pods_list_falls_back_to_the_single_pod_variables() -> None:
    """RUNPOD_PODS with no names configures the pod-control seed's one pod, with a warning when it was not empty."""
    result = parse_pod_options({"RUNPOD_PODS": " , ", "RUNPOD_POD_NAME": "mistral"})
    assert [p.name for p in result.pods] == ["mistral"]
    assert result.warnings == ('RUNPOD_PODS=" , " names no pod; using RUNPOD_POD_NAME',)


@pytest.mark.parametrize(
    ("asked", "found"),
    [
        pytest.param("qwen", "qwen", id="exact"),
        pytest.param("QWEN", "qwen", id="upper"),
        pytest.param("Llama-3", "llama-3", id="mixed"),
        pytest.param("mistral", None, id="unknown"),
        pytest.param("", None, id="blank"),
    ],
)
def test_find_pod_matches_the_friendly_name_case_insensitively(asked: str, found: str | None) -> None:
    """An unknown name is a 404 before any RunPod call."""
    pods = parse_pod_options({"RUNPOD_PODS": "qwen,llama-3"}).pods
    pod = find_pod(pods, asked)
    assert (pod.name if pod else None) == found


def test_criteria_carry_the_guards_to_gpu_selection() -> None:
    """The selection sees exactly the parsed datacenter, floor, cap and allowlist."""
    pod, _ = only({"RUNPOD_MAX_PRICE_PER_HOUR": "2.00", "RUNPOD_GPU_ALLOWLIST": "NVIDIA L40S"})
    crit = pod.gpu_criteria()
    assert (crit.datacenter_id, crit.min_vram_gb, crit.max_price_per_hour, crit.gpu_allowlist) == (
        "EU-RO-1",
        32,
        2.00,
        ("NVIDIA L40S",),
    )


@pytest.mark.parametrize(
    ("setting", "shared", "bad", "expected"),
    [
        pytest.param("MAX_PRICE_PER_HOUR", "0.50", "0,80", 0.50, id="price-cap-keeps-the-shared-cap"),
        pytest.param("MIN_VRAM_GB", "48", "many", 48, id="vram-floor-keeps-the-shared-floor"),
    ],
)
def test_an_invalid_per_pod_guard_falls_back_to_the_shared_value_not_the_code_default(
    setting, shared, bad, expected
) -> None:
    """A per-pod typo must not widen the operator's shared guard to the code default."""
    env = {"RUNPOD_PODS": "llama", f"RUNPOD_{setting}": shared, f"RUNPOD_LLAMA_{setting}": bad}
    result = parse_pod_options(env)
    (pod,) = result.pods
    assert getattr(pod, setting.lower()) == expected
    assert any(f"RUNPOD_LLAMA_{setting}" in w and f"RUNPOD_{setting}" in w for w in result.warnings)
