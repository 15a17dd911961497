"""`ladder --isoflop ENTITY/PROJECT`: Marin's isoFLOP analysis of a synced sweep, as text or JSON."""

from __future__ import annotations

import re

from marinctl.cli import output


def isoflop_command(project: str, *, metric: str, pin: float | None, predict: list[float] | None, where: str | None,
                    json_out: bool, points: str | None) -> None:
    from marinctl.analysis.scaling import isoflop as iso
    from marinctl.errors import UserError
    from marinctl.paths import db_path
    from marinctl.store import open_store

    if points:
        raise UserError("--points fits a CSV of optima; --isoflop reads a synced sweep", "drop one of them")
    parts = project.strip().strip("/").split("/")
    if len(parts) != 2 or not all(re.fullmatch(r"[A-Za-z0-9_.+\-]+", p) for p in parts):
        raise UserError(f"--isoflop takes ENTITY/PROJECT, not {project!r}",
                        "e.g. `marinctl ladder --isoflop marin-community/dial_moe`")
    computes = list(predict or iso.DEFAULT_PREDICT)
    for c in computes:
        if not c > 0:
            raise UserError(f"--predict compute must be positive, not {c}", "e.g. --predict 1e21")
    select = None
    if where is not None:
        from marinctl.analysis.select import parse

        select = parse(where)
    entity, name = parts
    if not db_path().exists():
        raise UserError("the store holds no runs yet", f"mirror the sweep first: `marinctl sync {entity}/{name}`")
    with open_store().connect() as con:
        pts, skipped = iso.points_from_store(con, entity, name, metric, select)
    if not pts:
        why = f" ({skipped[0]['run']}: {skipped[0]['reason']})" if skipped else ""
        raise UserError(f"no run of {entity}/{name} has a budget, tokens and {metric!r}{why}",
                        "check the metric with --metric, or the runs with `marinctl runs --where name~isoflop`")
    result = iso.analyze(pts, pin=pin, skipped=skipped)
    doc = {"project": f"{entity}/{name}", "metric": metric,
           "budgets": [b.as_dict() for b in result.budgets],
           "fit": result.fit.as_dict() if result.fit else None,
           "tokens_opt": result.tokens_opt.as_dict() if result.tokens_opt else None,
           "params_opt": result.params_opt.as_dict() if result.params_opt else None,
           "predictions": result.predictions(computes),
           "skipped": result.skipped, "notes": result.notes}
    if json_out:
        output.print_json(doc)
        return
    _render(doc, result)


def _render(doc: dict, result) -> None:
    from marinctl import numbers as N
    from marinctl.render.ladder import isoflop_chart
    from marinctl.text import inert

    runs = sum(b["runs"] for b in doc["budgets"])
    print(f"isoFLOP sweep {inert(doc['project'], single_line=True)} · metric {inert(doc['metric'], single_line=True)}"
          f" · {runs} runs in {len(doc['budgets'])} budgets")
    rows = []
    for b in doc["budgets"]:
        o = b["optimum"]
        lo, hi = b["tokens_range"]
        state = "" if b["used_in_fit"] else ("not bracketed" if o["tokens"] is not None else "no fit")
        rows.append((N.sig(b["compute"], 3), b["runs"], f"{N.sig(lo, 3)} – {N.sig(hi, 3)}", N.sig(o["tokens"], 4),
                     N.sig(o["params"], 4), N.fixed(o["loss"]), state))
    output.print_table(["budget C", "runs", "tokens of runs", "T* tokens", "N* params", "L* loss", ""], rows)
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
            print(f"{label} = {N.sig(fit['coef'], 3)} · C^{N.fixed(fit['exponent'], 3)}{err}")
    f = doc["fit"]
    if f:
        linf = f"{N.fixed(f['L_inf'])} (pinned)" if f["pinned"] else f"{N.fixed(f['L_inf'])} ± {N.fixed(f['L_inf_err'])}"
        print(f"L(C)  = L_inf + A·C^-alpha   L_inf = {linf}   A = {N.sig(f['A'])}   "
              f"alpha = {N.fixed(f['alpha'])} ± {N.fixed(f['alpha_err'])}")
    for p in doc["predictions"]:
        loss = "" if p["loss"] is None else (f"loss {N.fixed(p['loss'])} (leave-one-out {N.fixed(p['lo'])} – "
                                             f"{N.fixed(p['hi'])})")
        print(f"at C = {N.sig(p['compute'], 3)}: {loss}  T* {N.sig(p['tokens'], 3)}  N* {N.sig(p['params'], 3)}")
    print()
    print(isoflop_chart(result.budgets))
