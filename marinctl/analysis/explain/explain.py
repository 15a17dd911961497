"""`explain step N`: what is unusual at or near a step — every cause, once each, ranked, with
evidence and a reason.

Findings come from the same detectors sync runs (detectors.py): where sync's detection has
settled around N (detection.settled) what it stored is read, else the detectors are re-run
locally on the full-resolution history around N — so explain works even before detection has
run — and merged with stored detections (episodes that started earlier; a window, however
long ago it began, when N lies inside it). The local run reads the run's
lineage (a fork child's parent up to the fork), as detection does, so the first steps after a
fork have a baseline. Each finding carries its evidence (values vs baseline, robust scores,
exact Δ‖θ‖² shares, an event's steps, a trend's window), a cause class from the contract's
vocabulary (the causes the big-run logbooks and papers tell apart: OPT-175B, BLOOM, PaLM,
OLMo 2, Wortsman et al., DeepSeek-V3), a confidence, and a paragraph a student of a
from-scratch LLM course can follow (explanations.py). Same-cause detections at one moment are one finding,
causes are ranked, and a `summary` line names every cause that coincides at the step
(ranking.py). Returns the CLI contract's JSON for `explain step N --json`.
"""

from __future__ import annotations

from typing import Any

from marinctl.analysis.explain import context as ctx_mod
from marinctl.analysis.detect import detection
from marinctl.analysis.detect import detectors as D
from marinctl.analysis.explain import ranking
from marinctl.analysis.explain import roles as roles_mod
from marinctl.analysis.explain.explanations import ROLE_NOTES, explanation
from marinctl.errors import UnknownMetric, UnknownStep, UserError
from marinctl.store import Connection
from marinctl.store import anomalies as anomalies_store
from marinctl.store import metrics as M
from marinctl.store.lineage import Target

__all__ = ["ROLE_NOTES", "anomalies", "explain", "wandb_url"]

NEAR = 30            # steps either side of N searched for findings (at least 3 logged rows)
WINDOW_KINDS = D.WINDOW_KINDS


def wandb_url(run: dict[str, Any]) -> str | None:
    if run.get("url"):
        return run["url"]
    if run.get("entity") and run.get("project") and run.get("source") == "wandb":
        return f"https://wandb.ai/{run['entity']}/{run['project']}/runs/{run['run_id']}"
    return None


def _confidence(a: dict[str, Any]) -> float:
    return ranking.confidence(a["kind"], a["details"])


def _finding(con, target: Target, a: dict[str, Any], recipe) -> dict[str, Any]:
    from marinctl.analysis.explain import attribution as att_mod
    run = target.run_at(a["step"])
    d = dict(a["details"])
    attribution: list[dict[str, Any]] = []
    if a["kind"] == "param_norm_jump" and d.get("attribution") is not None:
        attribution = d.pop("attribution")      # the detector attributed it already
    elif a["kind"] == "param_norm_jump" and d.get("previous_step") is not None:
        att = att_mod.attribute(con, target.segments, recipe, int(d["previous_step"]), a["step"])
        if att is not None:
            d.update(att_mod.evidence(att))
            attribution = d.pop("attribution")
    if a["kind"] in ("routing_entropy_drop", "router_zloss_jump", "overflow_rise"):
        sub = {"routing_entropy_drop": "routing_entropy", "router_zloss_jump": "router_z_loss",
               "overflow_rise": "capacity_overflow_rate"}[a["kind"]]
        layers = att_mod.router_layers(con, target.segments, sub, a["step"])
        if layers:
            attribution = [{"name": f"train/router/layer_{r['layer']}/{sub}", "share": r["share"]} for r in layers[:8]]
    a2 = {**a, "details": d}
    links = [u for u in [wandb_url(run)] if u]
    return {"metric": a["metric"], "kind": a["kind"], "step": a["step"], "run": run["run_id"],
            "cause_class": a["cause_class"], "confidence": round(_confidence(a2), 3), "score": a["score"],
            "attribution": attribution, "explanation": explanation(a2, recipe), "evidence": d, "links": links}


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


def _reading(con: Connection, target: Target, run: dict[str, Any]) -> tuple[Target, D.RunFrame]:
    """What explain reads around a step: the target, or for a single fork child its whole lineage
    (its parent up to the fork gives the first steps after it a baseline), as detection reads it."""
    from marinctl.store.lineage import stitched_target

    if not target.stitched and run.get("fork_parent"):
        lineage = stitched_target(run["run_id"], run, con)
        if len(lineage.runs) > 1:
            target = lineage
    fr = D.frame_of(con, run)
    fr.segments, fr.own_lo = list(target.segments), 0
    return target, fr


