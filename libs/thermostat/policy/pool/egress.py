"""Egress, opt-in per machine type: the allow-list a docker type names, and the proxy that enforces it (issue 36).

A docker machine's tenant network is internal: no route out. A type that lists `egress_hosts` gets, on that network,
an egress proxy (Debian's tinyproxy, deploy/egress/Dockerfile) that is also on one non-internal network of the
tenant's own, and its workers get `HTTP_PROXY` / `HTTPS_PROXY` naming it. The proxy's configuration is written here
whole, deny by default:
- an entry is `host` or `host:port`: a DNS name or an IPv4 address, never a wildcard, a scheme, a path or a user;
  `host` alone allows ports 443 and 80, `host:port` that port only;
- `CONNECT` (HTTPS, any TCP) only to a listed `host:port`: the URL filter matches the request's `host:port` exactly,
  and `ConnectPort` lines refuse every other port before the filter is read;
- plain HTTP only to `http://host[:port]/…` of a listed pair (the filter is anchored past the port, so
  `http://allowed@elsewhere/` or `http://allowed.evil/` is not it).
A type with an allow-list puts its machines on an internal network of their own, one per tenant and allow-list
(`machine_network_key`; a type without one stays on the tenant's network), with that network's one proxy: two types of
a tenant with the same list share both, another list gets its own, and a machine of a type without egress cannot reach
a proxy at all (it is on another network). Each type reaches exactly its own list. The proxy and its outside network
are found by their labels after a restart and removed with their network (docker_egress.py).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from typing import Any, Final

from thermostat.policy.pool.hardening import DEFAULT_PIDS_LIMIT, DEFAULT_USER, scratch_mount
from thermostat.policy.pool.tenant_network import BRIDGE_NAME_OPTION, LABEL_POOL, LABEL_TENANT, network_key

DEFAULT_EGRESS_IMAGE: Final = "thermostat-egress:latest"
PROXY_PORT: Final = 8888
DEFAULT_PORTS: Final = (443, 80)  # a host named without a port: HTTPS and HTTP
MAX_EGRESS_HOSTS: Final = 64
LABEL_EGRESS_OF: Final = "thermostat.egress_of"  # the tenant network's key, on the proxy and its outside network
LABEL_EGRESS_LIST: Final = "thermostat.egress_list"  # the allow-list's digest, on the proxy
EGRESS_BRIDGE_PREFIX: Final = "thte"  # thte{key}: the outside network's bridge, beside the tenant's thtn{key}
PROXY_MEMORY_MB: Final = 64
PROXY_NANO_CPUS: Final = 250_000_000

_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOST = re.compile(rf"{_LABEL}(?:\.{_LABEL})*")
_IPV4 = re.compile(r"(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})")
_NOT_A_HOST = "must be host or host:port: a DNS name or IPv4 address (no scheme, path, user or wildcard)"


def egress_host_refusal(value: str) -> str | None:
    """Why `value` is not an allow-list entry (`host` or `host:port`), else None."""
    host, colon, port = value.partition(":")
    if colon and port.isalnum() and _HOST.fullmatch(host) and not _port(port):
        return "must be host or host:port, the port 1-65535"
    if not _HOST.fullmatch(host) or len(host) > 253 or (colon and not _port(port)):
        return _NOT_A_HOST
    numbers = _IPV4.fullmatch(host)
    if numbers is None and host.replace(".", "").isdigit():
        return _NOT_A_HOST  # an address with too few parts, not a name
    if numbers is not None and any(int(part) > 255 for part in numbers.groups()):
        return _NOT_A_HOST
    return None


def _port(text: str) -> bool:
    return text.isascii() and text.isdigit() and not text.startswith("0") and int(text) <= 65535


def allowed_pairs(hosts: Sequence[str]) -> tuple[tuple[str, int], ...]:
    """Every (host, port) the list allows, in order, once each; host names lower-cased (DNS is case-blind)."""
    pairs: dict[tuple[str, int], None] = {}
    for entry in hosts:
        host, _, port = entry.partition(":")
        for each in (int(port),) if port else DEFAULT_PORTS:
            pairs[(host.lower(), each)] = None
    return tuple(pairs)


def egress_digest(hosts: Sequence[str]) -> str:
    """The allow-list's identity (order and duplicates aside): one proxy per tenant network and digest."""
    text = "\n".join(f"{host}:{port}" for host, port in sorted(allowed_pairs(hosts)))
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def machine_network_key(pool: str, tenant_id: str, hosts: Sequence[str]) -> str:
    """The key of the internal network a machine joins: the tenant's, or for a type with an allow-list the tenant's
    network of that list (so only machines allowed the list can reach its proxy)."""
    if not hosts:
        return network_key(pool, tenant_id)
    return network_key(pool, f"{tenant_id}\0egress\0{egress_digest(hosts)}")


