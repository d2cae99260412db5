"""`thermostat jobs …`: pool jobs as a tenant (pool API token and --tenant / STRATA_TENANT)."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Any

import typer

from thermostat.cli.examples import example
from thermostat.cli.exit_codes import JOB_STATES, ExitCode
from thermostat.cli.output import Output, epoch, plain
from thermostat.cli.progress import Display, Stopwatch
from thermostat.cli.state import JsonFlag, State

app = typer.Typer(
    help="Pool jobs: submit (optionally waiting for the result), get, result, cancel, wait.",
    epilog=example("thermostat --tenant acme jobs submit local --data hello --wait"),
    no_args_is_help=True,
)

JobId = Annotated[str, typer.Argument(help="The job's id (as submit printed it).", show_default=False)]
Output_ = Annotated[
    Path | None,
    typer.Option("--output", "-o", help="Write the result bytes to this file instead of stdout.", dir_okay=False),
]
WaitTimeout = Annotated[float, typer.Option(min=1, help="How long to wait for the job to end, in seconds.")]


def show_job(out: Output, job: Any) -> None:
    if out.json_mode:
        out.json(job)
        return
    j = plain(job)
    out.fields(
        [
            ("id", j.get("id")),
            ("tenant", j.get("tenant_id")),
            ("machine type", j.get("machine_type")),
            ("state", j.get("state")),
            ("error", j.get("error")),
            ("priority", j.get("priority")),
            ("session", j.get("session_id")),
            ("worker", j.get("worker_id")),
            ("submitted", epoch(j.get("submitted_at"))),
            ("started", epoch(j.get("started_at"))),
            ("completed", epoch(j.get("completed_at"))),
            ("timeout seconds", j.get("timeout_seconds")),
            ("has result", j.get("has_result")),
        ]
    )


def write_result(data: bytes, path: Path | None) -> None:
    """The result bytes verbatim to `path` or stdout; on a terminal a result not ending a line gets a newline, so
    the shell's prompt does not run on after it (a pipe or a file gets the bytes exactly)."""
    if path is None:
        sys.stdout.buffer.write(data)
        if data and not data.endswith(b"\n") and sys.stdout.isatty():
            sys.stdout.buffer.write(b"\n")
        sys.stdout.buffer.flush()
    else:
        path.write_bytes(data)


def follow(out: Output, job_id: str, updates: Iterable[Any]) -> dict[str, Any]:
    """Show each state of the job until its stream ends; the last job seen (plain)."""
    watch = Stopwatch()
    last: dict[str, Any] = {}
    with Display(out) as display:
        for update in updates:
            last = plain(update)
            state = last.get("state", "")
            display.show(f"job {job_id}: {state} · {watch.elapsed()}", key=state)
        error = f" · {last['error']}" if last.get("error") else ""
        display.done(f"job {job_id}: {last.get('state', 'unknown')}{error}", key=None if error else last.get("state"))
    return last


def exit_for(state: State, job: dict[str, Any]) -> None:
    """Exit with the job's terminal state's code (0 for completed)."""
    code = JOB_STATES.get(str(job.get("state")))
    if code is None:
        raise state.fail(ExitCode.ERROR, f"job {job.get('id')} ended its wait in state {job.get('state')!r}")
    if code is not ExitCode.OK:
        raise typer.Exit(int(code))


def read_payload(state: State, data: str | None, payload_file: str | None) -> bytes:
    if data is not None and payload_file is not None:
        raise typer.BadParameter("give the payload as --data or as PAYLOAD_FILE, not both", param_hint="--data")
    if data is not None:
        return data.encode()
    if payload_file is None:
        return b""
    if payload_file == "-":
        return sys.stdin.buffer.read()
    try:
        return Path(payload_file).read_bytes()
    except OSError as error:
        raise state.fail(ExitCode.USAGE, f"PAYLOAD_FILE {payload_file}: {error.strerror}") from None


