"""The global options every command shares, and the one place a client is opened and its errors mapped."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Annotated

import typer

from thermostat.cli.exit_codes import ExitCode, for_error
from thermostat.cli.output import Output
from thermostat.client import ClientConfig, Thermostat, errors

NO_TENANT = "tenant: pass --tenant or set STRATA_TENANT (the pool runs every job for a tenant)"

JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table (as the global --json).")]
AllTenants = Annotated[
    bool,
    typer.Option(
        "--all-tenants",
        help="Every tenant's (the admin token); a listing is otherwise the tenant's (--tenant, else STRATA_TENANT).",
    ),
]


@dataclass(frozen=True, slots=True, kw_only=True)
class GlobalOptions:
    """What the root command was given; None means "from the environment" (ClientConfig.from_env)."""

    addr: str | None = None
    operator_token: str | None = None
    wake_token: str | None = None
    pool_token: str | None = None
    pool_admin_token: str | None = None
    tenant: str | None = None
    json_mode: bool = False
    timeout: float = 30.0


class State:
    """ctx.obj: the options, the output, and a client opened on demand."""

    def __init__(self, options: GlobalOptions, output: Output | None = None) -> None:
        self.options = options
        self.out = output or Output(json_mode=options.json_mode)

    @classmethod
    def of(cls, ctx: typer.Context, json_mode: bool = False) -> State:
        """The root's state; a command's own --json (after the command's words) switches JSON on as well."""
        state = ctx.find_root().obj
        if not isinstance(state, State):  # a command invoked without the root callback (never from the CLI)
            state = cls(GlobalOptions())
            ctx.find_root().obj = state
        if json_mode:
            state.out.json_mode = True
        return state

    def config(self) -> ClientConfig:
        o = self.options
        return ClientConfig.from_env(
            target=o.addr,
            operator_token=o.operator_token,
            wake_token=o.wake_token,
            pool_token=o.pool_token,
            pool_admin_token=o.pool_admin_token,
            tenant=o.tenant,
            timeout=o.timeout,
        )

    @contextlib.contextmanager
    def client(self, *, tenant: bool = False) -> Iterator[Thermostat]:
        """A connected client; a client error inside the block prints and exits with its code. `tenant`: the
        command's calls are a tenant's (the job routes), so one must be given before anything is sent."""
        config = self.config()
        if tenant and not config.tenant:
            raise self.fail(ExitCode.USAGE, NO_TENANT)
        try:
            with Thermostat(config) as client:
                yield client
        except ValueError as error:  # the client refuses a bad argument before sending it, naming it
            raise self.fail(ExitCode.USAGE, str(error)) from None
        except errors.ThermostatError as error:
            code = error.code.name if error.code is not None else type(error).__name__
            self.out.error(code, error.detail or str(error))
            raise typer.Exit(int(for_error(error))) from None
        except KeyboardInterrupt:
            self.out.note("interrupted")
            raise typer.Exit(int(ExitCode.INTERRUPTED)) from None

    def fail(self, code: ExitCode, detail: str) -> typer.Exit:
        """Print `detail` as an error and return the Exit to raise (raise state.fail(...))."""
        self.out.error(code.name, detail)
        return typer.Exit(int(code))
