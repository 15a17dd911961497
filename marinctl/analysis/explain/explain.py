"""`explain step N`: what is going on at a step — every cause, once each, ranked, with evidence
and a reason; and `explain --range A:B`: the first cause at every step of a span.

Findings come from the same detectors sync runs (detectors.py), read once for the span asked
about (reading.py: stored where detection has settled, found again elsewhere, the lineage's
forks). Each finding carries its episode (`start`, `end`, `open` when still under way at the last
logged row), its `severity`, whether it was already `under_way` long before the step, its
evidence (values vs baseline, robust scores, exact Δ‖θ‖² shares, an event's steps, a trend's
window, the alert bar a smaller deviation did not reach), a cause class from the contract's
vocabulary (the causes the big-run logbooks and papers tell apart: OPT-175B, BLOOM, PaLM,
OLMo 2, Wortsman et al., DeepSeek-V3), a confidence, and a paragraph a student of a
from-scratch LLM course can follow (explanations.py). Which findings answer a step, merged and
in what order, is ranking.py's — written down there once. Returns the CLI contract's JSON.
"""

from __future__ import annotations

from typing import Any

from marinctl.analysis.detect import detectors as D
from marinctl.analysis.explain import context as ctx_mod
from marinctl.analysis.explain import ranking
from marinctl.analysis.explain import reading as reading_mod
from marinctl.analysis.explain import roles as roles_mod
from marinctl.analysis.explain.explanations import ROLE_NOTES, explanation
from marinctl.errors import UnknownMetric, UnknownStep, UserError
from marinctl.store import Connection
from marinctl.store import anomalies as anomalies_store
from marinctl.store import metrics as M
from marinctl.store.lineage import Target

__all__ = ["ROLE_NOTES", "anomalies", "explain", "sweep", "wandb_url"]


def wandb_url(run: dict[str, Any]) -> str | None:
    if run.get("url"):
        return run["url"]
    if run.get("entity") and run.get("project") and run.get("source") == "wandb":
        return f"https://wandb.ai/{run['entity']}/{run['project']}/runs/{run['run_id']}"
    return None


def _decorated(con, target: Target, f: dict[str, Any], recipe, loss_calm: bool) -> dict[str, Any]:
    """A ranked finding made whole for a person: its run, attribution, explanation and links."""
    from marinctl.analysis.explain import attribution as att_mod
    run = target.run_at(f["step"])
    d = dict(f["evidence"])
    attribution: list[dict[str, Any]] = []
    if f["kind"] == "param_norm_jump":
        d["loss_calm"] = loss_calm
        if d.get("attribution") is not None:
            attribution = d.pop("attribution")      # the detector attributed it already
        elif d.get("previous_step") is not None:
            att = att_mod.attribute(con, target.segments, recipe, int(d["previous_step"]), f["step"])
            if att is not None:
                d.update(att_mod.evidence(att))
                attribution = d.pop("attribution")
    if f["kind"] in ("routing_entropy_drop", "router_zloss_jump", "overflow_rise"):
        sub = {"routing_entropy_drop": "routing_entropy", "router_zloss_jump": "router_z_loss",
               "overflow_rise": "capacity_overflow_rate"}[f["kind"]]
        layers = att_mod.router_layers(con, target.segments, sub, f["step"])
        if layers:
            attribution = [{"name": f"train/router/layer_{r['layer']}/{sub}", "share": r["share"]} for r in layers[:8]]
    a = {"metric": f["metric"], "kind": f["kind"], "step": f["step"], "cause_class": f["cause_class"], "details": d}
    return {"metric": f["metric"], "kind": f["kind"], "step": f["step"], "run": run["run_id"],
            "cause_class": f["cause_class"], "confidence": f["confidence"], "score": f["score"],
            "severity": f["severity"], "start": f["start"], "end": f["end"], "open": f["open"],
            "under_way": f["under_way"], "attribution": attribution, "explanation": explanation(a, recipe),
            "evidence": d, "links": [u for u in [wandb_url(run)] if u]}


def _metric_evidence(con, target: Target, key: str, step: int) -> dict[str, Any] | None:
    steps, values = M.series(con, target.segments, key, step - 1000, step + 1)
    if not len(steps):
        return None
    at = values[-1]
    hist = values[:-1][-D.SPIKE_WINDOW:]
    import numpy as np

    if len(hist) < 3:
        return {"metric": key, "step": int(steps[-1]), "value": float(at)}
    med = float(np.median(hist))
    mad = float(np.median(np.abs(hist - med)))
    z = 0.6745 * (at - med) / mad if mad > 0 else None
    return {"metric": key, "step": int(steps[-1]), "value": float(at), "baseline": med, "z": z, "points": len(hist)}


def _bounds(con: Connection, target: Target) -> tuple[int | None, int | None]:
    """First and last stored step of the target; from run metadata when sync recorded it (no scan)."""
    lasts = [r.get("last_step") for r in target.runs]
    if all(x is not None for x in lasts):
        lo = target.segments[0][1] or 0
        hi = target.leaf["last_step"] if target.segments[-1][2] is None else target.segments[-1][2] - 1
        return lo, hi
    return M.step_range(con, target.segments)


