"""`explain step N` (why a step looks the way it does), `explain --range A:B` (the first cause at
every step of a span) and `anomalies` (stored detections, one row per incident —
analysis/detect/incidents.py — or every detected step with `--detail`).

The words come from render/explain.py, the same text watch's `e` panel shows.
"""

from __future__ import annotations

import re
from typing import Annotated, Optional

import typer

from marinctl import numbers
from marinctl.cli import complete, output
from marinctl.cli.boundary import CommandGroup

explain_app = typer.Typer(help="Explain what is unusual at a step: ranked findings, evidence, cause, context.",
                          no_args_is_help=True, rich_markup_mode=None, cls=CommandGroup)


def register(app: typer.Typer) -> None:
    """Add this module's commands to the root app."""
    app.add_typer(explain_app, name="explain")
    explain_app.callback(invoke_without_command=True)(explain_range)
    # "-5" is a (bad) step, not an unknown option: let N see it and say what a step is.
    explain_app.command("step", context_settings={"ignore_unknown_options": True}, help=(
        "What is unusual at or near step N, ranked, with evidence, a cause class and a plain explanation. "
        "RUN: hero (default), a run id, rung1..rung4."))(step)
    app.command("anomalies", help=(
        "Incidents detected in a run, one row per episode (its peak, first and last step, cause, severity); "
        "--detail: every detected step. RUN: hero (default), a run id, rung1..rung4."))(anomalies)


def step(
    n: Annotated[int, typer.Argument(metavar="N", help="The step to explain.")],
    run: Annotated[Optional[str], typer.Option("--run", metavar="RUN", help="hero (default), a run id, rung1..rung4.", autocompletion=complete.runs)] = None,
    metric: Annotated[Optional[str], typer.Option("--metric", metavar="KEY", help="Focus on one metric, e.g. params/norm/total.", autocompletion=complete.keys)] = None,
    json_out: Annotated[bool, typer.Option("--json", help="JSON output (the contract's shape).")] = False,
) -> None:
    from marinctl.analysis.explain.explain import explain
    from marinctl.errors import UserError
    from marinctl.store import open_store
    from marinctl.store.lineage import resolve_target

    if n < 0:
        raise UserError(f"step must be 0 or more, not {n}", "marinctl explain step 500")
    with open_store().connect() as con:
        target = resolve_target(con, run)
        doc = explain(con, target, n, metric)
    if json_out:
        output.print_json(doc)
        return
    from marinctl.render.explain import explain_text

    print(explain_text(doc), end="")


_RANGE = re.compile(r"\s*(\d[\d_]*)\s*:\s*(\d[\d_]*)\s*")


def explain_range(
    ctx: typer.Context,
    span: Annotated[Optional[str], typer.Option("--range", metavar="A:B", help=(
        "Every step from A to B: the first finding's cause at each (JSON: [{step, cause_class, metric, severity}]).")
    )] = None,
    every: Annotated[int, typer.Option("--every", metavar="K", help="With --range: every K-th step.")] = 1,
    run: Annotated[Optional[str], typer.Option("--run", metavar="RUN", help="With --range: hero (default), a run id, rung1..rung4.", autocompletion=complete.runs)] = None,
    json_out: Annotated[bool, typer.Option("--json", help="With --range: JSON output.")] = False,
) -> None:
    """Explain what is unusual at a step (`explain step N`), or at every step of a span (`--range A:B`)."""
    from marinctl.errors import UserError

    if ctx.invoked_subcommand is not None:
        if span is not None or every != 1:
            raise UserError("--range and --every go with `marinctl explain` alone, not with a step",
                            "marinctl explain --range 1000:2000 --every 10")
        return
    if span is None:
        raise UserError("`marinctl explain` needs a command: step N, or --range A:B", "marinctl explain step 500")
    got = _RANGE.fullmatch(span)
    if got is None:
        raise UserError(f"--range takes two steps as A:B (e.g. 1000:2000), not {span!r}",
                        "marinctl explain --range 1000:2000 --every 10")
    first, last = int(got.group(1)), int(got.group(2))
    if last < first:
        raise UserError(f"--range {span} ends before it starts: A must not be after B",
                        f"marinctl explain --range {last}:{first}")
    if every < 1:
        raise UserError(f"--every must be 1 or more, not {every}", f"marinctl explain --range {first}:{last} --every 10")
    from marinctl.analysis.explain.explain import sweep
    from marinctl.store import open_store
    from marinctl.store.lineage import resolve_target

    with open_store().connect() as con:
        target = resolve_target(con, run)
        rows = sweep(con, target, first, last, every)
    if json_out:
        output.print_json(rows)
        return
    more = f" --run {target.name}" if run else ""
    output.print_table(["steps", "cause", "kind", "metric", "severity"],
                       [(_steps(a["step"], b["step"]), a["cause_class"] or "—", (a["kind"] or "").replace("_", " "),
                         a["metric"] or "", a["severity"] or "") for a, b in _spans(rows)])
    print(f"\n{numbers.count(len(rows))} step{'s' if len(rows) != 1 else ''} from {numbers.count(first)} to {numbers.count(last)}"
          + (f", every {numbers.count(every)}" if every > 1 else "") + f" · details at a step: marinctl explain step N{more}")


