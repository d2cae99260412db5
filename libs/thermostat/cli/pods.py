"""`thermostat pods …`: the model pods (pod controller, idle monitor, and metering's pod spend)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from thermostat.cli.examples import example
from thermostat.cli.output import Output, hours, plain, usd, when
from thermostat.cli.progress import Display, eta_text
from thermostat.cli.state import JsonFlag, State
from thermostat.client import Phase

app = typer.Typer(
    help="Model pods: wake, stop, status, watch, history, the idle monitor's view, spend.",
    epilog=example("thermostat pods status qwen"),
    no_args_is_help=True,
)

Name = Annotated[str, typer.Argument(help="The pod's name (as configured, e.g. qwen).", show_default=False)]


def show_pod(out: Output, pod: Any) -> None:
    """A GetPod view as JSON or as a field table."""
    if out.json_mode:
        out.json(pod)
        return
    p = plain(pod)
    wake = p.get("last_wake") or {}
    out.fields(
        [
            ("name", p.get("name")),
            ("configured", p.get("configured")),
            ("status", p.get("status")),
            ("running", p.get("is_running")),
            ("ready since", when(p.get("ready_since"))),
            ("pod id", p.get("pod_id")),
            ("proxy url", p.get("proxy_url")),
            ("pods on volume", p.get("pods_on_volume")),
            ("datacenter", p.get("datacenter")),
            ("lookup", p.get("lookup")),
            ("last wake", " ".join(str(v) for v in (wake.get("outcome"), wake.get("reason")) if v)),
            ("eta", eta_text(p.get("eta_seconds"))),
        ]
    )


@app.command(epilog=example("thermostat pods start qwen", "thermostat pods start qwen --no-wait"))
def start(
    ctx: typer.Context,
    name: Name,
    no_wait: Annotated[bool, typer.Option("--no-wait", help="Return the wake's outcome without waiting.")] = False,
    wait_timeout: Annotated[
        float, typer.Option(min=1, help="How long to wait for the pod to be ready, in seconds.")
    ] = 900.0,
    json_mode: JsonFlag = False,
) -> None:
    """Wake the pod (start or create it; operator or wake token) and, unless --no-wait, show its boot until
    ready, with an ETA from measured boots."""
    state = State.of(ctx, json_mode)
    out = state.out
    with state.client() as t:
        if no_wait:
            reply = plain(t.pods.start(name))
            if out.json_mode:
                out.json(reply)
            else:
                out.fields([(k.replace("_", " "), v) for k, v in reply.items()])
            return
        last = None
        shown: tuple[str, str | None] | None = None
        with Display(out) as display:
            for progress in t.pods.ensure_ready(name, timeout=wait_timeout):
                if progress.pod is not None:
                    last = progress.pod
                # the detail names the pod and says the ETA ("ready in about 40 s"), from WatchPod's estimate;
                # off a terminal one line per phase (and one for the wake's answer)
                shown = (str(progress.phase), progress.outcome)
                display.show(f"{progress.phase:<12} {progress.detail}", key=shown, eta_seconds=progress.eta_seconds)
            # the last phase shown is ready: off a terminal its line was the final one, so it is not printed twice
            final_key = shown if shown is not None and shown[0] == Phase.READY else None
            display.done(f"{'ready':<12} {name} is ready", key=final_key)
        show_pod(out, last if last is not None else t.pods.status(name))


@app.command(epilog=example("thermostat pods stop qwen"))
def stop(ctx: typer.Context, name: Name, json_mode: JsonFlag = False) -> None:
    """Stop every pod on the volume (operator token); each pod's result is shown."""
    state = State.of(ctx, json_mode)
    with state.client() as t:
        reply = plain(t.pods.stop(name))
    if state.out.json_mode:
        state.out.json(reply)
        return
    state.out.table(["pod id", "stopped"], [(p.get("pod_id"), p.get("ok")) for p in reply.get("pods", [])])
    state.out.note(f"{name}: {'stopped' if reply.get('ok') else 'not every pod stopped'}")


@app.command(epilog=example("thermostat pods status qwen", "thermostat --json pods status qwen"))
def status(ctx: typer.Context, name: Name, json_mode: JsonFlag = False) -> None:
    """The pod as the controller sees it now (no token needed)."""
    state = State.of(ctx, json_mode)
    with state.client() as t:
        pod = t.pods.status(name)
    show_pod(state.out, pod)


