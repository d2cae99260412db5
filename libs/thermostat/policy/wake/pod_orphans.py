"""Orphan sweep for model pods (issue 12): which live pods of the account the pod controller made and no
configured pod manages any more.

The controller names every pod it creates `{pod name}-{UTC stamp}` (`qwen-20261130T154501Z`) and mounts it
on that pod's network volume; the wake and the idle monitor act on every pod mounting a configured volume,
whoever made it. So:

- a listed pod whose name is not a known pod name followed by the stamp is not ours (a hand-made pod, the
  template's original, a pool machine) and is never an orphan;
- ours and mounting the configured volume of the pod it is named after: managed (a wake ends the stale
  ones, the monitor stops the idle one), never an orphan;
- ours, named after a pod whose volume is blank (configuration in progress, "before the secret"): left to
  the operator, never an orphan;
- every other one of ours is an orphan: named after a pod no longer configured (its name is known from the
  store's billable actions) or mounting another volume than its pod's (the volume was changed, or a crashed
  create placed it with an older configuration). No wake and no monitor will ever stop it.

"Unknown to the store" (the issue's words) is read as "unknown to every wake and monitor": the store's
actions may hold the pod's id and still nobody would stop it.

Like the pool's sweep, an orphan is terminated only once two consecutive passes found it (`to_terminate`):
a wake creating a replacement across a configuration reload can list a pod under the old volume once.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from thermostat.policy.common.pod_model import ListedPod

_STAMP = re.compile(r"-\d{8}T\d{6}Z\Z")


@dataclass(frozen=True, slots=True, kw_only=True)
class PodOrphan:
    """PodOrphan is a live pod named as the controller names its creates that no configured pod manages."""

    pod_id: str
    name: str
    owner: str  # the pod name it is named after
    status: str
    volume_ids: tuple[str, ...]
    reason: str


def created_for(name: str, known_names: Iterable[str]) -> str | None:
    """The known pod name `name` is `{pod name}-{stamp}` of, or None when the name is not the controller's."""
    match = _STAMP.search(name)
    if match is None:
        return None
    owner = name[: match.start()]
    return owner if owner and owner in set(known_names) else None


def find_pod_orphans(
    *, listed: Iterable[ListedPod], volumes: Mapping[str, str], known_names: Iterable[str]
) -> tuple[PodOrphan, ...]:
    """The listed pods that are orphans. `volumes`: each configured pod name → its volume id ("" when blank);
    `known_names`: pod names the store's actions hold (pods configured once)."""
    names = set(volumes) | set(known_names)
    orphans: list[PodOrphan] = []
    for pod in listed:
        owner = created_for(pod.name, names)
        if owner is None:
            continue
        if owner in volumes:
            volume = volumes[owner]
            if not volume or volume in pod.volume_ids:
                continue
            reason = f"mounts {', '.join(pod.volume_ids) or 'no volume'}, not {owner}'s volume {volume}"
        else:
            reason = f"pod {owner} is no longer configured"
        orphans.append(
            PodOrphan(
                pod_id=pod.id,
                name=pod.name,
                owner=owner,
                status=pod.status,
                volume_ids=pod.volume_ids,
                reason=reason,
            )
        )
    return tuple(orphans)


def to_terminate(*, current: Iterable[PodOrphan], previous: Iterable[PodOrphan]) -> tuple[PodOrphan, ...]:
    """The orphans of this pass that the previous pass found too (same pod id): only these are ended."""
    seen = {orphan.pod_id for orphan in previous}
    return tuple(orphan for orphan in current if orphan.pod_id in seen)