def _spans(rows: list[dict]) -> list[tuple[dict, dict]]:
    """Consecutive rows with the same answer as (first, last) of each stretch."""
    out: list[tuple[dict, dict]] = []
    key = lambda r: (r["cause_class"], r["kind"], r["metric"], r["severity"])  # noqa: E731
    for r in rows:
        if out and key(out[-1][0]) == key(r):
            out[-1] = (out[-1][0], r)
        else:
            out.append((r, r))
    return out


def anomalies(
    run: Annotated[Optional[str], typer.Option("--run", metavar="RUN", help="hero (default), a run id, rung1..rung4.", autocompletion=complete.runs)] = None,
    detail: Annotated[bool, typer.Option("--detail", help="Every detected step, not one row per incident.")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="JSON output.")] = False,
) -> None:
    from marinctl.analysis.explain.explain import anomalies as list_anomalies
    from marinctl.store import open_store
    from marinctl.store.lineage import resolve_target

    with open_store().connect() as con:
        target = resolve_target(con, run)
        rows = list_anomalies(con, target, detail=detail)
    if json_out:
        output.print_json([{k: r[k] for k in CONTRACT_KEYS} for r in rows])
        return
    if not rows:
        print(f"no anomalies detected for {target.name} — detection runs after each `marinctl sync`")
        return
    more = f" --run {target.name}" if run else ""
    if detail:
        output.print_table(["step", "run", "metric", "kind", "score", "cause", "severity"],
                           [(numbers.count(r["step"]), r["run"], r["metric"], r["kind"], r["score"], r["cause_class"],
                             r["severity"]) for r in rows])
        print(f"\n{len(rows)} detections · one row per incident: marinctl anomalies{more} · details: marinctl explain step N{more}")
        return
    output.print_table(["peak", "steps", "run", "metric", "kind", "score", "cause", "severity", "detections"],
                       [(numbers.count(r["step"]), _steps(r["start"], r["end"]), r["run"], r["metric"], r["kind"], r["score"],
                         r["cause_class"], r["severity"], numbers.count(r["detections"])) for r in rows])
    total = sum(r["detections"] for r in rows)
    print(f"\n{len(rows)} incident{'s' if len(rows) != 1 else ''} from {total} detection{'s' if total != 1 else ''}"
          f" · every detection: marinctl anomalies --detail{more}"
          f" · details: marinctl explain step N{more}")


CONTRACT_KEYS = ("run", "step", "start", "end", "metric", "kind", "score", "cause_class")


def _steps(start: int, end: int) -> str:
    return numbers.count(start) if start == end else f"{numbers.count(start)}–{numbers.count(end)}"
