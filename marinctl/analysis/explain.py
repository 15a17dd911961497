"""`explain step N`: what is unusual at or near a step, ranked, with evidence and a reason.

Findings come from the same detectors sync runs (detectors.py), re-run locally on the
full-resolution history around N — so explain works even before detection has run — merged
with stored detections (episodes that started earlier). Each finding carries its evidence
(values vs baseline, robust scores, exact Δ‖θ‖² shares), a cause class from the contract's
vocabulary (peers.md §B.3), a confidence, and a paragraph a student of a from-scratch LLM
course can follow. Returns the contract's JSON (cli-contract.md `explain step N --json`).
"""

from __future__ import annotations

from typing import Any

from marinctl.analysis import attribution as att_mod
from marinctl.analysis import context as ctx_mod
from marinctl.analysis import detection
from marinctl.analysis import detectors as D
from marinctl.analysis import roles as roles_mod
from marinctl.errors import UserError
from marinctl.store import Connection
from marinctl.store import anomalies as anomalies_store
from marinctl.store import metrics as M
from marinctl.store.lineage import Target

NEAR = 30            # steps either side of N searched for findings
_KIND_WEIGHT = {"nonfinite": 5.0, "co_spike": 3.0, "sustained_rise": 3.0, "spike": 2.5, "rewind": 2.2, "fork": 2.0,
                "step_gap": 2.0, "resume": 1.8, "throughput_collapse": 1.8, "grad_spike": 1.6, "hyperball_drift": 1.6,
                "routing_entropy_drop": 1.5, "drop_fraction_rise": 1.5, "overflow_rise": 1.5, "router_zloss_jump": 1.5,
                "param_norm_jump": 1.4}
_CONFIDENCE = {"nonfinite": 0.99, "fork": 0.95, "rewind": 0.9, "step_gap": 0.9, "resume": 0.85,
               "throughput_collapse": 0.8, "hyperball_drift": 0.8, "grad_spike": 0.5, "sustained_rise": 0.6}


ROLE_NOTES = {
    roles_mod.HEURISTIC: "set without gradients by the load-balancing rule (QB replaces it each step, so its norm can jump in one step)",
    roles_mod.MUONH: "trained by MuonH: its Frobenius norm is held constant (hyperball), so any drift is abnormal",
    roles_mod.ADAMH: "trained by AdamH: its Frobenius norm is held constant (hyperball), so any drift is abnormal",
    roles_mod.ADAM: "trained by Adam: its norm may drift slowly, but should not jump",
    roles_mod.BUFFER: "a buffer, not a trained parameter",
}


def _fmt(x: Any) -> str:
    if isinstance(x, float):
        return f"{x:.4g}"
    return str(x)


def wandb_url(run: dict[str, Any]) -> str | None:
    if run.get("url"):
        return run["url"]
    if run.get("entity") and run.get("project") and run.get("source") == "wandb":
        return f"https://wandb.ai/{run['entity']}/{run['project']}/runs/{run['run_id']}"
    return None


def _confidence(a: dict[str, Any]) -> float:
    d = a["details"]
    if "confidence" in d:
        return float(d["confidence"])
    if a["kind"] == "co_spike":
        return 0.8 if d.get("precursor_steps") else 0.55
    if a["kind"] == "spike":
        return 0.65
    return _CONFIDENCE.get(a["kind"], 0.6)


