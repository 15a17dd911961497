"""`events` (the GitHub timeline on the step axis) and `mix` (data composition by phase)."""

from __future__ import annotations

from typing import Annotated, Any, Optional

import typer

from marinctl import numbers
from marinctl.cli import complete, output


def register(app: typer.Typer) -> None:
    """Add this module's commands to the root app."""
    app.command("events", help=(
        "The GitHub timeline: issues, comments, commits and logbook entries, aligned to runs and steps. "
        "Sync them with `marinctl sync marin` or `marinctl sync github:OWNER/REPO#N`."))(events)
    app.command("mix", help=(
        "Data composition by phase (domains x phases, the active phase marked). "
        "RUN: `hero` (default), rung1..rung4, or a run id."))(mix)


def events(
    run: Annotated[Optional[str], typer.Option("--run", metavar="RUN", help="Only events aligned to this run (`hero`: its whole lineage).", autocompletion=complete.runs)] = None,
    around: Annotated[Optional[int], typer.Option("--around", metavar="STEP", help="Only events within --window steps of STEP.")] = None,
    window: Annotated[int, typer.Option("--window", metavar="N", help="Steps either side of --around.")] = 2000,
    json_out: Annotated[bool, typer.Option("--json", help="JSON output.")] = False,
) -> None:
    from marinctl.errors import UserError
    from marinctl.store import open_store

    if window < 0:
        raise UserError("--window must be zero or more steps", "e.g. `marinctl events --around 108000 --window 500`")
    from marinctl.analysis.events.timeline import query_events

    with open_store().connect() as con:
        items = query_events(con, run, around, window)
    if json_out:
        output.print_json(items)
        return
    if not items:
        print("no events stored" + (" for that selection" if (run or around is not None) else "")
              + " — mirror them with `marinctl sync marin` or `marinctl sync github:OWNER/REPO#N`")
        return
    output.print_table(
        ["time", "kind", "run", "step", "title", "by"],
        [(i["time"], i["kind"], i["run"], _step(i["step"], i["align"]), i["title"], i["author"]) for i in items],
    )
    if any(i["align"] == "time" for i in items):
        print("~ step placed by the event's time (the run's _timestamp); others by what the text says")


def _step(step: int | None, basis: str | None) -> str | None:
    if step is None:
        return None
    return numbers.count(step) + ("~" if basis == "time" else "")


def mix(
    run: Annotated[Optional[str], typer.Option("--run", metavar="RUN", help="hero (default), rung1..rung4, or a run id.", autocompletion=complete.runs)] = None,
    at: Annotated[Optional[int], typer.Option("--at", metavar="STEP", help="Mark the phase active at STEP (default: the run's last synced step).")] = None,
    top: Annotated[int, typer.Option("--top", help="Domains shown (largest first); the rest are summed.")] = 12,
    json_out: Annotated[bool, typer.Option("--json", help="JSON output.")] = False,
) -> None:
    from marinctl.analysis.mix import mix_for
    from marinctl.errors import UserError
    from marinctl.store import open_store

    if at is not None and at < 0:
        raise UserError(f"--at must be a step (0 or more), not {at}", "e.g. `marinctl mix --at 108000`")
    with open_store().connect() as con:
        found, last_step = mix_for(con, run)
    step = at if at is not None else last_step
    doc = found.as_json(step)
    if json_out:
        output.print_json(doc)
        return
    _print_mix(found, step, top)


def _print_mix(found, step: int | None, top: int) -> None:
    from marinctl.text import inert

    active = found.active(step)
    print(f"data mix · {inert(found.label, single_line=True)}" + (f" · run {inert(found.run, single_line=True)}" if found.run else ""))
    if step is not None:
        print(f"step {numbers.count(step)}: " + (f"phase {active.name!s}" if active else "outside every phase"))
    domains: dict[str, float] = {}
    for p in found.phases:
        for d, w in p.weights.items():
            domains[d] = max(domains.get(d, 0.0), w)
    order = sorted(domains, key=lambda d: ("remainder" in d, -domains[d], d))
    shown, rest = order[:max(1, top)], order[max(1, top):]
    headers = ["domain"] + [("▶ " if p is active else "") + p.name for p in found.phases]
    rows: list[list[Any]] = [["steps"] + [f"{numbers.count(p.start_step)}–{numbers.count(p.end_step, missing='')}"
                                          for p in found.phases]]
    for d in shown:
        rows.append([d] + [_pct(p.weights.get(d)) for p in found.phases])
    if rest:
        rows.append([f"other ({len(rest)} more)"] + [_pct(sum(p.weights.get(d, 0.0) for d in rest)) for p in found.phases])
    output.print_table(headers, rows)
    for note in found.notes:
        print(f"note: {inert(note, single_line=True)}")


def _pct(w: float | None) -> str:
    return numbers.percent(w, 1, missing="-")
