"""A replica's identity: who holds a lease or ticked a pod, unique per process across hosts and restarts."""

from __future__ import annotations

import os
import socket
import uuid


def replica_id() -> str:
    """host:pid:random — the random part tells apart a restarted process that got the same pid."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