def _explanation(a: dict[str, Any], recipe: roles_mod.RecipeRoles) -> str:
    d, kind, step = a["details"], a["kind"], a["step"]
    if kind == "param_norm_jump":
        mods = d.get("by_module") or []
        top = mods[0] if mods else None
        label = roles_mod.MODULE_LABELS.get(top["module"], top["module"]) if top else "no module"
        share = f"{top['share']:.0%}" if top else "?"
        if a["cause_class"] == "heuristic_parameter":
            rule = ("Marin's Quantile Balancing (QB) replaces the bias every step with a value solved from a quantile "
                    "of the previous step's router logits, so its norm can jump in a single step"
                    if recipe.bias_rule == "qb" else "the load-balancing rule sets it without gradients")
            return (f"The total parameter norm jumped at step {step}, and {share} of the change in ‖θ‖² comes from the "
                    f"router bias. The router bias is not trained by gradients: {rule}. It only shifts which experts "
                    "each token is sent to; it does not change what any expert computes. This is expected balancing "
                    "dynamics, not instability" + (
                        "; loss and gradient norm stayed calm around it." if d.get("loss_calm") else
                        " — but loss or gradient norm also moved nearby: see the other findings."))
        if a["cause_class"] == "moe_routing":
            return (f"The total parameter norm jumped at step {step}, driven by the router bias ({share}), and the bias "
                    "moved further than its sign-rule update (±γ per expert per step, at most γ·√E in norm) allows. "
                    "That points to a different update rule or a bug in load balancing.")
        return (f"The total parameter norm jumped at step {step}; {share} of the change in ‖θ‖² is in {label}. "
                "Matrices trained by MuonH/AdamH should keep their norm, so a jump there means the optimizer "
                "did something unusual; Adam-trained parameters (embeddings, router, gates) can grow, but not suddenly.")
    if kind == "co_spike" and d.get("precursor_steps"):
        return (f"The gradient norm spiked at step {d.get('grad_step')} ({_fmt(d.get('grad_value'))} vs a typical "
                f"{_fmt(d.get('grad_baseline'))}), and one step later the loss spiked ({_fmt(d.get('value'))} vs "
                f"{_fmt(d.get('baseline'))}). A big gradient makes a big update; the next batch then sees a damaged "
                "model. That order — gradient first, loss after — is the optimizer/learning-rate signature seen in "
                "BLOOM's 104B run and OLMo 2 (the usual fixes are a lower LR, smaller Adam ε/β2, or skipping the step).")
    if kind == "co_spike":
        return (f"Loss and gradient norm spiked together at step {step} with nothing unusual the step before. The "
                "gradient and loss of a step are computed on the same batch, so a batch unlike the rest raises both "
                "at once; PaLM found such spikes came from particular batches meeting a particular model state.")
    if kind == "spike":
        return (f"The loss at step {step} was {_fmt(d.get('value'))}, against a typical {_fmt(d.get('baseline'))} over the "
                f"previous {d.get('window')} steps (robust z {_fmt(d.get('z'))}), and the gradient norm gave no warning "
                "the step before. A loss spike without a gradient precursor usually means an unusual batch of data "
                "(PaLM, OLMo 2: e.g. long repeated n-grams), not an optimizer problem. If the loss comes straight back, "
                "training is healthy.")
    if kind == "grad_spike":
        return (f"The gradient norm spiked at step {step} ({_fmt(d.get('value'))} vs {_fmt(d.get('baseline'))}) without a "
                "loss spike after it. Gradient spikes often come before loss spikes (OLMo 2); one that passes quietly "
                "is worth watching, not yet a problem.")
    if kind == "sustained_rise":
        return (f"From step {d.get('start')} the loss stayed more than {d.get('threshold_ratio', 1.5) - 1:.0%} above its "
                f"trend for {d.get('steps')} steps (up to {_fmt(d.get('max_ratio'))}× trend) — Marin's own alert for a "
                "run that may be diverging rather than spiking and recovering.")
    if kind == "nonfinite":
        return (f"{a['metric']} became {d.get('value')} at step {d.get('first_step')} ({d.get('count')} non-finite values "
                "in this window). NaN/Inf means a numerical overflow somewhere; Marin's trainer stops on a non-finite loss.")
    if kind == "fork":
        return (f"Run {d.get('run')} was forked from {d.get('fork_parent')} at step {d.get('fork_step')}: from here on a "
                "new W&B run continues training, usually with a changed setting (Marin names the change in the run id). "
                "Differences right after this point come from that change or from the restart, not from the data.")
    if kind == "rewind":
        return (f"The history from step {d.get('rewound_from')} was rewritten after marinctl first saw it: the run was "
                "rolled back (W&B rewind) and those steps were trained again — what you see now is the second attempt.")
    if kind == "step_gap":
        return (f"{d.get('missing_steps')} steps are missing before step {step} (after {d.get('previous_step')}): the run "
                "restarted from a checkpoint past them, or logging dropped them.")
    if kind == "resume":
        return (f"{_fmt((d.get('wall_gap_s') or 0) / 60)} minutes of wall time passed between steps {d.get('previous_step')} "
                f"and {step} (a step usually takes {_fmt(d.get('median_step_s'))} s): the job stopped and resumed. "
                "Restarts can shift metrics slightly (data loader position, compiled kernels).")
    if kind == "throughput_collapse":
        return (f"From step {d.get('start')} throughput ran at {d.get('ratio', 0):.0%} of its recent baseline for "
                f"{d.get('steps')} steps (Marin alerts at a sustained 20–30% drop). That is an infrastructure problem — "
                "a slow node, network or storage — not a modelling one.")
    if kind == "hyperball_drift":
        return (f"{roles_mod.leaf_path(a['metric'])} is trained by {str(d.get('role')).upper()}, which puts each matrix back on "
                f"a sphere of fixed Frobenius norm after every step, so its norm should never move. At step {step} it is "
                f"{d.get('relative_drift', 0):.1%} away from its starting value ({d.get('leaves_drifting')} matrix(es) "
                "crossed 1% here): the projection is not holding — a config change or a numerics problem.")
    if kind in ("routing_entropy_drop", "drop_fraction_rise", "overflow_rise", "router_zloss_jump"):
        what = {"routing_entropy_drop": "routing entropy dropped (tokens crowd onto fewer experts)",
                "drop_fraction_rise": "the fraction of dropped expert assignments rose",
                "overflow_rise": "expert capacity overflow rose",
                "router_zloss_jump": "router z-loss jumped (router logits grew)"}[kind]
        return (f"At step {step} the {what}: {_fmt(d.get('value'))} vs a typical {_fmt(d.get('baseline'))}. After warm-up "
                "Marin treats sudden router-metric changes as instability signals (router collapse).")
    return f"{a['metric']} looks unusual at step {step}."


