"""Which tenant's a pool listing (workers, usage, pool spend) is: one named row per rule (_calls.listed_tenant)."""

from __future__ import annotations

import pytest

from thermostat.client._calls import listed_tenant


@pytest.mark.parametrize(
    ("admin", "tenant_id", "tenant", "all_tenants", "scope"),
    [
        pytest.param(True, None, "acme", False, "acme", id="admin-with-a-tenant-lists-that-tenants"),
        pytest.param(True, None, "acme", True, "", id="admin-asked-for-all-lists-every-tenants"),
        pytest.param(True, None, None, False, "", id="admin-without-a-tenant-lists-every-tenants"),
        pytest.param(True, "beta", "acme", False, "beta", id="admin-naming-a-tenant-id-lists-its"),
        pytest.param(False, None, "acme", False, "", id="api-token-lists-its-own-the-pool-scopes-it"),
        pytest.param(False, "acme", "acme", False, "acme", id="api-token-naming-its-own-tenant"),
        pytest.param(True, " ", " ", False, "", id="blank-is-none"),
    ],
)
def test_a_listing_is_the_tenants_unless_every_tenant_is_asked_for(
    admin: bool, tenant_id: str | None, tenant: str | None, all_tenants: bool, scope: str
) -> None:
    """With a tenant given an admin listing is that tenant's (issue 35: README's exports listed every tenant's)."""
    assert listed_tenant(admin=admin, tenant_id=tenant_id, tenant=tenant, all_tenants=all_tenants) == scope


@pytest.mark.parametrize(
    ("admin", "tenant_id", "named"),
    [
        pytest.param(True, "beta", "not both", id="all-and-one-tenant"),
        pytest.param(False, None, "STRATA_POOL_ADMIN_TOKEN", id="all-with-the-api-token"),
    ],
)
def test_asking_for_every_tenant_where_it_cannot_be_had_is_refused(
    admin: bool, tenant_id: str | None, named: str
) -> None:
    """Every tenant with one tenant's id, or with the API token (which sees its own): refused, not narrowed."""
    with pytest.raises(ValueError, match=named):
        listed_tenant(admin=admin, tenant_id=tenant_id, tenant="acme", all_tenants=True)
