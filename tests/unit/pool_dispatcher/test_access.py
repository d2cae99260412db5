"""The pool's rules as the chassis enforces them: which method takes which token and tenant, one row per method."""

from __future__ import annotations

import grpc
import pytest

from thermostat.chassis.auth import TokenRule, method_name
from thermostat.pool_dispatcher.access import (
    ADMIN_ONLY,
    NO_ADMIN_TOKEN,
    NO_TENANT,
    NO_VALID_TOKEN,
    SERVICE,
    TENANT_TOO_LONG,
    Tokens,
    auth_rules,
    tenant_rules,
)

TOKENS = Tokens(api="api-secret", admin="admin-secret")
RULES = auth_rules(TOKENS)
TENANTS = tenant_rules()
# method → (token rule?, admin only?, tenant rule?, the admin exempt from the tenant header?)
TABLE = {
    "CreateJob": (True, False, True, False),
    "RunJob": (True, False, True, False),
    "ListMachineTypes": (True, False, False, False),
    "SubmitJob": (True, False, True, False),
    "SubmitJobJson": (True, False, True, False),
    "SubmitJobSync": (True, False, True, False),
    "GetJob": (True, False, True, False),
    "GetJobJson": (True, False, True, False),
    "GetJobResult": (True, False, True, False),
    "CancelJob": (True, False, True, False),
    "CancelJobJson": (True, False, True, False),
    "WaitJob": (True, False, True, False),
    "RunJobs": (True, False, True, False),
    "RunJobsJson": (True, False, True, False),
    "SendHint": (True, False, True, False),
    "SendHintJson": (True, False, True, False),
    "GetMachineTypes": (True, False, False, False),
    "PutMachineTypes": (True, True, False, False),
    "ListOrphans": (True, True, False, False),
    "ListWorkers": (True, False, True, True),
    "ListWorkersJson": (True, False, True, True),
    "ListUsage": (True, False, True, True),
    "ListUsageJson": (True, False, True, True),
    "GetPoolHealth": (False, False, False, False),
    "GetPoolHealthJson": (False, False, False, False),
}


def full(name: str) -> str:
    return method_name(SERVICE.full_name, name)


def test_the_table_names_every_method_of_the_service() -> None:
    """A method added to the proto is guarded by default (auth_rules reads the descriptor); this table must name it."""
    assert sorted(TABLE) == sorted(m.name for m in SERVICE.methods)


@pytest.mark.parametrize(("name", "row"), [pytest.param(name, row, id=name) for name, row in TABLE.items()])
def test_each_methods_rules(name: str, row: tuple[bool, bool, bool, bool]) -> None:
    token, admin_only, tenant, exempt = row
    rule = RULES.get(full(name))
    assert (rule is not None) == token
    if rule is not None:
        assert (rule.tokens, rule.elevated) == (("api-secret",), ("admin-secret",))
        assert (rule.missing, rule.wrong) == (NO_VALID_TOKEN, NO_VALID_TOKEN)
        assert (rule.elevated_only is not None) == admin_only
    tenant_rule = TENANTS.get(full(name))
    assert (tenant_rule is not None) == tenant
    if tenant_rule is not None:
        assert (tenant_rule.header, tenant_rule.max_length) == ("x-strata-tenant", 256)
        assert (tenant_rule.missing, tenant_rule.too_long, tenant_rule.elevated_exempt) == (
            NO_TENANT,
            TENANT_TOO_LONG,
            exempt,
        )


@pytest.mark.parametrize(
    ("admin", "name", "message"),
    [
        pytest.param("admin-secret", "PutMachineTypes", "replacing the catalogue needs the admin token", id="put"),
        pytest.param(None, "PutMachineTypes", "catalogue writes are disabled: no admin token is configured", id="off"),
        pytest.param("admin-secret", "ListOrphans", "listing orphans needs the admin token", id="orphans"),
        pytest.param(None, "ListOrphans", "listing orphans needs the admin token", id="orphans-off"),
    ],
)
def test_the_admins_calls_refuse_the_api_token_with_403(admin: str | None, name: str, message: str) -> None:
    rule: TokenRule = auth_rules(Tokens(api="api-secret", admin=admin))[full(name)]
    assert rule.elevated_only is not None
    assert (rule.elevated_only.code, rule.elevated_only.message, rule.elevated_only.http) == (
        grpc.StatusCode.PERMISSION_DENIED,
        message,
        403,
    )
    assert rule.elevated_only in (*ADMIN_ONLY.values(), NO_ADMIN_TOKEN)


@pytest.mark.parametrize(
    ("presented", "grant"),
    [
        pytest.param(["api-secret"], False, id="the-api-token-admits"),
        pytest.param(["admin-secret"], True, id="the-admin-token-admits-elevated"),
        pytest.param(["wrong"], None, id="another-token-admits-nothing"),
    ],
)
def test_tokens_grant(presented: list[str], grant: bool | None) -> None:
    assert RULES[full("SubmitJob")].grant(presented) is grant


def test_unset_tokens_admit_no_one() -> None:
    rule = auth_rules(Tokens(api=None, admin=None))[full("SubmitJob")]
    assert rule.grant([""]) is None and rule.grant(["\0unset"]) is None
