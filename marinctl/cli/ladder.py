"""`ladder`: fit L(C) = L_inf + A*C^-alpha across the rungs (or a CSV), predict with intervals, score
the hero against its band, compare two ladders (`--against`)."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from marinctl.cli import output


def register(app: typer.Typer) -> None:
    """Add this module's commands to the root app."""
    app.command("ladder", help=(
        "Fit L(C) = L_inf + A*C^-alpha across the synced ladder rungs (offline: Marin's published v16 isoFLOP "
        "table; or any CSV of compute,loss[,name]) and predict the hero's loss, with intervals at --level. "
        "With --isoflop ENTITY/PROJECT: Marin's isoFLOP analysis of a synced sweep (per budget a parabola of "
        "loss in log10 tokens, then T*(C), N*(C) and L(C)). With --against: the effective speed-up of a "
        "candidate ladder over the baseline."))(ladder)


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
    level: Annotated[float, typer.Option("--level", metavar="P", help=(
        "Level of every interval (constants, predictions, isoFLOP optima and exponents, speed-ups, the hero's band)."))] = 0.9,
    against: Annotated[Optional[str], typer.Option("--against", metavar="CSV|ENTITY/PROJECT", help=(
        "A candidate ladder to compare with the baseline (--points CSV, or --isoflop sweep): the effective "
        "speed-up k with L_cand(C) = L_base(k*C)."))] = None,
) -> None:
    from marinctl.analysis.scaling import ladder as lad
    from marinctl.errors import UserError

    if not 0.0 < level < 1.0:
        raise UserError(f"--level is the intervals' coverage, between 0 and 1 (not {level:g})",
                        "e.g. `marinctl ladder --level 0.9` for 90% intervals")
    if isoflop is not None:
        from marinctl.cli.ladder_isoflop import isoflop_command

        isoflop_command(isoflop, metric=metric, pin=pin, predict=predict, where=where, json_out=json_out,
                        points=points, level=level, against=against)
        return
    if where is not None:
        raise UserError("--where selects runs of an isoFLOP sweep", "add --isoflop ENTITY/PROJECT")
    if against is not None and not points:
        raise UserError("--against compares a candidate ladder with a baseline given the same way",
                        "give the baseline with --points BASE.csv (or two sweeps: --isoflop A --against B)")
    predict = list(predict or [lad.HERO_COMPUTE])
    for c in predict:
        if not c > 0:
            raise UserError(f"--predict compute must be positive, not {c}", "e.g. `marinctl ladder --predict 1e21`")
    source, live = "points", None
    if points:
        pts = lad.read_points(points)
        cand = lad.read_points(against) if against is not None else None
    else:
        pts, source, live = _rungs_or_published(lad, metric, pin, level)
        cand = None
    fit = lad.fit_power_law([p["compute"] for p in pts], [p["loss"] for p in pts], pin, level)
    doc = _ladder_doc(lad, pts, fit, predict)
    doc = {"source": source, "metric": metric, **doc}
    if live:
        doc.update(live)
    cand_fit = None
    if cand is not None:
        from marinctl.analysis.scaling.speedup import effective_speedup

        cand_fit = lad.fit_power_law([p["compute"] for p in cand], [p["loss"] for p in cand], pin, level)
        doc["candidate"] = _ladder_doc(lad, cand, cand_fit, predict)
        at = sorted({p["compute"] for p in cand} | set(predict))
        doc["effective_speedup"] = effective_speedup([p["compute"] for p in pts], [p["loss"] for p in pts],
                                                     [p["compute"] for p in cand], [p["loss"] for p in cand],
                                                     pin, at, level)
    if json_out:
        output.print_json(doc)
        return
    _render(doc, pts, fit, predict)
    if cand is not None:
        _render_against(doc, pts, fit, cand, cand_fit, predict)


def _ladder_doc(lad, pts, fit, predict) -> dict:
    """One ladder's fit, predictions and points, as the contract gives them."""
    return {"fit": fit.as_dict(), "predictions": [lad.prediction(fit, c) for c in predict],
            "rungs": [{"name": p["name"], "compute": p["compute"], "loss": p["loss"],
                       "fitted": float(fit.predict(p["compute"]))} for p in pts]}


def _rungs_or_published(lad, metric, pin, level):
    """Final metric of each synced rung; else the published v16 isoFLOP table (said so on stderr)."""
    from marinctl.analysis.scaling import hero_band
    from marinctl.errors import UserError
    from marinctl.store import open_store

    rs = []
    store = open_store()
    if store.exists():
        with store.connect() as con:
            rs = lad.rung_series(con, metric)
            if rs and not any(len(r["steps"]) for r in rs):
                raise UserError(f"no rung logged metric {metric!r}", "list a rung's keys with `marinctl show rung1`")
            rs = [r for r in rs if len(r["steps"])]
            if len(rs) >= 3:
                band = lad.predicted_band(con, metric, pin if pin is not None else 1.6, level)
                evals = hero_band.scored(con, metric, level, band=band) if band is not None else None
                live = {"hero_band": None if band is None else {k: [float(x) for x in v] for k, v in band.items()},
                        "hero_deviation": lad.hero_deviation(con, metric, band),
                        "hero": None if evals is None else [e.as_dict() for e in evals],
                        "preregistered_loss": lad.preregistered_loss(con)}
                pts = [{"name": f"{r['rung']} {r['name']}", "compute": r["compute"], "loss": float(r["values"][-1])} for r in rs]
                return pts, "rungs", live
    have = f"only {len(rs)} ladder rung(s) with {metric!r} synced" if rs else "no ladder rungs synced"
    output.info(f"{have} (reproductions are overlays, not rungs); fitting Marin's published v16 isoFLOP optima "
                "instead — `marinctl sync marin` mirrors the rungs")
    return lad.published_points(), "published-v16-isoflop", None


