"""`marinctl alerts`: the alerts fired while following, newest first, and whether each sink took each;
`alerts ack ID` (an emergency's repeats stopped everywhere); `alerts --preset NAME --show`."""

from __future__ import annotations

from datetime import timezone
from typing import Annotated, Any, Optional

import typer

from marinctl import numbers
from marinctl.cli import output
from marinctl.cli.boundary import CommandGroup
from marinctl.text import inert

alerts_app = typer.Typer(rich_markup_mode=None, cls=CommandGroup, invoke_without_command=True, no_args_is_help=False)
CANCEL_TIMEOUT_S = 10.0


def register(app: typer.Typer) -> None:
    app.add_typer(alerts_app, name="alerts", help=(
        "Alerts fired while following (`marinctl sync TARGET --follow [--notify SINK]`), newest first: one per run, "
        "cause and episode, with its priority. `delivered` is false until a sink accepted it. Rules: "
        "<home>/alerts.toml; `alerts --preset marin-hero --show` prints a preset's; `alerts ack ID` stops an "
        "emergency's repeats."))
    alerts_app.callback()(alerts)
    alerts_app.command("ack", help=(
        "Acknowledge alert ID (the `id` `marinctl alerts` lists): no follower sends it again, and an emergency's "
        "repeats stop on every Pushover device it reached (PUSHOVER_APP_TOKEN set)."))(ack)


def alerts(
    ctx: typer.Context,
    run: Annotated[Optional[str], typer.Option("--run", metavar="RUN", help="Only this run's (hero: the lineage's).")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="JSON output (the contract's shape).")] = False,
    preset: Annotated[Optional[str], typer.Option("--preset", metavar="NAME", help="With --show: a shipped preset of rules (marin-hero).")] = None,
    show: Annotated[bool, typer.Option("--show", help="Print the --preset's rules as alerts.toml text, to copy and change.")] = False,
) -> None:
    if ctx.invoked_subcommand is not None:
        return
    from marinctl.errors import UserError

    if preset is not None or show:
        if preset is None or not show:
            raise UserError("--preset and --show go together: they print a preset's rules",
                            "marinctl alerts --preset marin-hero --show")
        from marinctl.analysis.alerts import presets

        print(presets.text(preset), end="")
        return
    from marinctl.store import alerts as alerts_store
    from marinctl.store import open_store
    from marinctl.store.lineage import resolve_target

    with open_store().connect() as con:
        uids = None
        if run is not None:
            uids = [r["uid"] for r in resolve_target(con, run).runs]
        listed = alerts_store.listed(con, uids)
        sent = alerts_store.deliveries(con, [a["alert_id"] for a in listed])
        rows = [_row(a, sent.get(a["alert_id"], [])) for a in listed]
    if json_out:
        output.print_json(rows)
        return
    if not rows:
        print("no alerts fired" + (f" for {inert(run, single_line=True)}" if run else "")
              + " — they fire while `marinctl sync TARGET --follow` runs (add --notify SINK to be told)")
        return
    output.print_table(["id", "fired (UTC)", "run", "step", "priority", "cause", "title", "delivered"],
                       [(r["id"], r["fired_at"][:19].replace("T", " "), r["run"], numbers.count(r["step"]), r["priority"],
                         r["cause_class"], r["title"], _delivered(r)) for r in rows])
    print(f"\n{len(rows)} alert{'s' if len(rows) != 1 else ''} · look closer: the command each one names, e.g."
          f" {inert(rows[0]['command'], single_line=True)}")


def _row(a: dict[str, Any], sent: list[dict[str, Any]]) -> dict[str, Any]:
    """The contract's fields (run, step, metric, cause_class, severity, title, fired_at, delivered) and
    more: `id` (what `alerts ack` takes), each sink's delivery, the idempotency key receivers see."""
    from marinctl.sync.sinks import idempotency_key

    fired = a["fired_at"]
    if hasattr(fired, "astimezone"):
        fired = fired.astimezone(timezone.utc)
    from marinctl.analysis.alerts import priority as P

    return {"id": int(a["alert_id"]), "run": a.get("run_id") or a["run_uid"], "step": int(a["step"]), "metric": a.get("metric"),
            "cause_class": a["cause_class"], "severity": a["severity"], "priority": P.of(a), "title": a["title"],
            "fired_at": fired.isoformat() if hasattr(fired, "isoformat") else str(fired),
            "delivered": a["delivered_at"] is not None, "kind": a["kind"], "summary": a.get("summary"),
            "command": a["command"], "episode": {"start": int(a["episode_start"]), "end": int(a["episode_end"])},
            "delivered_to": (a.get("delivered_to") or "").split(",") if a.get("delivered_to") else [],
            "tries": int(a["tries"]), "last_error": a.get("last_error"), "run_uid": a["run_uid"],
            "idempotency_key": idempotency_key(a),
            "acked": a.get("acked_at") is not None, "rule": (a.get("details") or {}).get("rule"),
            "deliveries": [{"sink": d["kind"], "delivered": d["delivered_at"] is not None, "tries": int(d["tries"]),
                            "last_error": d["last_error"], "repeats": bool(d["repeats"]) and d["cancelled_at"] is None}
                           for d in sent]}


def _delivered(r: dict[str, Any]) -> str:
    """yes (the kinds that took it), and what is still owed: `yes (webhook) · slack owed`."""
    owed = sorted({d["sink"] for d in r["deliveries"] if not d["delivered"]} - set(r["delivered_to"]))
    if r["delivered"]:
        return "yes (" + ", ".join(r["delivered_to"]) + ")" + (f" · {', '.join(owed)} owed" if owed else "")
    return f"no ({r['tries']} tries)" if r["tries"] else "no"


def ack(alert_id: Annotated[str, typer.Argument(metavar="ID", help="The alert's id (`marinctl alerts` lists them).")]) -> None:
    from marinctl.errors import RuntimeFailure, UserError
    from marinctl.store import alerts as alerts_store
    from marinctl.store import open_store

    if not alert_id.strip().isdigit():
        raise UserError(f"no alert with id {inert(alert_id, single_line=True)[:40]!r}: an id is a number",
                        "marinctl alerts (the id column)")
    n = int(alert_id)
    store = open_store()
    with store.transaction() as con:
        alert = alerts_store.acknowledge(con, n)
        repeating = alerts_store.receipts(con, n) if alert is not None else []
    if alert is None:
        raise UserError(f"no alert with id {n}", "marinctl alerts (the id column)")
    from marinctl.sync import phones

    failed = []
    for sink, _kind, receipt in repeating:
        error = phones.cancel(receipt, timeout=CANCEL_TIMEOUT_S)
        if error is not None:
            failed.append(error)
            continue
        with store.transaction() as con:
            alerts_store.cancelled(con, n, sink)
    what = f"alert {n} ({inert(alert['title'], single_line=True)[:80]}) acknowledged"
    if failed:
        raise RuntimeFailure(f"{what}, but its Pushover repeats were not stopped: {inert(failed[0], single_line=True)}",
                             f"marinctl alerts ack {n} (again, once Pushover answers)")
    stopped = len(repeating)
    print(what + (f"; Pushover stops repeating it ({stopped} receipt{'s' if stopped != 1 else ''} cancelled)"
                  if stopped else "; no follower sends it again"))
