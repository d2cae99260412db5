"""Closing the billing of pods on the record that no longer exist (policy/wake/pod_gone.py carries the rule).

Asked after every readable volume lookup the controller makes for a view or for the monitor's observe, so a pod
terminated behind our back (RunPod's console, a simulator that restarted) stops billing on record at the first
reading that finds it gone, within one monitor tick. A store that cannot answer skips the check: the next reading
asks again.
"""

from __future__ import annotations

import logging

from thermostat.policy.common.pod_model import VolumeLookup
from thermostat.policy.wake.pod_gone import GONE_DETAIL, confirmed_gone, unlisted
from thermostat.providers.runpod.client import RunPodV2Client

from .repository import PodRepository

log = logging.getLogger("thermostat.pod_controller.gone")


async def billing_pods(records: PodRepository, pod_name: str) -> list[str] | None:
    """The pods of the name the record bills; None when the store cannot say (the check is skipped)."""
    try:
        return await records.billing_pod_ids(pod_name)
    except Exception as error:
        log.warning("pod %s: billing pods unreadable (%s); checked for gone next time", pod_name, type(error).__name__)
        return None


async def close_gone(
    client: RunPodV2Client, records: PodRepository, pod_name: str, volume: VolumeLookup, billing: list[str] | None
) -> None:
    """Record Gone for each pod the record bills that the lookup does not list and RunPod answers NotFound."""
    for pod_id in unlisted(volume, billing or ()):
        if not confirmed_gone(await client.observe_pod(pod_id)):
            continue
        try:
            recorded = await records.record_gone(pod_name, pod_id, GONE_DETAIL)
        except Exception as error:
            log.error("pod %s: %s is gone, NOT recorded (%s)", pod_name, pod_id, type(error).__name__)
            continue
        if recorded:
            log.warning("pod %s: %s is %s; its billing is closed on record", pod_name, pod_id, GONE_DETAIL)
