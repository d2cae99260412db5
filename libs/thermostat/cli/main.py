"""The root command: global options, the command groups, and `main()` (the installed `thermostat` script)."""

from __future__ import annotations

from typing import Annotated

import typer

from thermostat.cli import jobs, metering, pods, pool
from thermostat.cli.examples import example
from thermostat.cli.exit_codes import epilog
from thermostat.cli.state import GlobalOptions, State

app = typer.Typer(
    name="thermostat",
    help="Operate Thermostat: model pods, pool jobs, workers, usage, spend and budgets, over the edge's gRPC.",
    epilog=example("thermostat pods start qwen", "thermostat --json jobs submit local --data hello --wait")
    + "\n\n"
    + epilog(),
    no_args_is_help=True,
    add_completion=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


@app.callback()
def root(
    ctx: typer.Context,
    addr: Annotated[
        str | None,
        typer.Option(
            help="The edge's address (host:port); else THERMOSTAT_ADDR, else 127.0.0.1:8080.", show_default=False
        ),
    ] = None,
    operator_token: Annotated[
        str | None,
        typer.Option(
            help="Operator token for pod start/stop and pod budgets; else RIG_OPERATOR_TOKEN.", show_default=False
        ),
    ] = None,
    wake_token: Annotated[
        str | None, typer.Option(help="Wake token (start only); else RIG_WAKE_TOKEN.", show_default=False)
    ] = None,
    pool_token: Annotated[
        str | None, typer.Option(help="Pool API token; else STRATA_POOL_TOKEN.", show_default=False)
    ] = None,
    pool_admin_token: Annotated[
        str | None,
        typer.Option(
            help="Pool admin token (machine types, tenant budgets, every tenant); else STRATA_POOL_ADMIN_TOKEN.",
            show_default=False,
        ),
    ] = None,
    tenant: Annotated[
        str | None, typer.Option(help="The pool tenant jobs run as; else STRATA_TENANT.", show_default=False)
    ] = None,
    json_mode: Annotated[
        bool, typer.Option("--json", help="Print JSON on stdout (errors as JSON on stderr) instead of tables.")
    ] = False,
    timeout: Annotated[
        float, typer.Option(min=0.001, help="Deadline of each call, in seconds (waits have their own).")
    ] = 30.0,
) -> None:
    """Tokens are best passed in the environment: a flag's value shows in the process list."""
    ctx.obj = State(
        GlobalOptions(
            addr=addr,
            operator_token=operator_token,
            wake_token=wake_token,
            pool_token=pool_token,
            pool_admin_token=pool_admin_token,
            tenant=tenant,
            json_mode=json_mode,
            timeout=timeout,
        )
    )


app.add_typer(pods.app, name="pods")
app.add_typer(jobs.app, name="jobs")
app.add_typer(pool.machine_types, name="machine-types")
app.add_typer(metering.budgets, name="budgets")
app.command("workers", epilog=example("thermostat --tenant acme workers"))(pool.workers)
app.command("usage", epilog=example("thermostat --json usage --after-position 120"))(pool.usage)
app.command("spend", epilog=example("thermostat spend --since 2026-11-01"))(metering.spend)


def main() -> int:
    """The `thermostat` script: click exits with the command's code (usage errors 2, see exit_codes)."""
    app(prog_name="thermostat")
    return 0
