"""`thermostat workers`, `usage` and `machine-types …`: the pool's machines, its usage events and catalogue."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from thermostat.cli.examples import example
from thermostat.cli.exit_codes import ExitCode
from thermostat.cli.output import epoch, plain, usd
from thermostat.cli.state import AllTenants, JsonFlag, State

TenantId = Annotated[
    str | None,
    typer.Option(help="One tenant's (the admin token); default: the tenant (--tenant, else STRATA_TENANT)."),
]


def _items(reply: Any, key: str) -> list[dict[str, Any]]:
    """A list reply whether the client returns the message (`{key: [...]}`) or the list itself."""
    value = plain(reply)
    if isinstance(value, dict):
        items: list[dict[str, Any]] = value.get(key, [])
        return items
    return list(value)


def workers(
    ctx: typer.Context,
    tenant_id: TenantId = None,
    all_tenants: AllTenants = False,
    json_mode: JsonFlag = False,
) -> None:
    """The pool's machines: type, backend, state, the job each runs. The tenant's, with the admin token too
    (--all-tenants: every tenant's)."""
    state = State.of(ctx, json_mode)
    with state.client() as t:
        items = _items(t.pool.workers(tenant_id=tenant_id or "", all_tenants=all_tenants), "workers")
    out = state.out
    if out.json_mode:
        out.json(items)
        return
    out.table(
        ["id", "tenant", "machine type", "backend", "state", "job", "created", "last active"],
        [(w.get("id"), w.get("tenant_id"), w.get("machine_type"), w.get("backend"), w.get("state"), w.get("job_id"),
          epoch(w.get("created_at")), epoch(w.get("last_active_at"))) for w in items],
    )  # fmt: skip


def usage(
    ctx: typer.Context,
    tenant_id: TenantId = None,
    all_tenants: AllTenants = False,
    after_position: Annotated[int, typer.Option(min=0, help="Resume after this event position.")] = 0,
    page_size: Annotated[int, typer.Option(min=1, help="Events per page.")] = 100,
    json_mode: JsonFlag = False,
) -> None:
    """Usage events (one per finished job) in position order; resume with --after-position. The tenant's, with
    the admin token too (--all-tenants: every tenant's)."""
    state = State.of(ctx, json_mode)
    with state.client() as t:
        reply = plain(
            t.pool.usage(
                tenant_id=tenant_id or "", all_tenants=all_tenants, after_position=after_position, page_size=page_size
            )
        )
    events = reply.get("events", []) if isinstance(reply, dict) else list(reply)
    out = state.out
    if out.json_mode:
        out.json(events)
        return
    out.table(
        ["position", "job", "tenant", "machine type", "state", "seconds", "ended"],
        [(e.get("position"), e.get("job_id"), e.get("tenant_id"), e.get("machine_type"), e.get("terminal_state"),
          e.get("duration_seconds"), epoch(e.get("ended_at"))) for e in events],
    )  # fmt: skip
    if events:
        out.note(f"next: --after-position {events[-1].get('position')}")


machine_types = typer.Typer(
    help="The pool's catalogue of machine types.",
    epilog=example("thermostat machine-types get"),
    no_args_is_help=True,
)


@machine_types.command(
    "get", epilog=example("thermostat machine-types get", "thermostat --json machine-types get > types.json")
)
def get_types(ctx: typer.Context, json_mode: JsonFlag = False) -> None:
    """The catalogue (env and provider_options read <redacted> without the admin token)."""
    state = State.of(ctx, json_mode)
    with state.client() as t:
        types = t.pool.machine_types()
    _show_types(state, types)


@machine_types.command("put", epilog=example("thermostat --pool-admin-token $ADMIN machine-types put types.json"))
def put_types(
    ctx: typer.Context,
    file: Annotated[str, typer.Argument(help="A JSON array of machine types; - reads stdin.", show_default=False)],
    json_mode: JsonFlag = False,
) -> None:
    """Replace the catalogue with the JSON array in FILE (the admin token); the stored catalogue is shown."""
    state = State.of(ctx, json_mode)
    try:
        text = sys.stdin.read() if file == "-" else Path(file).read_text()
    except OSError as error:
        raise state.fail(ExitCode.USAGE, f"FILE {file}: {error.strerror}") from None
    try:
        catalogue = json.loads(text)
    except json.JSONDecodeError as error:
        raise state.fail(ExitCode.USAGE, f"FILE {file}: not JSON: {error}") from None
    if not isinstance(catalogue, list) or not all(isinstance(item, dict) for item in catalogue):
        raise state.fail(ExitCode.USAGE, f"FILE {file}: must be a JSON array of machine-type objects")
    with state.client() as t:
        stored = t.pool.put_machine_types(catalogue)
    _show_types(state, stored)


def _show_types(state: State, types: list[dict[str, Any]]) -> None:
    if state.out.json_mode:
        state.out.json(types)
        return
    state.out.table(
        ["name", "backend", "image", "max workers", "cool-down s", "job timeout s", "usd/h"],
        [(m.get("name"), m.get("backend", "local"), m.get("image"), m.get("max_workers"), m.get("cool_down_seconds"),
          m.get("job_timeout_seconds"), usd(m.get("price_per_hour"))) for m in types],
    )  # fmt: skip