@app.command(
    epilog=example(
        "thermostat --tenant acme jobs submit local --data hello --wait",
        "thermostat --tenant acme --json jobs submit local payload.bin --priority 5",
    )
)
def submit(
    ctx: typer.Context,
    machine_type: Annotated[str, typer.Argument(help="The catalogue type to run on.", show_default=False)],
    payload_file: Annotated[
        str | None, typer.Argument(help="File holding the payload (any bytes); - reads stdin.", show_default=False)
    ] = None,
    data: Annotated[str | None, typer.Option(help="The payload as text, instead of a file.")] = None,
    priority: Annotated[int | None, typer.Option(help="Higher runs first (default 0).")] = None,
    session: Annotated[str | None, typer.Option(help="Session id: prefer the machine that ran this session.")] = None,
    job_timeout: Annotated[
        float | None, typer.Option(min=0.001, help="The job's own timeout on the machine, in seconds.")
    ] = None,
    wait: Annotated[
        bool, typer.Option("--wait", help="Wait for the job, showing its state, and print the result.")
    ] = False,
    wait_timeout: WaitTimeout = 3600.0,
    output: Output_ = None,
    json_mode: JsonFlag = False,
) -> None:
    """Submit a job. With --wait, show its state until it ends and write the result bytes to stdout, or to
    --output and the job to stdout; under --json the job is printed (the result then only with --output). The
    exit code says how the job ended."""
    state = State.of(ctx, json_mode)
    payload = read_payload(state, data, payload_file)
    with state.client(tenant=True) as t:
        job = t.pool.submit(machine_type, payload, priority=priority, session_id=session, timeout_seconds=job_timeout)
        if not wait:
            show_job(state.out, job)
            return
        job_id = plain(job)["id"]
        final = follow(state.out, job_id, t.pool.wait(job_id, timeout=wait_timeout))
        if final.get("state") == "completed" and (output is not None or not state.out.json_mode):
            write_result(t.pool.result(job_id), output)
    if output is not None or state.out.json_mode:  # stdout is free for the job
        show_job(state.out, final)
    exit_for(state, final)


@app.command(epilog=example("thermostat --tenant acme jobs get 0b6f3c1e9a2d4f51"))
def get(ctx: typer.Context, job_id: JobId, json_mode: JsonFlag = False) -> None:
    """The job: its state, times, error and whether a result is kept."""
    state = State.of(ctx, json_mode)
    with state.client(tenant=True) as t:
        job = t.pool.get(job_id)
    show_job(state.out, job)


@app.command(epilog=example("thermostat --tenant acme jobs result 0b6f3c1e9a2d4f51 -o out.bin"))
def result(ctx: typer.Context, job_id: JobId, output: Output_ = None, json_mode: JsonFlag = False) -> None:
    """The result bytes of a completed job, to stdout (or --output), exactly as the worker answered."""
    state = State.of(ctx, json_mode)
    with state.client(tenant=True) as t:
        data = t.pool.result(job_id)
    write_result(data, output)


@app.command(
    epilog=example(
        "thermostat --tenant acme jobs cancel 0b6f3c1e9a2d4f51",
        "thermostat --tenant acme jobs cancel 0b6f3c1e9a2d4f51 --build-id b-42",
    )
)
def cancel(
    ctx: typer.Context,
    job_id: JobId,
    build_id: Annotated[
        str | None,
        typer.Option(help="The build the worker runs (a Strata manifest's build_id); default: the job's id."),
    ] = None,
    json_mode: JsonFlag = False,
) -> None:
    """Cancel the job: a queued one never runs, a running one's worker is asked to stop that build."""
    state = State.of(ctx, json_mode)
    with state.client(tenant=True) as t:
        job = t.pool.cancel(job_id, build_id=build_id)
    show_job(state.out, job)


@app.command(epilog=example("thermostat --tenant acme jobs wait 0b6f3c1e9a2d4f51"))
def wait(ctx: typer.Context, job_id: JobId, wait_timeout: WaitTimeout = 3600.0, json_mode: JsonFlag = False) -> None:
    """Show the job's state until it ends, then the job; the exit code says how it ended."""
    state = State.of(ctx, json_mode)
    with state.client(tenant=True) as t:
        final = follow(state.out, job_id, t.pool.wait(job_id, timeout=wait_timeout))
    show_job(state.out, final)
    exit_for(state, final)
