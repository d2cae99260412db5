"""The pod controller's options, read once from the environment (pod-control seed: Config, RunPodWakeOptions).

Invalid values never widen a guard: an unparseable or out-of-range value keeps its default and adds one
line to `warnings` (`RUNPOD_MIN_VRAM_GB="many" is not a non-negative int; using 32`) for the service to log
at Warning on start-up. The price cap is a dot decimal with no sign, exponent or thousands separator, so a
European "1,50" is rejected instead of being read as 150 and admitting every GPU (the cap is the wake's
single point of failure, #2093). Numbers are ASCII digits only: Python's int()/float() would also accept
"2_4", "+8", "1e3", "inf" and non-ASCII digits.

One pod (as in the pod-control seed): RUNPOD_POD_NAME plus the unprefixed RUNPOD_<SETTING> variables.
Several pods: RUNPOD_PODS="qwen,llama-3" names them; each setting is read from RUNPOD_<NAME>_<SETTING>
(NAME upper-cased, every non-alphanumeric character an underscore: RUNPOD_LLAMA_3_VOLUME_ID), else the
unprefixed RUNPOD_<SETTING>, else the default. Names that read the same variables are duplicates (the first
is kept). A blank value counts as unset.

The volume is a pod's only identity, so two pods on one volume would wake, stop and terminate each other's
pods: a pod whose volume already belongs to an earlier pod is left unconfigured, with a warning.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import TypeVar

DEFAULT_POD_NAME = "qwen"
DEFAULT_DATACENTER_ID = "EU-RO-1"
DEFAULT_MIN_VRAM_GB = 32
DEFAULT_MAX_PRICE_PER_HOUR = 1.00
DEFAULT_POD_PORT = 8000
DEFAULT_PROXY_URL_TEMPLATE = "https://{podId}-{port}.proxy.runpod.net"
DEFAULT_MAX_POLLS = 30
DEFAULT_POLL_INTERVAL_SECONDS = 10.0
DEFAULT_MAX_RETRY_AFTER_SECONDS = 30.0

MAX_POLLS_LIMIT = 1000
MAX_SECONDS_LIMIT = 600.0

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")
_NAME_RULE = "[A-Za-z0-9][A-Za-z0-9._-]*"
_DIGITS = re.compile(r"[0-9]{1,18}")  # bounded: int() refuses a literal past 4,300 digits
_DOT_DECIMAL = re.compile(r"[0-9]+(?:\.[0-9]*)?|\.[0-9]+")

T = TypeVar("T")


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuCriteria:
    """GpuCriteria are a pod's guards that `wake.gpu_selection` judges the catalogue by; an empty allowlist
    means none is set. They live with the options so that the options need nothing from the wake."""

    datacenter_id: str
    min_vram_gb: int
    max_price_per_hour: float
    gpu_allowlist: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class PodOptions:
    """PodOptions configure one named pod. `name` is the friendly route name, never a RunPod id."""

    name: str = DEFAULT_POD_NAME
    volume_id: str = ""
    template_id: str = ""
    datacenter_id: str = DEFAULT_DATACENTER_ID
    min_vram_gb: int = DEFAULT_MIN_VRAM_GB
    max_price_per_hour: float = DEFAULT_MAX_PRICE_PER_HOUR
    gpu_allowlist: tuple[str, ...] = ()
    pod_port: int = DEFAULT_POD_PORT
    proxy_url_template: str = DEFAULT_PROXY_URL_TEMPLATE
    max_polls: int = DEFAULT_MAX_POLLS
    poll_interval_seconds: float = DEFAULT_POLL_INTERVAL_SECONDS
    max_retry_after_seconds: float = DEFAULT_MAX_RETRY_AFTER_SECONDS
    # the model name the pod's engine serves (RUNPOD_<NAME>_SERVED_MODEL); empty: the gateway reads /v1/models
    served_model: str = ""

    @property
    def configured(self) -> bool:
        """A pod without a volume has no identity; the service also requires the API key."""
        return bool(self.volume_id.strip())

    @property
    def can_create(self) -> bool:
        """Without a template the wake refuses to create a replacement."""
        return bool(self.template_id.strip())

    def proxy_url(self, pod_id: str) -> str:
        """The pod's vLLM proxy URL (metrics scrape and proxyUrl)."""
        return self.proxy_url_template.replace("{podId}", pod_id).replace("{port}", str(self.pod_port))

    def gpu_criteria(self) -> GpuCriteria:
        return GpuCriteria(
            datacenter_id=self.datacenter_id,
            min_vram_gb=self.min_vram_gb,
            max_price_per_hour=self.max_price_per_hour,
            gpu_allowlist=self.gpu_allowlist,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class PodOptionsResult:
    pods: tuple[PodOptions, ...]
    warnings: tuple[str, ...]


def find_pod(pods: Iterable[PodOptions], name: str) -> PodOptions | None:
    """The pod whose friendly name matches case-insensitively, or None (the routes answer 404)."""
    wanted = name.strip().casefold()
    return next((pod for pod in pods if wanted and pod.name.casefold() == wanted), None)


def parse_pod_options(env: Mapping[str, str]) -> PodOptionsResult:
    """Read every pod's options; each invalid value keeps its default and adds one warning line."""
    warnings: list[str] = []
    names = _pod_names(env, warnings)
    if names is None:
        rule = f"is not a pod name ({_NAME_RULE}); using {DEFAULT_POD_NAME}"
        name = _read(env, None, "POD_NAME", DEFAULT_POD_NAME, _parse_name, rule, warnings)
        pods = [_read_pod(env, name, None, warnings)]
    else:
        pods = [_read_pod(env, name, _prefix(name), warnings) for name in names]
    pods = _one_pod_per_volume(env, pods, warnings)
    return PodOptionsResult(pods=tuple(pods), warnings=tuple(dict.fromkeys(warnings)))


def _pod_names(env: Mapping[str, str], warnings: list[str]) -> list[str] | None:
    raw = env.get("RUNPOD_PODS", "")
    if not raw.strip():
        return None
    kept: dict[str, str] = {}
    for name in (part.strip() for part in raw.split(",")):
        if not name:
            continue
        if not _NAME.fullmatch(name):
            warnings.append(f"RUNPOD_PODS: {_quote(name)} is not a pod name ({_NAME_RULE}); ignored")
        elif _prefix(name) in kept:
            warnings.append(f"RUNPOD_PODS: {_quote(name)} duplicates {_quote(kept[_prefix(name)])}; ignored")
        else:
            kept[_prefix(name)] = name
    if not kept:
        warnings.append(f"RUNPOD_PODS={_quote(raw)} names no pod; using RUNPOD_POD_NAME")
        return None
    return list(kept.values())


def _read_pod(env: Mapping[str, str], name: str, prefix: str | None, warnings: list[str]) -> PodOptions:
    def read(
        setting: str,
        default: T,
        parse: Callable[[str], T | None],
        rule: str = "",
        narrower: Callable[[T, T], T] | None = None,
    ) -> T:
        return _read(env, prefix, setting, default, parse, rule, warnings, narrower)

    seconds = "is not a dot-decimal number of seconds in"
    return PodOptions(
        name=name,
        volume_id=read("VOLUME_ID", "", str.strip),
        template_id=read("TEMPLATE_ID", "", str.strip),
        datacenter_id=read("DATACENTER_ID", DEFAULT_DATACENTER_ID, str.strip),
        min_vram_gb=read(
            "MIN_VRAM_GB",
            DEFAULT_MIN_VRAM_GB,
            _int_in(0, None),
            f"is not a non-negative int; using {DEFAULT_MIN_VRAM_GB}",
            max,  # a higher VRAM floor admits fewer cards
        ),
        max_price_per_hour=read(
            "MAX_PRICE_PER_HOUR",
            DEFAULT_MAX_PRICE_PER_HOUR,
            _decimal_in(0.0, None, allow_zero=True),
            f"is not a non-negative dot-decimal number; using {DEFAULT_MAX_PRICE_PER_HOUR:.2f}",
            min,  # a lower price cap admits fewer cards
        ),
        gpu_allowlist=read("GPU_ALLOWLIST", (), _allowlist),
        pod_port=read(
            "POD_PORT", DEFAULT_POD_PORT, _int_in(1, 65535), f"is not a port in 1..65535; using {DEFAULT_POD_PORT}"
        ),
        proxy_url_template=read(
            "PROXY_URL_TEMPLATE",
            DEFAULT_PROXY_URL_TEMPLATE,
            _proxy_template,
            f"is not an http(s) URL template containing {{podId}}; using {DEFAULT_PROXY_URL_TEMPLATE}",
        ),
        max_polls=read(
            "WAKE_MAX_POLLS",
            DEFAULT_MAX_POLLS,
            _int_in(1, MAX_POLLS_LIMIT),
            f"is not an int in 1..{MAX_POLLS_LIMIT}; using {DEFAULT_MAX_POLLS}",
        ),
        poll_interval_seconds=read(
            "WAKE_POLL_SECONDS",
            DEFAULT_POLL_INTERVAL_SECONDS,
            _decimal_in(0.0, MAX_SECONDS_LIMIT, allow_zero=False),
            f"{seconds} (0, {MAX_SECONDS_LIMIT:g}]; using {DEFAULT_POLL_INTERVAL_SECONDS:g}",
        ),
        max_retry_after_seconds=read(
            "WAKE_MAX_RETRY_AFTER_SECONDS",
            DEFAULT_MAX_RETRY_AFTER_SECONDS,
            _decimal_in(0.0, MAX_SECONDS_LIMIT, allow_zero=True),
            f"{seconds} [0, {MAX_SECONDS_LIMIT:g}]; using {DEFAULT_MAX_RETRY_AFTER_SECONDS:g}",
        ),
        served_model=read("SERVED_MODEL", "", str.strip),
    )


def _read(
    env: Mapping[str, str],
    prefix: str | None,
    setting: str,
    default: T,
    parse: Callable[[str], T | None],
    rule: str,
    warnings: list[str],
    narrower: Callable[[T, T], T] | None = None,
) -> T:
    """The first non-blank of RUNPOD_<prefix>_<setting>, RUNPOD_<setting>; invalid → default + `rule` line."""
    shared = f"RUNPOD_{setting}"
    if prefix:
        variable = f"RUNPOD_{prefix}_{setting}"
        raw = env.get(variable, "")
        if raw.strip():
            value = parse(raw.strip())
            if value is not None:
                return value
            # An invalid per-pod guard keeps the narrower of the operator's shared value and the code
            # default: either alone could widen it (a shared 0.50 cap must not become 1.00 for one pod, and a
            # shared 2.00 must not replace the 1.00 default when the pod's own "1,50" meant less).
            shared_raw = env.get(shared, "")
            shared_value = parse(shared_raw.strip()) if shared_raw.strip() else None
            if shared_value is not None and narrower is not None:
                shared_value = shared_value if narrower(shared_value, default) == shared_value else None
            if shared_value is not None:
                warnings.append(f"{variable}={_quote(raw)} is invalid; using {shared}={_quote(shared_raw.strip())}")
                return shared_value
            warnings.append(f"{variable}={_quote(raw)} {rule}")
            return default
    raw = env.get(shared, "")
    if not raw.strip():
        return default
    value = parse(raw.strip())
    if value is None:
        warnings.append(f"{shared}={_quote(raw)} {rule}")
        return default
    return value


def _one_pod_per_volume(env: Mapping[str, str], pods: list[PodOptions], warnings: list[str]) -> list[PodOptions]:
    owners: dict[str, str] = {}
    kept: list[PodOptions] = []
    for pod in pods:
        volume = pod.volume_id
        if volume and volume in owners:
            variable = _source(env, pod.name, "VOLUME_ID")
            warnings.append(
                f"{variable}: volume {_quote(volume)} already belongs to pod {_quote(owners[volume])}; "
                f"{pod.name} left unconfigured"
            )
            pod = replace(pod, volume_id="")
        elif volume:
            owners[volume] = pod.name
        kept.append(pod)
    return kept


def _source(env: Mapping[str, str], name: str, setting: str) -> str:
    """The variable a pod's setting was read from, for the warning."""
    prefixed = f"RUNPOD_{_prefix(name)}_{setting}"
    return prefixed if env.get(prefixed, "").strip() else f"RUNPOD_{setting}"


def _prefix(name: str) -> str:
    return re.sub(r"[^A-Z0-9]", "_", name.upper())


def _parse_name(raw: str) -> str | None:
    return raw if _NAME.fullmatch(raw) else None


def _int_in(low: int, high: int | None) -> Callable[[str], int | None]:
    def parse(raw: str) -> int | None:
        if not _DIGITS.fullmatch(raw):
            return None
        value = int(raw)
        return value if value >= low and (high is None or value <= high) else None

    return parse


def _decimal_in(low: float, high: float | None, *, allow_zero: bool) -> Callable[[str], float | None]:
    def parse(raw: str) -> float | None:
        if not _DOT_DECIMAL.fullmatch(raw):
            return None
        value = float(raw)
        if not math.isfinite(value) or value < low or (value == 0 and not allow_zero):
            return None
        return value if high is None or value <= high else None

    return parse


def _allowlist(raw: str) -> tuple[str, ...]:
    seen: dict[str, str] = {}
    for entry in (part.strip() for part in raw.split(",")):
        if entry and entry.casefold() not in seen:
            seen[entry.casefold()] = entry
    return tuple(seen.values())


def _proxy_template(raw: str) -> str | None:
    return raw if "{podId}" in raw and raw.startswith(("https://", "http://")) else None


def _quote(raw: str) -> str:
    # JSON quoting escapes newlines and quotes, so a hostile value can't forge a second log line.
    return json.dumps(raw, ensure_ascii=False)
