"""`marinctl alerts`: the alerts fired while following, newest first, and whether a sink took each."""

from __future__ import annotations

from datetime import timezone
from typing import Annotated, Any, Optional

import typer

from marinctl import numbers
from marinctl.cli import output
from marinctl.text import inert


def register(app: typer.Typer) -> None:
    app.command("alerts", help=(
        "Alerts fired while following (`marinctl sync TARGET --follow [--notify SINK]`), newest first: one per run, "
        "cause and episode. `delivered` is false until a sink accepted it. Rules: <home>/alerts.toml."))(alerts)


def alerts(
    run: Annotated[Optional[str], typer.Option("--run", metavar="RUN", help="Only this run's (hero: the lineage's).")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="JSON output (the contract's shape).")] = False,
) -> None:
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
    output.print_table(["id", "fired (UTC)", "run", "step", "severity", "cause", "title", "delivered"],
                       [(r["id"], r["fired_at"][:19].replace("T", " "), r["run"], numbers.count(r["step"]), r["severity"],
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
    return {"id": int(a["alert_id"]), "run": a.get("run_id") or a["run_uid"], "step": int(a["step"]), "metric": a.get("metric"),
            "cause_class": a["cause_class"], "severity": a["severity"], "title": a["title"],
            "fired_at": fired.isoformat() if hasattr(fired, "isoformat") else str(fired),
            "delivered": a["delivered_at"] is not None, "kind": a["kind"], "summary": a.get("summary"),
            "command": a["command"], "episode": {"start": int(a["episode_start"]), "end": int(a["episode_end"])},
            "delivered_to": (a.get("delivered_to") or "").split(",") if a.get("delivered_to") else [],
            "tries": int(a["tries"]), "last_error": a.get("last_error"), "run_uid": a["run_uid"],
            "idempotency_key": idempotency_key(a),
            "deliveries": [{"sink": d["kind"], "delivered": d["delivered_at"] is not None, "tries": int(d["tries"]),
                            "last_error": d["last_error"]} for d in sent]}


def _delivered(r: dict[str, Any]) -> str:
    """yes (the kinds that took it), and what is still owed: `yes (webhook) · slack owed`."""
    owed = sorted({d["sink"] for d in r["deliveries"] if not d["delivered"]} - set(r["delivered_to"]))
    if r["delivered"]:
        return "yes (" + ", ".join(r["delivered_to"]) + ")" + (f" · {', '.join(owed)} owed" if owed else "")
    return f"no ({r['tries']} tries)" if r["tries"] else "no"
