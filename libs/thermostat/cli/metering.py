"""`thermostat spend` and `budgets …`: pool spend per tenant and machine type, pod and tenant budgets."""

from __future__ import annotations

import enum
from datetime import UTC, datetime
from typing import Annotated, Any

import typer

from thermostat.cli.examples import example
from thermostat.cli.output import hours, plain, usd
from thermostat.cli.state import AllTenants, JsonFlag, State


def _epoch(value: datetime | None) -> float | None:
    if value is None:
        return None
    return (value if value.tzinfo else value.replace(tzinfo=UTC)).timestamp()


When = Annotated[
    datetime | None,
    typer.Option(formats=["%Y-%m-%d", "%Y-%m-%dT%H:%M:%S"], help="A UTC date or time.", show_default=False),
]


def spend(
    ctx: typer.Context,
    tenant_id: Annotated[
        str | None,
        typer.Option(help="One tenant's (the admin token); default: the tenant (--tenant, else STRATA_TENANT)."),
    ] = None,
    all_tenants: AllTenants = False,
    since: When = None,
    until: When = None,
    json_mode: JsonFlag = False,
) -> None:
    """Pool spend per tenant and machine type, from --since to --until (default: this UTC month so far).

    Machine time (boot to stop, idle warm time included) and job time, priced at each type's price_per_hour. The
    tenant's, with the admin token too (--all-tenants: every tenant's)."""
    state = State.of(ctx, json_mode)
    with state.client() as t:
        reply = plain(
            t.metering.pool_spend(
                tenant_id=tenant_id or "", all_tenants=all_tenants, since=_epoch(since), until=_epoch(until)
            )
        )
    out = state.out
    if out.json_mode:
        out.json(reply)
        return
    out.table(
        ["tenant", "machine type", "machine h", "machine usd", "job h", "job usd", "priced"],
        [(s.get("tenant_id"), s.get("machine_type"), hours(s.get("machine_seconds")), usd(s.get("machine_usd")),
          hours(s.get("job_seconds")), usd(s.get("job_usd")), s.get("priced")) for s in reply.get("lines", [])],
    )  # fmt: skip


budgets = typer.Typer(
    help="Spend ceilings per UTC day and month, for a model pod or a pool tenant.",
    epilog=example("thermostat budgets get pod qwen"),
    no_args_is_help=True,
)


class Kind(enum.StrEnum):
    pod = "pod"
    tenant = "tenant"


KindArg = Annotated[Kind, typer.Argument(help="pod (a model pod) or tenant (a pool tenant).", show_default=False)]
NameArg = Annotated[str, typer.Argument(help="The pod's name or the tenant's id.", show_default=False)]


def _show(state: State, budget: Any) -> None:
    b = plain(budget)
    if state.out.json_mode:
        state.out.json(b)
        return
    state.out.fields(
        [
            ("name", b.get("name") or b.get("tenant_id")),
            ("daily usd", usd(b["daily_usd"]) if "daily_usd" in b else "no ceiling"),
            ("monthly usd", usd(b["monthly_usd"]) if "monthly_usd" in b else "no ceiling"),
            ("today usd", usd(b.get("today_usd"))),
            ("month usd", usd(b.get("month_usd"))),
        ]
    )


@budgets.command("get", epilog=example("thermostat budgets get pod qwen", "thermostat budgets get tenant acme"))
def get_budget(ctx: typer.Context, kind: KindArg, name: NameArg, json_mode: JsonFlag = False) -> None:
    """The ceilings (none when unset) and what was spent today and this month."""
    state = State.of(ctx, json_mode)
    with state.client() as t:
        budget = t.pods.budget(name) if kind is Kind.pod else t.metering.tenant_budget(name)
    _show(state, budget)


Usd = Annotated[float | None, typer.Option(min=0, help="USD; left out: no ceiling.", show_default=False)]


@budgets.command(
    "set",
    epilog=example(
        "thermostat budgets set pod qwen --daily 5 --monthly 100", "thermostat budgets set tenant acme --daily 2"
    ),
)
def set_budget(
    ctx: typer.Context,
    kind: KindArg,
    name: NameArg,
    daily: Usd = None,
    monthly: Usd = None,
    json_mode: JsonFlag = False,
) -> None:
    """Set both ceilings; one left out is cleared (no ceiling). A pod's needs the operator token, a tenant's the
    pool admin token."""
    state = State.of(ctx, json_mode)
    with state.client() as t:
        if kind is Kind.pod:
            _show(state, t.pods.set_budget(name, daily_usd=daily, monthly_usd=monthly))
        else:
            _show(state, t.metering.set_tenant_budget(name, daily_usd=daily, monthly_usd=monthly))
