"""vLLM's Prometheus /metrics exposition, as the simulated pod serves it.

The styles cover what a scraper meets on the floating vllm/vllm-openai:latest tag (pod-control seed, #2075): "recent"
(V1: engine + model_name labels, every finished_reason pre-created so zero series appear, plus the
prometheus_client *_created gauges a parser must ignore), "legacy" (V0: model_name only) and
"gauges-only" (an older vLLM without the work counters, which must still read idle on gauges alone).
"""

from __future__ import annotations

from dataclasses import dataclass, field

EXPOSITION_STYLES = ("recent", "legacy", "gauges-only")
FINISHED_REASONS = ("stop", "length", "abort", "error", "repetition")
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


@dataclass(slots=True, kw_only=True)
class VllmCounters:
    """VllmCounters is one vLLM process's state; a restarted process starts again from zero."""

    started_at: float
    running: int = 0
    waiting: int = 0
    prompt_tokens: int = 0
    generation_tokens: int = 0
    success: dict[str, int] = field(default_factory=lambda: dict.fromkeys(FINISHED_REASONS, 0))

    def record_turn(self, *, prompt_tokens: int, generation_tokens: int, finished_reason: str = "stop") -> None:
        if finished_reason not in self.success:
            raise ValueError(f"finished_reason must be one of {FINISHED_REASONS}")
        if prompt_tokens < 0 or generation_tokens < 0:
            raise ValueError("token counts are never negative")
        self.prompt_tokens += prompt_tokens
        self.generation_tokens += generation_tokens
        self.success[finished_reason] += 1

    def to_json(self) -> dict[str, object]:
        return {
            "running": self.running,
            "waiting": self.waiting,
            "promptTokens": self.prompt_tokens,
            "generationTokens": self.generation_tokens,
            "requestSuccess": dict(self.success),
        }


def go_float(value: float) -> str:
    """go_float formats a sample the way prometheus_client does (Go switches to exponents sooner)."""
    text = repr(float(value))
    dot = text.find(".")
    if value > 0 and dot > 6:
        mantissa = f"{text[0]}.{text[1:dot]}{text[dot + 1 :]}".rstrip("0.")
        return f"{mantissa}e+0{dot - 1}"
    return text


def _labels(pairs: dict[str, str]) -> str:
    # prometheus_client writes labels sorted by name.
    return "{" + ",".join(f'{name}="{value}"' for name, value in sorted(pairs.items())) + "}"


def _family(
    lines: list[str], name: str, kind: str, help_text: str, samples: list[tuple[dict[str, str], float]]
) -> None:
    lines.append(f"# HELP {name} {help_text}")
    lines.append(f"# TYPE {name} {kind}")
    lines.extend(f"{name}{_labels(labels)} {go_float(value)}" for labels, value in samples)


def render(counters: VllmCounters, *, model_name: str, style: str = "recent") -> str:
    if style not in EXPOSITION_STYLES:
        raise ValueError(f"style must be one of {EXPOSITION_STYLES}")
    base = {"model_name": model_name} if style == "legacy" else {"engine": "0", "model_name": model_name}
    lines: list[str] = []
    _family(
        lines,
        "vllm:num_requests_running",
        "gauge",
        "Number of requests in model execution batches.",
        [(base, counters.running)],
    )
    _family(
        lines,
        "vllm:num_requests_waiting",
        "gauge",
        "Number of requests waiting to be processed.",
        [(base, counters.waiting)],
    )
    _family(
        lines,
        "vllm:kv_cache_usage_perc",
        "gauge",
        "KV-cache usage. 1 means 100 percent usage.",
        [(base, 0.12 if counters.running else 0.0)],
    )
    if style != "gauges-only":
        reasons = [({**base, "finished_reason": reason}, float(n)) for reason, n in counters.success.items()]
        counter_families = [
            ("vllm:prompt_tokens", "Number of prefill tokens processed.", [(base, float(counters.prompt_tokens))]),
            (
                "vllm:generation_tokens",
                "Number of generation tokens processed.",
                [(base, float(counters.generation_tokens))],
            ),
            ("vllm:request_success", "Count of successfully processed requests.", reasons),
            ("vllm:num_preemptions", "Cumulative number of preemption from the engine.", [(base, 0.0)]),
        ]
        for name, help_text, samples in counter_families:
            _family(lines, f"{name}_total", "counter", help_text, samples)
            if style == "recent":
                _family(
                    lines,
                    f"{name}_created",
                    "gauge",
                    help_text,
                    [(labels, counters.started_at) for labels, _ in samples],
                )
    return "\n".join(lines) + "\n"
