"""A tenant's Docker network: one per tenant and pool, internal (no route out, none to another tenant's), named and
labelled so any pool process finds it again after a restart (issue 36).

- The name is `{pool}-tenant-{key}`, `key` the first 11 hex digits of sha256(pool, tenant): a tenant id is the
  caller's text, never part of a name or a filter; the `thermostat.tenant_network` label carries the key, the
  `thermostat.tenant` label the tenant id (for a reader of `docker network ls`).
- The bridge's interface is `thtn{key}` (15 characters, Linux's limit): every tenant bridge of every pool matches
  `thtn+`, so one host firewall rule keeps machines off the host's own services (docs/containers.md): `internal`
  removes the routes out, not the host itself, which answers on every address it has, the bridge's gateway too.
- A machine's container carries the same `thermostat.tenant_network` label: the network is removed once no
  container of the pool carries it (`last_one_gone`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any, Final

LABEL_POOL: Final = "thermostat.pool"
LABEL_TENANT: Final = "thermostat.tenant"
LABEL_TENANT_NETWORK: Final = "thermostat.tenant_network"
BRIDGE_PREFIX: Final = "thtn"
BRIDGE_NAME_OPTION: Final = "com.docker.network.bridge.name"
KEY_DIGITS: Final = 11  # "thtn" + 11 = 15, the longest interface name Linux takes


def network_key(pool: str, tenant_id: str) -> str:
    return hashlib.sha256(f"{pool}\0{tenant_id}".encode()).hexdigest()[:KEY_DIGITS]


def network_name(pool: str, key: str) -> str:
    return f"{pool}-tenant-{key}"


def network_filter(pool: str, key: str) -> dict[str, list[str]]:
    """The `filters` of `GET /networks` (and `GET /containers/json`) finding the tenant's network (its containers)."""
    return {"label": [f"{LABEL_POOL}={pool}", f"{LABEL_TENANT_NETWORK}={key}"]}


def create_network_body(pool: str, tenant_id: str, key: str | None = None) -> dict[str, Any]:
    """The `POST /networks/create` body of the tenant's network, or of its network `key` (an egress type's: egress.py)
    (pure, pinned by the tests)."""
    key = network_key(pool, tenant_id) if key is None else key
    return {
        "Name": network_name(pool, key),
        "Driver": "bridge",
        "Internal": True,
        "CheckDuplicate": True,
        "Labels": {LABEL_POOL: pool, LABEL_TENANT: tenant_id, LABEL_TENANT_NETWORK: key},
        "Options": {BRIDGE_NAME_OPTION: f"{BRIDGE_PREFIX}{key}"},
    }


def last_one_gone(containers: Sequence[object]) -> bool:
    """Whether the network may go: no container of the pool (running or not) carries its label any more."""
    return len(containers) == 0