def _check(con: Connection, target: Target, steps: tuple[int, int], lo: int | None, hi: int | None,
           what: str) -> None:
    if lo is None:
        raise UserError(f"{target.name} has no history stored yet", "mirror it with `marinctl sync` first")
    if steps[0] < lo or steps[1] > hi:
        bad = steps[0] if steps[0] < lo else steps[1]
        raise UnknownStep(f"step {bad} is outside {target.name}'s history ({lo:,}–{hi:,})",
                          f"try `marinctl explain {what}`")


def explain(con: Connection, target: Target, step: int, metric: str | None = None) -> dict[str, Any]:
    """The contract's `explain step N --json` document for `target` at `step`."""
    lo, hi = _bounds(con, target)
    _check(con, target, (step, step), lo, hi, f"step {min(max(step, lo or 0), hi or 0)}")
    if metric is not None and M.key_id(con, metric) is None:
        raise UnknownMetric(f"no metric {metric!r} in the store", "list keys with `marinctl sql \"SELECT key FROM metric_keys\"`")
    run = target.run_at(step)
    recipe = roles_mod.recipe_roles(run)
    rd = reading_mod.read(con, target, step, step, hi)
    interval, near = rd.interval_at(step), rd.near_at(step)
    ranked = rd.at(step, metric)
    calm = not any(f["metric"] in (D.LOSS, D.GRAD) and ranking.span(f)[0] - near <= step <= ranking.span(f)[1] + near
                   for f in ranked)
    findings = [_decorated(con, rd.piece_at(step).reading, f, recipe, calm) for f in ranked]
    exclude = {f["metric"] for f in findings}
    doc: dict[str, Any] = {
        "run": target.name, "step": step, "run_at_step": run["run_id"], "stitched": target.stitched,
        "metric": metric, "summary": ranking.summary(ranked, step, interval, near), "findings": findings,
        "context": ctx_mod.context_at(con, target, step, exclude=exclude),
        "links": {"wandb": wandb_url(run)},
        "synthetic": bool(ctx_mod.config_of(run).get("synthetic")),
    }
    if metric is not None:
        doc["metric_evidence"] = _metric_evidence(con, target, metric, step)
        if doc["metric_evidence"] is not None and metric.startswith(("params/norm/", "grad/norm/")) and not metric.endswith("/total"):
            leaf = recipe.role(roles_mod.leaf_path(metric))
            doc["metric_evidence"].update(role=leaf.role, module=leaf.module, layer=leaf.layer,
                                          role_note=ROLE_NOTES.get(leaf.role, ""), roles_from=recipe.source)
    return doc


def sweep(con: Connection, target: Target, first: int, last: int, every: int = 1) -> list[dict[str, Any]]:
    """`explain --range FIRST:LAST --every K`: at every K-th step, the first finding's cause, kind,
    metric and severity (None where nothing is unusual) — each step answered as `explain step N`
    answers it, from one reading of the whole span (findings are read once, not once a step)."""
    lo, hi = _bounds(con, target)
    _check(con, target, (first, last), lo, hi, f"--range {max(first, lo or 0)}:{min(last, hi or 0)}")
    rd = reading_mod.read(con, target, first, last, hi)
    out = []
    for n, ranked in rd.each(range(first, last + 1, max(every, 1))):
        top = next(iter(ranked), None)
        out.append({"step": n, "cause_class": top and top["cause_class"], "kind": top and top["kind"],
                    "metric": top and top["metric"], "severity": top and top["severity"],
                    "start": top and top["start"], "end": top and top["end"]})
    return out


def anomalies(con: Connection, target: Target, detail: bool = False) -> list[dict[str, Any]]:
    """The contract's `anomalies --json` rows for a target: one per incident (incidents.py; `step`
    its peak), or with `detail` one per stored detection. Each row also carries `severity`,
    `detections` (how many) and `steps` (the detected steps) for the table."""
    from marinctl.analysis.detect import incidents as inc

    stored = anomalies_store.stored(con, target)
    if detail:
        out = []
        for a in stored:
            lo, hi = inc.span(inc.as_anomaly(a))
            out.append({"run": a["run"], "step": a["step"], "start": lo, "end": hi, "metric": a["metric"],
                        "kind": a["kind"], "score": a["score"], "cause_class": a["cause_class"],
                        "severity": inc.severity(a["kind"], a["cause_class"], ranking.confidence(a["kind"], a["details"])),
                        "detections": 1, "steps": [a["step"]], "details": a["details"]})
        return out
    names = {r["run_pk"]: r["run_id"] for r in target.runs}
    rows = [{"run": names.get(i.run_pk, str(i.run_pk)), "step": i.step, "start": i.start, "end": i.end, "metric": i.metric,
             "kind": i.kind, "score": i.score, "cause_class": i.cause_class, "severity": i.severity,
             "detections": i.detections, "steps": list(i.steps)} for i in inc.incidents([inc.as_anomaly(a) for a in stored])]
    return sorted(rows, key=lambda r: (r["start"], r["step"], r["metric"]))
