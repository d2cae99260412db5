"""A tenant's Docker network: its name, labels and bridge, and when it may go."""

from __future__ import annotations

from thermostat.policy.pool.tenant_network import (
    create_network_body,
    last_one_gone,
    network_filter,
    network_key,
    network_name,
)


def test_the_key_is_a_digest_of_pool_and_tenant_never_the_tenants_text() -> None:
    """A tenant id is the caller's text: it is in a label's value, never in a name or a filter."""
    key = network_key("pool", "acme/../x y")
    assert len(key) == 11 and all(c in "0123456789abcdef" for c in key)
    assert network_key("pool", "acme") != network_key("other-pool", "acme")
    assert network_name("pool", key) == f"pool-tenant-{key}"
    assert network_filter("pool", key) == {"label": ["thermostat.pool=pool", f"thermostat.tenant_network={key}"]}


def test_the_network_is_internal_labelled_and_its_bridge_fits_linuxs_15_characters() -> None:
    body = create_network_body("pool", "acme")
    key = network_key("pool", "acme")
    assert body["Internal"] is True
    assert body["Labels"] == {"thermostat.pool": "pool", "thermostat.tenant": "acme", "thermostat.tenant_network": key}
    bridge = body["Options"]["com.docker.network.bridge.name"]
    assert bridge == f"thtn{key}" and len(bridge) == 15


def test_a_network_goes_only_when_no_container_carries_its_label() -> None:
    assert last_one_gone([])
    assert not last_one_gone([{"Id": "a"}])