def _render(doc, pts, fit, predict) -> None:
    from marinctl import numbers as N
    from marinctl.render.ladder import band_chart, constants_line, ladder_chart, span
    from marinctl.text import inert

    print(f"source: {doc['source']}" + ("" if doc["source"] == "points" else f"   metric: {inert(doc['metric'])}"))
    output.print_table(["rung", "compute", "loss", "fitted"],
                       [[inert(r["name"]), N.sig(r["compute"], 3), N.fixed(r["loss"]), N.fixed(r["fitted"])] for r in doc["rungs"]])
    f = doc["fit"]
    pct = N.percent(f["level"], 0)
    print()
    print(constants_line(f))
    for p in doc["predictions"]:
        print(f"predicted at C = {N.sig(p['compute'], 3)}: {N.fixed(p['loss'])}  ({pct} interval "
              f"{span(p['lo'], p['hi'])}; one run's measured loss {span(p['run_lo'], p['run_hi'])})")
    if not fit.calibrated:
        output.info("note: as many points as fitted constants leave no residuals to measure the noise: the "
                    "intervals are unbounded — pin L_inf with --pin or add points")
    dev = doc.get("hero_deviation")
    if dev:
        print(f"hero at step {N.count(dev['step'])}: {N.fixed(dev['value'])} vs predicted {N.fixed(dev['predicted'])}"
              f"  ({N.percent(dev['deviation'], 2, signed=True)})")
    _render_hero(doc.get("hero"), pct)
    if doc.get("preregistered_loss") is not None:
        print(f"pre-registered loss: {N.sig(doc['preregistered_loss'], 6)}")
    print()
    print(ladder_chart(pts, fit, predict))
    if fit.calibrated:
        print(band_chart(pts, fit, predict))
    if fit.calibrated:
        print(band_chart(pts, fit, predict))


def _render_hero(evals, pct: str) -> None:
    """The hero against its band: how many evals inside, the last ones, and each stretch outside."""
    from marinctl import numbers as N
    from marinctl.analysis.scaling.hero_band import HeroEval, episodes
    from marinctl.render.ladder import span

    if not evals:
        return
    inside = sum(e["inside"] for e in evals)
    print(f"hero against the ladder's {pct} band for one run: {inside} of {len(evals)} evals inside")
    rows = [[N.count(e["step"]), N.sig(e["compute"], 3), N.fixed(e["loss"]), span(e["lo"], e["hi"]),
             "inside" if e["inside"] else ("above" if e["loss"] > e["hi"] else "below")] for e in evals[-5:]]
    output.print_table(["step", "compute so far", "loss", "band", ""], rows)
    eps = episodes([HeroEval(e["step"], e["compute"], e["loss"], e["lo"], e["hi"], e["predicted"]) for e in evals])
    for ep in eps:
        print(f"outside the band: steps {N.count(ep.start)}–{N.count(ep.end)} ({len(ep.evals)} evals, "
              f"{ep.figures['side']})")


def _render_against(doc, pts, fit, cand, cand_fit, predict) -> None:
    from marinctl import numbers as N
    from marinctl.render.ladder import constants_line, speedup_chart

    print("\ncandidate:")
    print(constants_line(doc["candidate"]["fit"]))
    speedup_table(doc["effective_speedup"], N.percent(doc["fit"]["level"], 0))
    print()
    print(speedup_chart(pts, fit, cand, cand_fit, predict))


def speedup_table(rows: list[dict], pct: str) -> None:
    """The effective speed-up at each compute, its interval and what it means at equal loss."""
    from marinctl import numbers as N
    from marinctl.render.ladder import span

    print(f"\neffective speed-up k (L_cand(C) = L_base(k·C)), {pct} intervals:")
    output.print_table(["compute", "k", "interval", "at equal loss"],
                       [[N.sig(s["compute"], 3), N.fixed(s["value"], 3), span(s["lo"], s["hi"], 3), _saves(s["value"])]
                        for s in rows])


def _saves(k: float) -> str:
    from marinctl import numbers as N

    if not k == k or k <= 0:
        return ""
    if k == float("inf"):
        return "the baseline never gets there"
    if k >= 1:
        return f"saves {N.percent(1 - 1 / k, 0)} of the compute"
    return f"needs {N.percent(1 / k - 1, 0)} more compute"