def _finding(con, target: Target, a: dict[str, Any], recipe, n: int) -> dict[str, Any]:
    run = target.run_at(a["step"])
    d = dict(a["details"])
    attribution: list[dict[str, Any]] = []
    if a["kind"] == "param_norm_jump" and d.get("previous_step") is not None:
        att = att_mod.attribute(con, target.segments, recipe, int(d["previous_step"]), a["step"])
        if att is not None:
            attribution = att.as_json(8)
            d["by_module"] = [{"module": r["module"], "label": r["label"], "share": r["share"]} for r in att.by_module[:6]]
            d["by_layer"] = [{"layer": r["layer"], "label": r["label"], "share": r["share"]} for r in att.by_layer[:6]]
            d["by_role"] = [{"role": r["role"], "share": r["share"]} for r in att.by_role]
            d["delta_sq"] = att.total_delta
            d["logged_delta_sq"] = att.logged_total_delta
    if a["kind"] in ("routing_entropy_drop", "router_zloss_jump", "overflow_rise"):
        sub = {"routing_entropy_drop": "routing_entropy", "router_zloss_jump": "router_z_loss",
               "overflow_rise": "capacity_overflow_rate"}[a["kind"]]
        layers = att_mod.router_layers(con, target.segments, sub, a["step"])
        if layers:
            attribution = [{"name": f"train/router/layer_{r['layer']}/{sub}", "share": r["share"]} for r in layers[:8]]
    a2 = {**a, "details": d}
    conf = _confidence(a2)
    weight = _KIND_WEIGHT.get(a["kind"], 1.0) * (0.5 if a["cause_class"] == "heuristic_parameter" else 1.0)
    rank = weight * conf / (1.0 + abs(a["step"] - n) / 10.0)
    links = [u for u in [wandb_url(run)] if u]
    return {"metric": a["metric"], "kind": a["kind"], "step": a["step"], "run": run["run_id"],
            "cause_class": a["cause_class"], "confidence": round(conf, 3), "score": a["score"],
            "attribution": attribution, "explanation": _explanation(a2, recipe), "evidence": d,
            "links": links, "_rank": rank}


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


