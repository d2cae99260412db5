"""`make run`'s tokens: kept in the data directory across restarts, new in a fresh one, the file only the user's,
and the services told where they come from without a token (issue 35: every restart minted new ones)."""

from __future__ import annotations

import stat
from pathlib import Path

from thermostat.chassis.auth import TOKEN_HINT_ENV
from thermostat.dev.stack.tokens import TOKENS, mint_tokens, tokens_path


def test_a_restart_on_the_same_data_directory_keeps_the_tokens(tmp_path: Path) -> None:
    """Two runs, each with a fresh environment: the second prints what the first printed."""
    first: dict[str, str] = {}
    second: dict[str, str] = {}
    assert mint_tokens(first, tmp_path) == list(TOKENS)
    assert mint_tokens(second, tmp_path) == list(TOKENS)
    assert {n: second[n] for n in TOKENS} == {n: first[n] for n in TOKENS}


def test_a_fresh_data_directory_mints_new_tokens(tmp_path: Path) -> None:
    first: dict[str, str] = {}
    other: dict[str, str] = {}
    mint_tokens(first, tmp_path / "a")
    mint_tokens(other, tmp_path / "b")
    assert all(first[name] != other[name] for name in TOKENS)


def test_the_tokens_file_is_readable_by_its_owner_only(tmp_path: Path) -> None:
    """Mode 0600, also over a file someone made wider."""
    path = tokens_path(tmp_path)
    path.write_text("{}")
    path.chmod(0o644)
    mint_tokens({}, tmp_path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_a_token_set_before_make_run_is_used_and_never_stored(tmp_path: Path) -> None:
    environ = {"STRATA_POOL_TOKEN": "callers-own"}
    minted = mint_tokens(environ, tmp_path)
    assert "STRATA_POOL_TOKEN" not in minted and environ["STRATA_POOL_TOKEN"] == "callers-own"
    assert "callers-own" not in tokens_path(tmp_path).read_text()


def test_the_services_hint_names_the_file_and_no_token(tmp_path: Path) -> None:
    """What a refused token's message ends with."""
    environ: dict[str, str] = {}
    mint_tokens(environ, tmp_path)
    hint = environ[TOKEN_HINT_ENV]
    assert str(tokens_path(tmp_path)) in hint
    assert not any(environ[name] in hint for name in TOKENS)
