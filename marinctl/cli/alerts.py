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
        rows = [_row(a) for a in alerts_store.listed(con, uids)]
    if json_out:
        output.print_json(rows)
        return
    if not rows:
        print("no alerts fired" + (f" for {inert(run, single_line=True)}" if run else "")
              + " — they fire while `marinctl sync TARGET --follow` runs (add --notify SINK to be told)")
        return
    output.print_table(["fired (UTC)", "run", "step", "severity", "cause", "title", "delivered"],
                       [(r["fired_at"][:19].replace("T", " "), r["run"], numbers.count(r["step"]), r["severity"],
                         r["cause_class"], r["title"], _delivered(r)) for r in rows])
    print(f"\n{len(rows)} alert{'s' if len(rows) != 1 else ''} · look closer: the command each one names, e.g."
          f" {inert(rows[0]['command'], single_line=True)}")


def _row(a: dict[str, Any]) -> dict[str, Any]:
    """The contract's fields (run, step, metric, cause_class, severity, title, fired_at, delivered) and more."""
    fired = a["fired_at"]
    if hasattr(fired, "astimezone"):
        fired = fired.astimezone(timezone.utc)
    return {"run": a.get("run_id") or a["run_uid"], "step": int(a["step"]), "metric": a.get("metric"),
            "cause_class": a["cause_class"], "severity": a["severity"], "title": a["title"],
            "fired_at": fired.isoformat() if hasattr(fired, "isoformat") else str(fired),
            "delivered": a["delivered_at"] is not None, "kind": a["kind"], "summary": a.get("summary"),
            "command": a["command"], "episode": {"start": int(a["episode_start"]), "end": int(a["episode_end"])},
            "delivered_to": (a.get("delivered_to") or "").split(",") if a.get("delivered_to") else [],
            "tries": int(a["tries"]), "last_error": a.get("last_error"), "run_uid": a["run_uid"]}


def _delivered(r: dict[str, Any]) -> str:
    if r["delivered"]:
        return "yes (" + ", ".join(r["delivered_to"]) + ")"
    return f"no ({r['tries']} tries)" if r["tries"] else "no"