def _interval(con: Connection, target: Target, step: int) -> int:
    """The loss's usual logging interval around `step` (1 when it logs every step)."""
    import numpy as np

    steps, _ = M.series(con, target.segments, D.LOSS, step - 300, step + 301)
    return max(int(np.median(np.diff(steps))), 1) if len(steps) > 2 else 1


def _settled(con: Connection, reading: Target, run: dict[str, Any], step: int, near: int) -> bool:
    """Whether sync's detection already scored the steps around N for good, within one run's own
    segment: then its stored findings are what the detectors would find here, and are read instead
    of found again (most of explain's time on a hero-scale run)."""
    seg = next(((lo, hi) for r, (_, lo, hi) in zip(reading.runs, reading.segments) if r["run_pk"] == run["run_pk"]), None)
    if seg is None or (seg[0] is not None and step - near < seg[0]) or (seg[1] is not None and step + near >= seg[1]):
        return False
    return detection.settled(con, run["uid"], step + near + D.LOOKAHEAD)


def _key(metric: str, kind: str, step: int) -> tuple:
    """What makes a detection found here the same as one stored: a window's kind and first step
    (its metric names the leaf that led it, which depends on how much was read)."""
    return (kind, step) if kind in WINDOW_KINDS else (metric, kind, step)


def explain(con: Connection, target: Target, step: int, metric: str | None = None) -> dict[str, Any]:
    """The contract's `explain step N --json` document for `target` at `step`."""
    lo, hi = _bounds(con, target)
    if lo is None:
        raise UserError(f"{target.name} has no history stored yet", "mirror it with `marinctl sync` first")
    if step < lo or step > hi:
        raise UnknownStep(f"step {step} is outside {target.name}'s history ({lo:,}–{hi:,})",
                          f"try `marinctl explain step {min(max(step, lo), hi)}`")
    if metric is not None and M.key_id(con, metric) is None:
        raise UnknownMetric(f"no metric {metric!r} in the store", "list keys with `marinctl sql \"SELECT key FROM metric_keys\"`")
    run = target.run_at(step)
    recipe = roles_mod.recipe_roles(run)
    reading, fr = _reading(con, target, run)
    interval = _interval(con, reading, step)
    near = max(NEAR, 3 * interval)
    owner_pk = lambda s: reading.run_at(s)["run_pk"]  # noqa: E731
    local = [] if _settled(con, reading, run, step, near) else D.scan(
        con, fr, max(step - near, 0), step + near + 1, overlap=True, owner=owner_pk,
        refs=detection.saved_refs(con, run["uid"]))
    found: dict[tuple, dict[str, Any]] = {}
    for a in local:
        found[_key(a.metric, a.kind, a.step)] = {"run_pk": a.run_pk, "step": a.step, "metric": a.metric, "kind": a.kind,
                                                 "score": a.score, "cause_class": a.cause_class, "details": a.details}
    nearby = anomalies_store.stored(con, reading, step - 2000, step + near)
    # a window stored by sync covers N however long ago it began (a collapse, a drift: one finding)
    windows = anomalies_store.stored(con, reading, None, step - 2000, kinds=WINDOW_KINDS)
    for a in nearby + windows:
        d = a["details"]
        end = d.get("end", a["step"])
        if not (a["step"] >= step - near or (d.get("start") is not None and end >= step - near)):
            continue
        key = _key(a["metric"], a["kind"], a["step"])
        have = found.get(key)
        # the same window found here and stored: the longer reading of it (here it ends where the read ended)
        if have is None or (isinstance(end, int) and end > have["details"].get("end", have["step"])):
            found[key] = a
    # lineage points the stitched view knows about (forks of earlier runs in the chain)
    for p in ctx_mod.lineage_points(reading, step, near):
        found.setdefault(("_lineage", "fork", p["step"]), {
            "step": p["step"], "metric": "_lineage", "kind": "fork", "score": 1.0, "cause_class": "infrastructure",
            "details": {"fork_parent": p["parent"], "fork_step": p["fork_step"], "run": p["run"]}})
    calm = not any(a["metric"] in (D.LOSS, D.GRAD) for a in found.values())
    for a in found.values():
        if a["kind"] == "param_norm_jump":
            a["details"] = {**a["details"], "loss_calm": calm}
    findings = [_finding(con, reading, a, recipe) for a in found.values()]
    if metric is not None:
        findings = [f for f in findings if f["metric"] == metric or f["metric"] in ("_lineage", "_step")] or findings
    findings = ranking.ranked(ranking.merge(findings, step, interval), step, interval)
    exclude = {f["metric"] for f in findings}
    doc: dict[str, Any] = {
        "run": target.name, "step": step, "run_at_step": run["run_id"], "stitched": target.stitched,
        "metric": metric, "summary": ranking.summary(findings, step, interval, near), "findings": findings,
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