def explain(con: Connection, target: Target, step: int, metric: str | None = None) -> dict[str, Any]:
    """The contract's `explain step N --json` document for `target` at `step`."""
    lo, hi = _bounds(con, target)
    if lo is None:
        raise UserError(f"{target.name} has no history stored yet", "mirror it with `marinctl sync` first")
    if step < lo or step > hi:
        raise UserError(f"step {step} is outside {target.name}'s history ({lo:,}–{hi:,})",
                        f"try `marinctl explain step {min(max(step, lo), hi)}`")
    if metric is not None and M.key_id(con, metric) is None:
        raise UserError(f"no metric {metric!r} in the store", "list keys with `marinctl sql \"SELECT key FROM metric_keys\"`")
    run = target.run_at(step)
    recipe = roles_mod.recipe_roles(run)
    fr = D.RunFrame(run, list(target.segments), 0, ctx_mod.warmup_end_step(run), recipe)
    owner_pk = lambda s: target.run_at(s)["run_pk"]  # noqa: E731
    refs = detection.saved_refs(con, run["uid"])
    local = D.scan(con, fr, max(step - NEAR, 0), step + NEAR + 1, overlap=True, owner=owner_pk, refs=refs)
    found: dict[tuple, dict[str, Any]] = {}
    for a in local:
        found[(a.metric, a.kind, a.step)] = {"run_pk": a.run_pk, "step": a.step, "metric": a.metric, "kind": a.kind,
                                             "score": a.score, "cause_class": a.cause_class, "details": a.details}
    for a in anomalies_store.stored(con, target, step - 2000, step + NEAR):
        d = a["details"]
        end = d.get("end", a["step"])
        if a["step"] >= step - NEAR or (d.get("start") is not None and end >= step - NEAR):
            found.setdefault((a["metric"], a["kind"], a["step"]), a)
    # lineage points the stitched view knows about (forks of earlier runs in the chain)
    for p in ctx_mod.lineage_points(target, step, NEAR):
        found.setdefault(("_lineage", "fork", p["step"]), {
            "step": p["step"], "metric": "_lineage", "kind": "fork", "score": 1.0, "cause_class": "infrastructure",
            "details": {"fork_parent": p["parent"], "fork_step": p["fork_step"], "run": p["run"]}})
    calm = not any(a["metric"] in (D.LOSS, D.GRAD) for a in found.values())
    for a in found.values():
        if a["kind"] == "param_norm_jump":
            a["details"] = {**a["details"], "loss_calm": calm}
    findings = [_finding(con, target, a, recipe, step) for a in found.values()]
    if metric is not None:
        findings = [f for f in findings if f["metric"] == metric or f["metric"] in ("_lineage", "_step")] or findings
    findings.sort(key=lambda f: -f["_rank"])
    for f in findings:
        f.pop("_rank")
    exclude = {f["metric"] for f in findings}
    doc: dict[str, Any] = {
        "run": target.name, "step": step, "run_at_step": run["run_id"], "stitched": target.stitched,
        "metric": metric, "findings": findings,
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


def anomalies(con: Connection, target: Target) -> list[dict[str, Any]]:
    """The contract's `anomalies --json` rows for a target (stored detections)."""
    return [{"run": a["run"], "step": a["step"], "metric": a["metric"], "kind": a["kind"], "score": a["score"],
             "cause_class": a["cause_class"], "details": a["details"]} for a in anomalies_store.stored(con, target)]
