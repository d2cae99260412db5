"""`make run ENGINE=vllm`: the variable read strictly, and passed to the RunPod simulator with a log directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from thermostat.dev.stack.supervisor import Stack, StackConfig, engine_from


@pytest.mark.parametrize(
    ("value", "engine"),
    [
        pytest.param(None, "simulated", id="unset-simulated"),
        pytest.param("", "simulated", id="empty-simulated"),
        pytest.param("vllm", "vllm", id="vllm"),
        pytest.param(" VLLM ", "vllm", id="any-case"),
        pytest.param("simulated", "simulated", id="named-simulated"),
    ],
)
def test_the_engine_from_the_environment(value: str | None, engine: str) -> None:
    assert engine_from(value) == engine


def test_an_unknown_engine_is_refused_naming_the_variable_and_the_choices() -> None:
    """A typo stops the start rather than running the simulated engine unnoticed."""
    with pytest.raises(ValueError, match=r"ENGINE: 'vlm' is not one of simulated, vllm"):
        engine_from("vlm")


def test_the_simulator_runs_a_real_engine_only_when_asked(tmp_path: Path) -> None:
    """--engine vllm with the engines' output under the data directory; nothing added otherwise."""
    assert Stack(StackConfig(data_dir=tmp_path))._engine_args() == []
    assert Stack(StackConfig(data_dir=tmp_path, engine="vllm"))._engine_args() == [
        "--engine", "vllm", "--engine-log-dir", str(tmp_path / "engines"),
    ]  # fmt: skip


def test_the_summary_says_which_engine_the_pods_run(tmp_path: Path) -> None:
    """The simulated one points at ENGINE=vllm; the real one at its logs."""
    simulated, real = Stack(StackConfig(data_dir=tmp_path)), Stack(StackConfig(data_dir=tmp_path, engine="vllm"))
    for stack in (simulated, real):
        stack.simulator_url = "http://127.0.0.1:9100"
    assert "simulated: a canned answer (make run ENGINE=vllm: a real vLLM)" in simulated.summary()
    assert f"a real vLLM per RUNNING pod (40-60 s to load; its output in {tmp_path / 'engines'})" in real.summary()
