"""What a provider said, made safe to record on a job: bounded, and scrubbed of the key and the token.

Every backend's refusal names the machine and carries the provider's own words ("No such image: …", RunPod's
problem detail, Fly's `error`), because that is what an operator needs to fix the catalogue. A provider can
echo what it was sent (an env listing, a header in a proxy page), so every secret this backend holds is
replaced before the text is cut to `MAX_PROVIDER_MESSAGE` characters.
"""

from __future__ import annotations

from collections.abc import Iterable

from thermostat.providers.pool.backend import BackendError

MAX_PROVIDER_MESSAGE = 300
SCRUBBED = "<redacted>"


def provider_message(text: str, *, secrets: Iterable[str]) -> str:
    """The provider's text on one line, every secret replaced, cut to MAX_PROVIDER_MESSAGE characters."""
    for secret in sorted((s for s in secrets if s), key=len, reverse=True):
        text = text.replace(secret, SCRUBBED)
    text = " ".join(text.split())
    if len(text) > MAX_PROVIDER_MESSAGE:
        text = text[: MAX_PROVIDER_MESSAGE - 1] + "…"
    return text


def provider_error(provider: str, subject: str, what: str, message: str, *, secrets: Iterable[str]) -> BackendError:
    """BackendError `{provider}: {subject}: {what}: {message}` with the message scrubbed and bounded.

    `subject` names the machine ("machine 3f2c… (type cpu-small)" or "container 9ab1…"); `what` the call.
    """
    said = provider_message(message, secrets=secrets) if message else "no message"
    return BackendError(f"{provider}: {subject}: {what}: {said}")


def machine_subject(machine_id: str, machine_type: str) -> str:
    return f"machine {machine_id} (type {machine_type})"
