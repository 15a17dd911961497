"""`ladder --isoflop ENTITY/PROJECT [--against ENTITY/PROJECT]`: Marin's isoFLOP analysis of a synced
sweep with intervals, and a second sweep's effective speed-up over it, as text or JSON."""

from __future__ import annotations

import re

from marinctl.cli import output


def isoflop_command(project: str, *, metric: str, pin: float | None, predict: list[float] | None, where: str | None,
                    json_out: bool, points: str | None, level: float = 0.9, against: str | None = None) -> None:
    from marinctl.analysis.scaling import isoflop as iso
    from marinctl.errors import UserError

    if points:
        raise UserError("--points fits a CSV of optima; --isoflop reads a synced sweep", "drop one of them")
    computes = list(predict or iso.DEFAULT_PREDICT)
    for c in computes:
        if not c > 0:
            raise UserError(f"--predict compute must be positive, not {c}", "e.g. --predict 1e21")
    select = None
    if where is not None:
        from marinctl.run_query import parse

        select = parse(where)
    doc, result = _sweep(iso, project, "--isoflop", metric, pin, select, level, computes)
    cand = None
    if against is not None:
        cand_doc, cand = _sweep(iso, against, "--against", metric, pin, select, level, computes)
        doc["candidate"] = cand_doc
        doc["effective_speedup"] = _speedup(result, cand, pin, computes, level)
    if json_out:
        output.print_json(doc)
        return
    _render(doc, result)
    if cand is not None:
        _render_against(doc, result, cand, computes)


def _sweep(iso, project: str, flag: str, metric: str, pin, select, level: float, computes):
    """One synced sweep analysed: (its document, the analysis)."""
    from marinctl.errors import UserError
    from marinctl.store import open_store

    parts = project.strip().strip("/").split("/")
    if len(parts) != 2 or not all(re.fullmatch(r"[A-Za-z0-9_.+\-]+", p) for p in parts):
        raise UserError(f"{flag} takes ENTITY/PROJECT, not {project!r}",
                        "e.g. `marinctl ladder --isoflop marin-community/dial_moe`")
    entity, name = parts
    store = open_store()
    if not store.exists():
        raise UserError("the store holds no runs yet", f"mirror the sweep first: `marinctl sync {entity}/{name}`")
    with store.connect() as con:
        pts, skipped = iso.points_from_store(con, entity, name, metric, select)
    if not pts:
        why = f" ({skipped[0]['run']}: {skipped[0]['reason']})" if skipped else ""
        raise UserError(f"no run of {entity}/{name} has a budget, tokens and {metric!r}{why}",
                        "check the metric with --metric, or the runs with `marinctl runs --where name~isoflop`")
    result = iso.analyze(pts, pin=pin, skipped=skipped, level=level)
    doc = {"project": f"{entity}/{name}", "metric": metric, "level": level,
           "budgets": [b.as_dict() for b in result.budgets],
           "fit": result.fit.as_dict() if result.fit else None,
           "tokens_opt": result.tokens_opt.as_dict() if result.tokens_opt else None,
           "params_opt": result.params_opt.as_dict() if result.params_opt else None,
           "predictions": result.predictions(computes),
           "skipped": result.skipped, "notes": result.notes}
    return doc, result


def _optima(result) -> tuple[list[float], list[float]]:
    used = [b for b in result.budgets if b.used]
    return [b.compute for b in used], [b.loss for b in used]


def _speedup(base, cand, pin, computes, level: float) -> list[dict]:
    """k at each of the candidate's budgets and at the predicted computes, from both sweeps' optima."""
    from marinctl.analysis.scaling.speedup import effective_speedup
    from marinctl.errors import UserError

    if base.fit is None or cand.fit is None:
        which = "the baseline" if base.fit is None else "the candidate"
        raise UserError(f"{which} has fewer than three budgets with a bracketed optimum: no L(C) to compare",
                        "see its notes with `marinctl ladder --isoflop ENTITY/PROJECT`")
    bc, by = _optima(base)
    cc, cy = _optima(cand)
    return effective_speedup(bc, by, cc, cy, pin, sorted(set(cc) | set(computes)), level)


