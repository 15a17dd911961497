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
    import sys

    from marinctl.render.diff import diff_text

    sys.stdout.write(diff_text(doc))
