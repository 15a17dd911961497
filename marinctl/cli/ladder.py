"""`ladder`: fit L(C) = L_inf + A*C^-alpha across the rungs (or a CSV), predict the hero, score it live."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from marinctl.cli import output


def register(app: typer.Typer) -> None:
    """Add this module's commands to the root app."""
    app.command("ladder", help=(
        "Fit L(C) = L_inf + A*C^-alpha across the synced ladder rungs (offline: Marin's published v16 isoFLOP "
        "table; or any CSV of compute,loss[,name]) and predict the hero's loss. With --isoflop ENTITY/PROJECT: "
        "Marin's isoFLOP analysis of a synced sweep (per budget a parabola of loss in log10 tokens, then "
        "T*(C), N*(C) and L(C))."))(ladder)


def ladder(
    metric: Annotated[str, typer.Option("--metric", metavar="KEY", help="Metric the rungs logged.")] = "eval/paloma/macro_loss",
    pin: Annotated[Optional[float], typer.Option("--pin", metavar="L_INF", help="Pin L_inf (Marin pinned 1.6); free when omitted.")] = None,
    points: Annotated[Optional[str], typer.Option("--points", metavar="CSV", help="Fit a CSV of compute,loss[,name] instead.")] = None,
    predict: Annotated[Optional[list[float]], typer.Option("--predict", metavar="C", help="Compute (FLOPs) to predict at; repeatable. Default: the hero's 2.7e24.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="JSON output (the contract's shape).")] = False,
    isoflop: Annotated[Optional[str], typer.Option("--isoflop", metavar="ENTITY/PROJECT", help=(
        "Analyse a synced isoFLOP sweep: runs grouped by compute budget (config, else run name), tokens from "
        "throughput/total_tokens, params from summary parameter_count, loss at the last eval."))] = None,
    where: Annotated[Optional[str], typer.Option("--where", metavar="EXPR", help=(
        "With --isoflop: only the sweep's runs matching EXPR (as `runs --where`)."))] = None,
) -> None:
    from marinctl.analysis.scaling import ladder as lad
    from marinctl.errors import UserError

    if isoflop is not None:
        from marinctl.cli.ladder_isoflop import isoflop_command

        isoflop_command(isoflop, metric=metric, pin=pin, predict=predict, where=where, json_out=json_out,
                        points=points)
        return
    if where is not None:
        raise UserError("--where selects runs of an isoFLOP sweep", "add --isoflop ENTITY/PROJECT")
    predict = list(predict or [lad.HERO_COMPUTE])
    for c in predict:
        if not c > 0:
            raise UserError(f"--predict compute must be positive, not {c}", "e.g. `marinctl ladder --predict 1e21`")
    source, live = "points", None
    if points:
        pts = lad.read_points(points)
    else:
        pts, source, live = _rungs_or_published(lad, metric, pin)
    fit = lad.fit_power_law([p["compute"] for p in pts], [p["loss"] for p in pts], pin)
    preds = []
    for c in predict:
        lo, hi = fit.band(c)
        preds.append({"compute": c, "loss": float(fit.predict(c)), "lo": float(lo[0]), "hi": float(hi[0])})
    doc = {"source": source, "metric": metric, "fit": fit.as_dict(), "predictions": preds,
           "rungs": [{"name": p["name"], "compute": p["compute"], "loss": p["loss"], "fitted": float(fit.predict(p["compute"]))}
                     for p in pts]}
    if live:
        doc.update(live)
    if json_out:
        output.print_json(doc)
        return
    _render(doc, pts, fit, predict)


def _rungs_or_published(lad, metric, pin):
    """Final metric of each synced rung; else the published v16 isoFLOP table (said so on stderr)."""
    from marinctl.errors import UserError
    from marinctl.paths import db_path
    from marinctl.store import open_store

    rs = []
    if db_path().exists():
        with open_store().connect() as con:
            rs = lad.rung_series(con, metric)
            if rs and not any(len(r["steps"]) for r in rs):
                raise UserError(f"no rung logged metric {metric!r}", "list a rung's keys with `marinctl show rung1`")
            rs = [r for r in rs if len(r["steps"])]
            if len(rs) >= 3:
                band = lad.predicted_band(con, metric, pin if pin is not None else 1.6)
                live = {"hero_band": None if band is None else {k: [float(x) for x in v] for k, v in band.items()},
                        "hero_deviation": lad.hero_deviation(con, metric, band),
                        "preregistered_loss": lad.preregistered_loss(con)}
                pts = [{"name": f"{r['rung']} {r['name']}", "compute": r["compute"], "loss": float(r["values"][-1])} for r in rs]
                return pts, "rungs", live
    have = f"only {len(rs)} ladder rung(s) with {metric!r} synced" if rs else "no ladder rungs synced"
    output.info(f"{have} (reproductions are overlays, not rungs); fitting Marin's published v16 isoFLOP optima "
                "instead — `marinctl sync marin` mirrors the rungs")
    return lad.published_points(), "published-v16-isoflop", None


def _render(doc, pts, fit, predict) -> None:
    from marinctl import numbers as N
    from marinctl.render.ladder import ladder_chart
    from marinctl.text import inert

    print(f"source: {doc['source']}" + ("" if doc["source"] == "points" else f"   metric: {inert(doc['metric'])}"))
    output.print_table(["rung", "compute", "loss", "fitted"],
                       [[inert(r["name"]), N.sig(r["compute"], 3), N.fixed(r["loss"]), N.fixed(r["fitted"])] for r in doc["rungs"]])
    f = doc["fit"]
    linf = f"{N.fixed(f['L_inf'])} (pinned)" if f["pinned"] else f"{N.fixed(f['L_inf'])} ± {N.fixed(f['L_inf_err'])}"
    print(f"\nL(C) = L_inf + A·C^-alpha   L_inf = {linf}   A = {N.sig(f['A'])} ± {N.sig(f['A_err'], 2)}   "
          f"alpha = {N.fixed(f['alpha'])} ± {N.fixed(f['alpha_err'])}")
    for p in doc["predictions"]:
        print(f"predicted at C = {N.sig(p['compute'], 3)}: {N.fixed(p['loss'])}  "
              f"(leave-one-out band {N.fixed(p['lo'])} – {N.fixed(p['hi'])})")
    dev = doc.get("hero_deviation")
    if dev:
        print(f"hero at step {N.count(dev['step'])}: {N.fixed(dev['value'])} vs predicted {N.fixed(dev['predicted'])}"
              f"  ({N.percent(dev['deviation'], 2, signed=True)})")
    if doc.get("preregistered_loss") is not None:
        print(f"pre-registered loss: {N.sig(doc['preregistered_loss'], 6)}")
    print()
    print(ladder_chart(pts, fit, predict))