def filter_lines(hosts: Sequence[str]) -> str:
    """tinyproxy's filter file (ERE, matched against the request's URL: `host:port` for CONNECT, `http://…` for
    plain HTTP); with FilterDefaultDeny, only what matches a line passes."""
    lines = []
    for host, port in allowed_pairs(hosts):
        name = host.replace(".", "\\.")  # a host is letters, digits, '-' and '.': only '.' means more in ERE
        lines.append(f"^{name}:{port}$")
        lines.append(f"^http://{name}{'(:80)?' if port == 80 else f':{port}'}(/|$)")
    return "\n".join(lines)


def proxy_config(hosts: Sequence[str]) -> str:
    """tinyproxy.conf: listen on the proxy port, deny everything the filter does not allow, CONNECT only to the
    listed ports, no Via header (it would name the proxy to the outside)."""
    ports = sorted({port for _, port in allowed_pairs(hosts)})
    return "\n".join([
        f"Port {PROXY_PORT}", "Listen 0.0.0.0", "Timeout 600", "MaxClients 64", "LogLevel Notice",
        "DisableViaHeader Yes", 'Filter "/tmp/egress-filter"', "FilterType ere", "FilterURLs Yes",
        "FilterDefaultDeny Yes", *(f"ConnectPort {port}" for port in ports),
    ])  # fmt: skip


def proxy_name(pool: str, key: str, digest: str) -> str:
    return f"{pool}-egress-{key}-{digest}"


def outside_network_name(pool: str, key: str) -> str:
    return f"{pool}-egress-{key}"


def egress_filter(pool: str, key: str, digest: str | None = None) -> dict[str, list[str]]:
    """The `filters` finding the tenant network's proxies (the one for `digest`), or its outside network."""
    labels = [f"{LABEL_POOL}={pool}", f"{LABEL_EGRESS_OF}={key}"]
    return {"label": labels + ([f"{LABEL_EGRESS_LIST}={digest}"] if digest is not None else [])}


def create_outside_network_body(pool: str, tenant_id: str, key: str) -> dict[str, Any]:
    """The `POST /networks/create` body of the tenant's outside network: not internal (its proxies' route out),
    only the proxies are on it."""
    return {
        "Name": outside_network_name(pool, key),
        "Driver": "bridge",
        "Internal": False,
        "CheckDuplicate": True,
        "Labels": {LABEL_POOL: pool, LABEL_TENANT: tenant_id, LABEL_EGRESS_OF: key},
        "Options": {BRIDGE_NAME_OPTION: f"{EGRESS_BRIDGE_PREFIX}{key}"},
    }


def create_proxy_body(*, image: str, hosts: Sequence[str], pool: str, key: str, outside: str) -> dict[str, Any]:
    """The proxy's `POST /containers/create` body: on the outside network (the tenant's joins it after create),
    confined as a machine is, and configured whole by its env."""
    return {
        "Image": image,
        "User": DEFAULT_USER,
        "Env": [f"EGRESS_CONFIG={proxy_config(hosts)}", f"EGRESS_FILTER={filter_lines(hosts)}"],
        "Labels": {LABEL_POOL: pool, LABEL_EGRESS_OF: key, LABEL_EGRESS_LIST: egress_digest(hosts)},
        "ExposedPorts": {f"{PROXY_PORT}/tcp": {}},
        "HostConfig": {
            "NetworkMode": outside,
            "RestartPolicy": {"Name": "unless-stopped"},
            "Memory": PROXY_MEMORY_MB * 1024 * 1024,
            "NanoCpus": PROXY_NANO_CPUS,
            "CapDrop": ["ALL"],
            "SecurityOpt": ["no-new-privileges:true"],
            "ReadonlyRootfs": True,
            "Tmpfs": scratch_mount(8),
            "PidsLimit": DEFAULT_PIDS_LIMIT,
        },
    }


def worker_proxy_env(address: str) -> dict[str, str]:
    """What a worker of an egress type is given: its proxy for HTTP and HTTPS (both spellings: curl reads only the
    lower-case http_proxy), and none for its own loopback."""
    url = f"http://{address}:{PROXY_PORT}"
    no_proxy = "localhost,127.0.0.1,::1"
    return {
        "HTTP_PROXY": url, "HTTPS_PROXY": url, "http_proxy": url, "https_proxy": url,
        "NO_PROXY": no_proxy, "no_proxy": no_proxy,
    }  # fmt: skip