def _render(doc: dict, result) -> None:
    from marinctl import numbers as N
    from marinctl.render.ladder import constants_line, isoflop_chart, span
    from marinctl.text import inert

    pct = N.percent(doc["level"], 0)
    runs = sum(b["runs"] for b in doc["budgets"])
    print(f"isoFLOP sweep {inert(doc['project'], single_line=True)} · metric {inert(doc['metric'], single_line=True)}"
          f" · {runs} runs in {len(doc['budgets'])} budgets · {pct} intervals")
    rows = []
    for b in doc["budgets"]:
        o = b["optimum"]
        lo, hi = b["tokens_range"]
        olo, ohi = o.get("lo") or {}, o.get("hi") or {}
        state = "" if b["used_in_fit"] else ("not bracketed" if o["tokens"] is not None else "no fit")
        rows.append((N.sig(b["compute"], 3), b["runs"], f"{N.sig(lo, 3)} – {N.sig(hi, 3)}", N.sig(o["tokens"], 4),
                     _sig_span(olo.get("tokens"), ohi.get("tokens")), N.sig(o["params"], 4), N.fixed(o["loss"]),
                     span(olo.get("loss"), ohi.get("loss")) if olo else "", state))
    output.print_table(["budget C", "runs", "tokens of runs", "T* tokens", pct, "N* params", "L* loss", pct, ""], rows)
    for note in doc["notes"]:
        output.info(f"note: {inert(note, single_line=True)}")
    for s in doc["skipped"][:5]:
        output.info(f"skipped {inert(s['run'], single_line=True)}: {s['reason']}")
    if len(doc["skipped"]) > 5:
        output.info(f"… {len(doc['skipped']) - 5} more runs skipped (see --json)")
    print()
    for label, fit in (("T*(C)", doc["tokens_opt"]), ("N*(C)", doc["params_opt"])):
        if fit:
            err = "" if fit["exponent_err"] is None else f" ± {N.fixed(fit['exponent_err'], 3)}"
            ci = "" if fit["lo"] is None else f"  (exponent {pct}: {span(fit['lo'], fit['hi'], 3)})"
            print(f"{label} = {N.sig(fit['coef'], 3)} · C^{N.fixed(fit['exponent'], 3)}{err}{ci}")
    f = doc["fit"]
    if f:
        print(constants_line(f))
    for p in doc["predictions"]:
        loss = "" if p["loss"] is None else (f"loss {N.fixed(p['loss'])} ({pct} {span(p['lo'], p['hi'])}; one run "
                                             f"{span(p['run_lo'], p['run_hi'])})")
        print(f"at C = {N.sig(p['compute'], 3)}: {loss}  T* {N.sig(p['tokens'], 3)}  N* {N.sig(p['params'], 3)}")
    print()
    print(isoflop_chart(result.budgets))


def _sig_span(lo, hi) -> str:
    from marinctl import numbers as N

    if lo is None and hi is None:
        return ""
    ends = ["∞" if x is not None and x == float("inf") else N.sig(x, 3) for x in (lo, hi)]
    return f"{ends[0]} – {ends[1]}"


def _render_against(doc: dict, base, cand, computes) -> None:
    from marinctl import numbers as N
    from marinctl.cli.ladder import speedup_table
    from marinctl.render.ladder import speedup_chart

    print(f"\ncandidate sweep {doc['candidate']['project']}:")
    f = doc["candidate"]["fit"]
    if f:
        from marinctl.render.ladder import constants_line

        print(constants_line(f))
    speedup_table(doc["effective_speedup"], N.percent(doc["level"], 0))
    bc, by = _optima(base)
    cc, cy = _optima(cand)
    print()
    print(speedup_chart([{"compute": c, "loss": y} for c, y in zip(bc, by)], base.fit,
                        [{"compute": c, "loss": y} for c, y in zip(cc, cy)], cand.fit, computes))
