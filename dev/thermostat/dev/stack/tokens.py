"""The tokens the quick starts use: minted once per data directory, and kept there across restarts.

Every restart used to mint new ones, so every other shell holding the printed `export` lines got 401/403 with no
hint (issue 35). They are kept in `tokens.json` in the data directory (mode 0600: they are secrets); a fresh data
directory mints new ones. A token set before `make run` is the caller's own: used, never stored or printed.
The services are told where the stack's tokens come from (TOKEN_HINT_ENV), and a refused token's message says it,
never a token.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
from collections.abc import MutableMapping
from pathlib import Path

from thermostat.chassis.auth import TOKEN_HINT_ENV

TOKENS = {
    "RIG_OPERATOR_TOKEN": "pod start/stop and budget writes refuse everyone without it (fail closed)",
    "STRATA_POOL_TOKEN": "every pool job route answers 401 without it",
    "STRATA_POOL_ADMIN_TOKEN": "the catalogue and tenant budgets are written with it",
    "THERMOSTAT_INFERENCE_TOKEN": "the OpenAI endpoint (/openai/v1) answers 401 without it",
}
"""The tokens the quick starts use, each minted for the data directory when unset (why each is needed)."""

TOKENS_FILE = "tokens.json"


def tokens_path(data_dir: Path) -> Path:
    return data_dir / TOKENS_FILE


def _stored(path: Path) -> dict[str, str]:
    with contextlib.suppress(OSError, ValueError):
        kept = json.loads(path.read_text())
        if isinstance(kept, dict):
            return {k: v for k, v in kept.items() if k in TOKENS and isinstance(v, str) and v}
    return {}


def mint_tokens(environ: MutableMapping[str, str], data_dir: Path) -> list[str]:
    """Set each unset token of TOKENS in `environ`: the one kept in `data_dir`, else a fresh one (then kept); the
    names set (the stack's own, printed as `export` lines)."""
    path = tokens_path(data_dir)
    stored = _stored(path)
    ours = [name for name in TOKENS if not environ.get(name)]
    for name in ours:
        environ[name] = stored.setdefault(name, secrets.token_urlsafe(18))
    if ours:
        data_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.fchmod(fd, 0o600)  # a file made before by hand keeps no wider mode
        with os.fdopen(fd, "w") as out:
            json.dump(stored, out, indent=2)
    environ[TOKEN_HINT_ENV] = token_hint(path)
    return ours


def token_hint(path: Path) -> str:
    """Where this stack's tokens come from, for a refusal's message: the path, never a token."""
    return (
        f"make run printed this stack's tokens as export lines at start and keeps them in {path} "
        "(a token set in the environment before make run is used instead)"
    )
