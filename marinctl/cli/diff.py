"""`diff RUN_A RUN_B`: how two runs' configs differ and where their metrics part ways."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from marinctl.cli import output

X_AXES = ("step", "tokens")


def register(app: typer.Typer) -> None:
    """Add this module's commands to the root app."""
    app.command("diff", help=(
        "Config differences (changed, only in A, only in B; nested keys joined by dots), then per metric where "
        "the two runs separate beyond their own step-to-step noise, the largest gap and the last values. "
        "RUN: a W&B run id, ENTITY/PROJECT/RUN_ID, a W&B URL, hero, rung1..rung4, or a local run id."))(diff)


def diff(
    run_a: Annotated[str, typer.Argument(metavar="RUN_A")],
    run_b: Annotated[str, typer.Argument(metavar="RUN_B")],
    keys: Annotated[Optional[str], typer.Option("--keys", metavar="K,…", help="Metric keys to compare (default: every key both logged).")] = None,
    x: Annotated[str, typer.Option("--x", metavar="step|tokens", help="Align the runs by step (default) or by tokens seen.")] = "step",
    json_out: Annotated[bool, typer.Option("--json", help="JSON output (the contract's shape).")] = False,
) -> None:
    from marinctl.analysis.diff import diff_runs
    from marinctl.errors import UserError
    from marinctl.store import open_store
    from marinctl.store.lineage import resolve_target

    if x not in X_AXES:
        raise UserError(f"--x must be step or tokens, not {x!r}", f"marinctl diff {run_a} {run_b} --x tokens")
    key_list = [k.strip() for k in keys.split(",") if k.strip()] if keys else None
    if keys is not None and not key_list:
        raise UserError("--keys names no key", "e.g. --keys train/loss,eval/paloma/macro_loss")
    with open_store().connect() as con:
        a = resolve_target(con, run_a, stitched=run_a == "hero")
        b = resolve_target(con, run_b, stitched=run_b == "hero")
        doc = diff_runs(con, a, b, keys=key_list, x=x)
    if json_out:
        output.print_json(doc)
        return
    _print(doc)


def _print(doc: dict) -> None:
    from marinctl import numbers as N
    from marinctl.text import inert

    a, b = inert(doc["run_a"], single_line=True), inert(doc["run_b"], single_line=True)
    cfg = doc["config"]
    print(f"A = {a}\nB = {b}\n")
    n = len(cfg["changed"]) + len(cfg["only_a"]) + len(cfg["only_b"])
    print(f"config: {len(cfg['changed'])} changed, {len(cfg['only_a'])} only in A, {len(cfg['only_b'])} only in B"
          + ("" if n else " — identical"))
    rows = [(k, output.fmt(_cell(va)), output.fmt(_cell(vb))) for k, (va, vb) in cfg["changed"].items()]
    rows += [(k, output.fmt(_cell(v)), "—") for k, v in cfg["only_a"].items()]
    rows += [(k, "—", output.fmt(_cell(v))) for k, v in cfg["only_b"].items()]
    if rows:
        output.print_table(["key", "A", "B"], rows)
    unit = "step" if doc["x"] == "step" else "tokens"
    mets = doc["metrics"]
    apart = [m for m in mets if m["separates_at"] is not None]
    print(f"\nmetrics aligned by {unit}: {len(apart)} of {len(mets)} separate beyond their own noise")
    if not mets:
        return

    def at(v):
        return "—" if v is None else (N.count(v) if unit == "step" else N.sig(v, 3))

    output.print_table(
        ["key", f"separates at ({unit})", "largest gap A−B", "at step", "last A", "last B"],
        [(m["key"], at(m["separates_at"]), N.sig(m["max_gap"], 3) if m["max_gap"] is not None else "—",
          N.count(m["max_gap_step"]) if m["max_gap_step"] is not None else "—",
          N.sig(m["last_a"], 5) if m["last_a"] is not None else "—",
          N.sig(m["last_b"], 5) if m["last_b"] is not None else "—") for m in mets])


def _cell(v) -> object:
    if isinstance(v, (dict, list)):
        import json

        return json.dumps(v, default=str)[:60]
    return v
