"""What a provider said, made safe to record on a job: bounded, and scrubbed of the key and the token.

Every backend's refusal names the machine and carries the provider's own words ("No such image: …", RunPod's
problem detail, Fly's `error`), because that is what an operator needs to fix the catalogue. A provider can
echo what it was sent (an env listing, a header in a proxy page), so every secret this backend holds is
replaced before the text is cut to `MAX_PROVIDER_MESSAGE` characters.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import httpx

from thermostat.providers.pool.backend import BackendError

MAX_PROVIDER_MESSAGE = 300
SCRUBBED = "<redacted>"
TAIL_LINES = 5
"""The most lines of a dead machine's output a boot failure repeats (its last ones: the error is at the end)."""
MAX_TAIL_CHARS = 600
SECRET_MIN_CHARS = 8
"""An env value this long or longer is scrubbed from a machine's output; shorter ones ("0", "sleep") are settings,
and replacing them would garble every line."""


def provider_message(text: str, *, secrets: Iterable[str]) -> str:
    """The provider's text on one line, every secret replaced, cut to MAX_PROVIDER_MESSAGE characters."""
    for secret in sorted((s for s in secrets if s), key=len, reverse=True):
        text = text.replace(secret, SCRUBBED)
    text = " ".join(text.split())
    if len(text) > MAX_PROVIDER_MESSAGE:
        text = text[: MAX_PROVIDER_MESSAGE - 1] + "…"
    return text


def output_tail(output: bytes, *, secrets: Iterable[str], lines: int = TAIL_LINES) -> str:
    """The last `lines` non-blank lines of a machine's output, each secret replaced, joined by ` | ` and cut from
    the front to MAX_TAIL_CHARS (the end of a traceback says what went wrong); empty for no output."""
    text = output.decode("utf-8", errors="replace")
    for secret in sorted((s for s in secrets if s), key=len, reverse=True):
        text = text.replace(secret, SCRUBBED)
    kept = [" ".join(line.split()) for line in text.splitlines() if line.strip()][-lines:]
    joined = " | ".join(kept)
    if len(joined) > MAX_TAIL_CHARS:
        joined = "…" + joined[-(MAX_TAIL_CHARS - 1) :]
    return joined


def machine_secrets(worker_token: str, env: Mapping[str, str]) -> tuple[str, ...]:
    """What a machine's output must not repeat: its worker token and every env value that could be a credential."""
    return (worker_token, *(value for value in env.values() if len(value) >= SECRET_MIN_CHARS))


def ended_reason(exit_code: int | None, tail: str) -> str:
    """A dead machine's boot failure: how its process ended and what it said last."""
    ended = "exited" if exit_code is None else f"exited with code {exit_code}"
    return f"the machine {ended} before answering its health check" + (f"; its last output: {tail}" if tail else "")


def provider_error(provider: str, subject: str, what: str, message: str, *, secrets: Iterable[str]) -> BackendError:
    """BackendError `{provider}: {subject}: {what}: {message}` with the message scrubbed and bounded.

    `subject` names the machine ("machine 3f2c… (type cpu-small)" or "container 9ab1…"); `what` the call.
    """
    said = provider_message(message, secrets=secrets) if message else "no message"
    return BackendError(f"{provider}: {subject}: {what}: {said}")


def machine_subject(machine_id: str, machine_type: str) -> str:
    return f"machine {machine_id} (type {machine_type})"


def json_object(response: httpx.Response) -> dict[str, Any]:
    """The answer's body when it is a JSON object, else {} (an error page, an empty body, a list)."""
    try:
        body = response.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def refusal(
    provider: str, response: httpx.Response, subject: str, what: str, *, said_in: str, secrets: Iterable[str]
) -> BackendError:
    """A refusing answer as `provider_error`: the provider's words from the body's `said_in` field (Docker's
    `message`, Fly's `error`), else the whole body when that field is missing or empty."""
    said = json_object(response).get(said_in)
    text = said if isinstance(said, str) and said else response.text
    return provider_error(provider, subject, f"{what} HTTP {response.status_code}", text, secrets=secrets)