@app.command(epilog=example("thermostat pods watch qwen", "thermostat --json pods watch qwen --until-ready"))
def watch(
    ctx: typer.Context,
    name: Name,
    until_ready: Annotated[bool, typer.Option("--until-ready", help="End once the pod is ready.")] = False,
    json_mode: JsonFlag = False,
) -> None:
    """Follow the pod: a line each time its view changes (JSON lines with --json), until Ctrl-C."""
    state = State.of(ctx, json_mode)
    out = state.out
    with state.client() as t:
        for update in t.pods.watch(name):
            pod = plain(getattr(update, "pod", update))
            if out.json_mode:
                out.json_line(pod)
            else:
                ready = when(pod.get("ready_since"))
                parts = [
                    pod.get("status") or "no pod",
                    pod.get("pod_id", ""),
                    f"ready since {ready}" if ready else "",
                    eta_text(pod.get("eta_seconds")),
                ]
                out.stdout.print(f"{name}: " + " · ".join(p for p in parts if p), markup=False, highlight=False)
            if until_ready and pod.get("is_running") and pod.get("ready_since"):
                return


@app.command(epilog=example("thermostat pods history qwen --page-size 50"))
def history(
    ctx: typer.Context,
    name: Name,
    page_size: Annotated[int, typer.Option(min=1, help="Entries per page.")] = 20,
    page_token: Annotated[str, typer.Option(help="The page after a previous answer's next_page_token.")] = "",
    json_mode: JsonFlag = False,
) -> None:
    """Billable actions and wake outcomes, newest first."""
    state = State.of(ctx, json_mode)
    with state.client() as t:
        page = plain(t.pods.history(name, page_size=page_size, page_token=page_token))
    out = state.out
    if out.json_mode:
        out.json(page)
        return
    rows = []
    for entry in page.get("entries", []):
        if "action" in entry:
            a = entry["action"]
            outcome = "ok" if a.get("ok") else f"refused ({a.get('http_status')})"
            rows.append((when(entry.get("at")), a.get("action"), a.get("trigger"), a.get("pod_id"),
                         a.get("gpu_id"), price(a.get("price_per_hour")), outcome, a.get("detail")))  # fmt: skip
        elif "wake" in entry:
            w = entry["wake"]
            rows.append((when(entry.get("at")), "Wake", "", w.get("pod_id"), w.get("gpu_id"),
                         price(w.get("price_per_hour")), w.get("outcome"), w.get("reason")))  # fmt: skip
    out.table(["at", "what", "trigger", "pod id", "gpu", "usd/h", "outcome", "detail"], rows)
    if page.get("next_page_token"):
        out.note(f"more: --page-token {page['next_page_token']}")


def price(per_hour: Any) -> str:
    """A history row's USD/h: a stop, a terminate and a wake that created nothing carry no price (proto3 prints
    the unset rate as 0), so none is shown rather than `0.00`."""
    return usd(per_hour) if per_hour else ""


@app.command(epilog=example("thermostat pods monitor qwen"))
def monitor(ctx: typer.Context, name: Name, json_mode: JsonFlag = False) -> None:
    """The idle monitor's view: phase, streaks against their thresholds, projected stop."""
    state = State.of(ctx, json_mode)
    with state.client() as t:
        view = plain(t.pods.monitor(name))
    out = state.out
    if out.json_mode:
        out.json(view)
        return
    out.fields(
        [
            ("name", view.get("name")),
            ("watch", " ".join(v for v in (view.get("watch"), view.get("watch_reason")) if v)),
            ("phase", view.get("phase")),
            ("idle streak", f"{view.get('idle_streak', 0)} / {view.get('idle_threshold', 0)}"),
            ("booting ticks", f"{view.get('booting_ticks', 0)} / {view.get('boot_grace_threshold', 0)}"),
            ("last signal", view.get("last_signal")),
            ("ready since", when(view.get("ready_since"))),
            ("last tick", when(view.get("last_tick_at"))),
            ("projected stop", " ".join(
                v for v in (when(view.get("projected_stop_at")), view.get("projected_stop_trigger")) if v)),
        ]
    )  # fmt: skip


@app.command(epilog=example("thermostat pods spend qwen"))
def spend(ctx: typer.Context, name: Name, json_mode: JsonFlag = False) -> None:
    """What the pod billed: per UTC day and GPU type, today, this month, in total."""
    state = State.of(ctx, json_mode)
    with state.client() as t:
        reply = plain(t.pods.spend(name))
    out = state.out
    if out.json_mode:
        out.json(reply)
        return
    out.table(
        ["day", "gpu", "hours", "usd"],
        [(line.get("day"), line.get("gpu_type"), hours(line.get("seconds")), usd(line.get("usd")))
         for line in reply.get("lines", [])],
    )  # fmt: skip
    out.fields(
        [("today usd", usd(reply.get("today_usd"))), ("month usd", usd(reply.get("month_usd"))),
         ("total usd", usd(reply.get("total_usd"))), ("as of", when(reply.get("as_of")))]
    )  # fmt: skip
