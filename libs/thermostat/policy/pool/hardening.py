"""A Docker machine's confinement: the strict defaults every container gets, and what a type may relax (issue 36).

A pool machine runs a tenant's notebook cells, code nobody reviewed. Every container the Docker backend creates
therefore has all capabilities dropped, `no-new-privileges`, a read-only root filesystem with a tmpfs at /tmp for
scratch, a pids limit and a non-root user, and no Docker socket is ever mounted (the backend mounts nothing).
A machine type relaxes only what its workload needs, by named catalogue fields, each validated here:
- `writable_root` (false): true leaves the root filesystem writable (an image that writes beside its code).
- `scratch_mb` (64): the size of the /tmp tmpfs, counted against the container's memory.
- `pids_limit` (256): processes and threads together; a fork bomb meets it, not the host's.
- `user` (`65534:65534`, nobody): `user[:group]`, by name or number; never root (0), by name or number: a type
  whose image needs root is run elsewhere, not here.
- `capabilities_add` ([]): added back after dropping all, only from Docker's own default set
  (`ADDABLE_CAPABILITIES`): a type may get back what a plain `docker run` grants, never more (no SYS_ADMIN,
  NET_ADMIN, SYS_PTRACE …).
- `runtime` (unset: the daemon's default, runc): the OCI runtime (`runsc` for gVisor, `kata-runtime`); a PUT
  naming one the daemon does not list in `GET /info` is refused (`runtime_refusal`).
Each check returns the refusal's message, or None: machine_type.py names the entry and the field.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from typing import Final

DEFAULT_WRITABLE_ROOT: Final = False
DEFAULT_SCRATCH_MB: Final = 64
DEFAULT_PIDS_LIMIT: Final = 256
DEFAULT_USER: Final = "65534:65534"
SCRATCH_PATH: Final = "/tmp"  # noqa: S108 - the container's own tmpfs, not this host's /tmp
MAX_SCRATCH_MB: Final = 1024 * 1024

# Docker's default capability set (moby's oci/caps/defaults.go): what `docker run` grants without --cap-add.
ADDABLE_CAPABILITIES: Final = frozenset(
    {
        "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD", "NET_BIND_SERVICE",
        "NET_RAW", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT",
    }
)  # fmt: skip

_ACCOUNT = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,31}"
_USER = re.compile(rf"({_ACCOUNT})(?::({_ACCOUNT}))?")
_RUNTIME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")
_ROOT = frozenset({"root", "0"})


def user_refusal(value: str) -> str | None:
    """`user[:group]` by name or number, neither of them root."""
    matched = _USER.fullmatch(value)
    if matched is None:
        return "must be user or user:group, each a name or number (letters, digits, '_', '.', '-')"
    user, group = matched.group(1), matched.group(2)
    if user in _ROOT or user.lstrip("0") == "" or group in _ROOT or (group is not None and group.lstrip("0") == ""):
        return "must not be root (uid or gid 0): machines run untrusted code as a non-root user"
    return None


def capability_refusal(value: str) -> str | None:
    """A capability name from Docker's default set, without the CAP_ prefix."""
    if value in ADDABLE_CAPABILITIES:
        return None
    return f"may add only capabilities of Docker's default set ({', '.join(sorted(ADDABLE_CAPABILITIES))})"


def runtime_name_refusal(value: str) -> str | None:
    if _RUNTIME.fullmatch(value):
        return None
    return "must be 1-63 letters, digits, '.', '_' or '-', starting with a letter or digit"


def runtime_refusal(runtime: str, listed: Collection[str]) -> str | None:
    """Why the daemon cannot run a container with `runtime` (it is not among the `Runtimes` its `GET /info`
    lists), else None."""
    if runtime in listed:
        return None
    names = ", ".join(sorted(listed)) or "none"
    return f"the Docker daemon has no runtime {runtime!r}; it has: {names}"


def scratch_mount(scratch_mb: int) -> dict[str, str]:
    """The HostConfig `Tmpfs` of a machine: /tmp, bounded, no devices or setuid (executable: a cell's own
    compiled extension may be loaded from it)."""
    return {SCRATCH_PATH: f"rw,nosuid,nodev,size={scratch_mb}m"}
