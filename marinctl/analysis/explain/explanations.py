"""The words of a finding: a paragraph a student of a from-scratch LLM course can follow, and a
one-line headline for the summary that names every cause at a step.

Each paragraph says what was seen (the numbers in the evidence), which cause class that
signature points to and why — citing the run logbooks and papers the detectors' thresholds
come from (OPT-175B's chronicles, BLOOM's tr8-104B chronicles, PaLM, OLMo 2, Wortsman et al.
2023), named in each paragraph — and what people usually do about it.
"""

from __future__ import annotations

from typing import Any

from marinctl import numbers as N
from marinctl.analysis.explain import roles as roles_mod
ROLE_NOTES = {
    roles_mod.HEURISTIC: "set without gradients by the load-balancing rule (QB replaces it each step, so its norm can jump in one step)",
    roles_mod.MUONH: "trained by MuonH: its Frobenius norm is held constant (hyperball), so any drift is abnormal",
    roles_mod.ADAMH: "trained by AdamH: its Frobenius norm is held constant (hyperball), so any drift is abnormal",
    roles_mod.ADAM: "trained by Adam: its norm may drift slowly, but should not jump",
    roles_mod.BUFFER: "a buffer, not a trained parameter",
}
ROUTER_WHAT = {"routing_entropy_drop": "routing entropy dropped (tokens crowd onto fewer experts)",
               "drop_fraction_rise": "the fraction of dropped expert assignments rose",
               "overflow_rise": "expert capacity overflow rose",
               "router_zloss_jump": "router z-loss jumped (router logits grew)"}


def _v(x: Any) -> str:
    return N.measured(x)


def _times(value: Any, base: Any) -> str:
    """'×15.2' for a value against its baseline, or '' when either is missing."""
    if isinstance(value, (int, float)) and isinstance(base, (int, float)) and base:
        return f"×{N.sig(value / base, 3)}"
    return ""


def _span(d: dict[str, Any]) -> str:
    steps = d.get("event_steps") or []
    if len(steps) > 1:
        return f" The event spans logged steps {', '.join(N.count(s) for s in steps)}."
    return ""


def rise(x: Any) -> str:
    """A relative change: '+12.9%', or '×32.2' once it has more than doubled."""
    if isinstance(x, (int, float)) and x > 1:
        return f"×{N.sig(1 + x, 3)}"
    return N.percent(x, 1, signed=True)


def _signals(d: dict[str, Any]) -> str:
    parts = []
    for s in d.get("signals", []):
        label = {"lm_head": "lm_head norm", "z_loss": f"z-loss ({s['key']})", "max_logit": s["key"]}.get(s["signal"], s["key"])
        parts.append(f"{label} {rise(s['rise'])} (Mann–Kendall p = {N.sig(s['p'], 2)})")
    return "; ".join(parts)


def explanation(a: dict[str, Any], recipe: roles_mod.RecipeRoles) -> str:
    """The paragraph for one finding (a stored or freshly found detection as a dict)."""
    d, kind, step = a["details"], a["kind"], a["step"]
    if kind == "param_norm_jump":
        return _norm_jump(a, recipe)
    if kind == "co_spike" and d.get("precursor_steps"):
        stayed = (" The loss did not come back down afterwards: the update damaged the model, not just one step."
                  if d.get("loss_stayed_up") else "")
        return (f"The gradient norm spiked at step {N.count(d.get('grad_step'))} ({_v(d.get('grad_value'))} vs a typical "
                f"{_v(d.get('grad_baseline'))}), and {N.count(d.get('precursor_rows', 1))} logged step(s) later the loss "
                f"spiked ({_v(d.get('value'))} vs {_v(d.get('baseline'))}). A big gradient makes a big update; the next batch "
                "then sees a damaged model. That order — gradient first, loss after — is the optimizer/learning-rate signature "
                "seen in BLOOM's 104B run and OLMo 2 (the usual fixes are a lower LR, smaller Adam ε/β2, or skipping the step)."
                + _span(d) + stayed)
    if kind == "co_spike":
        return (f"Loss and gradient norm spiked together at step {N.count(step)} with nothing unusual the step before. The "
                "gradient and loss of a step are computed on the same batch, so a batch unlike the rest raises both "
                "at once; PaLM found such spikes came from particular batches meeting a particular model state." + _span(d))
    if kind == "spike":
        return (f"The loss at step {N.count(step)} was {_v(d.get('value'))}, against a typical {_v(d.get('baseline'))} over "
                f"the previous {d.get('window')} logged steps (robust z {N.sig(d.get('z'), 3)}), and the gradient norm gave no "
                "warning before it. A loss spike without a gradient precursor usually means an unusual batch of data "
                "(PaLM, OLMo 2: e.g. long repeated n-grams), not an optimizer problem. If the loss comes straight back, "
                "training is healthy." + _span(d))
    if kind == "grad_spike":
        return (f"The gradient norm spiked at step {N.count(step)} ({_v(d.get('value'))} vs {_v(d.get('baseline'))}) without a "
                "loss spike after it. Gradient spikes often come before loss spikes (OLMo 2); one that passes quietly "
                "is worth watching, not yet a problem.")
    if kind == "level_shift":
        return (f"{a['metric']} moved to a new level at step {N.count(d.get('start', step))} ({_times(d.get('value'), d.get('baseline'))} "
                "its recent median) and stayed there over the next logged steps: a level shift, not a spike. Nothing in the "
                "run's own schedule explains it (a data-mix switch, the end of warm-up or the start of decay would), so "
                "look at the events around it — a config or data change is the usual reason.")
    if kind == "logit_growth":
        absorbed = d.get("absorbed") or []
        also = (f" {len(absorbed)} other detection(s) inside the window ("
                + ", ".join(f"{x['kind'].replace('_', ' ')} at {N.count(x['step'])}" for x in absorbed[:4])
                + ") are this same growth, not separate optimizer problems.") if absorbed else ""
        return (f"From step {N.count(d.get('start'))} to {N.count(d.get('end'))} the loss rose "
                f"{N.percent(d.get('loss_rise'), 1)} instead of falling (Mann–Kendall p = {N.sig(d.get('loss_p'), 2)}), while "
                f"the output side grew with it: {_signals(d)}. That is output-logit growth: the scale of the logits (log Z) "
                "creeps up step after step until the loss diverges (Wortsman et al. 2023; PaLM's z-loss exists to hold log Z "
                "down). No single step is a spike, which is why spike tests miss it. Usual fixes: a larger z-loss weight, "
                "a lower LR, QK-norm for attention logits." + also)
    if kind == "sustained_rise":
        return _excursion(a)
    if kind in ("resume_mismatch", "resume_offset"):
        return _resume_mismatch(d, kind)
    if kind == "adam_drift":
        return _adam_drift(a)
    if kind == "nonfinite":
        return (f"{a['metric']} became {d.get('value')} at step {N.count(d.get('first_step'))} ({d.get('count')} non-finite "
                "values in this window). NaN/Inf means a numerical overflow somewhere; Marin's trainer stops on a non-finite loss.")
    if kind == "overflow":
        return (f"{a['metric']} at step {N.count(step)}: {d.get('what')} ({_v(d.get('previous_value'))} → {_v(d.get('value'))}). "
                "Mixed-precision training skips the steps whose gradients overflow and halves its loss scale; a scale "
                "collapsing toward its floor came before NaNs in OPT-175B's logbook.")
    if kind == "fork":
        changes = config_changes(d)
        what = (f" with its config changed: {changes}" if changes else
                ", its config as its parent's" if isinstance(d.get("config_changes"), dict) else "")
        return (f"Run {d.get('run')} was forked from {d.get('fork_parent')} at step {N.count(d.get('fork_step'))}{what}: from "
                "here on a new W&B run continues training, usually with a changed setting (Marin names the change in the "
                "run id). Differences right after this point come from that change or from the restart, not from the data.")
    if kind == "rewind":
        return (f"The history from step {N.count(d.get('rewound_from'))} was rewritten after marinctl first saw it: the run was "
                "rolled back (W&B rewind) and those steps were trained again — what you see now is the second attempt.")
    if kind == "step_gap":
        every = d.get("logging_interval") or 1
        logs = f" (the run logs every {N.count(every)} steps)" if every > 1 else ""
        return (f"{N.count(d.get('missing_steps'))} steps are missing before step {N.count(step)} (after "
                f"{N.count(d.get('previous_step'))}){logs}: the run restarted from a checkpoint past them, or logging dropped "
                "them. A change measured across the gap spans all those steps, so it is judged per step, not as one jump.")
    if kind == "resume":
        return (f"{N.sig((d.get('wall_gap_s') or 0) / 60, 3)} minutes of wall time passed between steps "
                f"{N.count(d.get('previous_step'))} and {N.count(step)} (a logged step usually takes "
                f"{N.sig(d.get('median_step_s'), 3)} s): the job stopped and resumed. Restarts can shift metrics slightly "
                "(data loader position, compiled kernels).")
    if kind == "throughput_collapse":
        took = (f", {N.sig(d['duration_s'] / 3600, 3)} h of wall clock" if isinstance(d.get("duration_s"), (int, float))
                else "")
        still = " It is still under way at the last logged step." if d.get("ongoing") else ""
        return (f"From step {N.count(d.get('start'))} to {N.count(d.get('end'))} throughput ran at "
                f"{N.percent(d.get('ratio', 0), 0)} of its baseline before the drop ({N.count(d.get('rows'))} logged "
                f"rows{took}); Marin's hero runbook alerts on throughput sustained 20–30% below baseline over several "
                "checks. Every step inside this window is part of the same slowdown. That is an infrastructure problem — "
                "a slow node, network or storage, a changed parallelism — not a modelling one." + still)
    if kind == "throughput_dip":
        return _throughput_dip(d)
    if kind == "hyperball_drift":
        return (f"{roles_mod.leaf_path(a['metric'])} is trained by {str(d.get('role')).upper()}, which puts each matrix back on "
                f"a sphere of fixed Frobenius norm after every step, so its norm should never move. At step {N.count(step)} it "
                f"is {N.percent(d.get('relative_drift', 0))} away from its starting value ({d.get('leaves_drifting')} matrix(es) "
                "crossed 1% here): the projection is not holding — a config change or a numerics problem.")
    if kind in ROUTER_WHAT:
        return (f"At step {N.count(step)} the {ROUTER_WHAT[kind]}: {_v(d.get('value'))} vs a typical {_v(d.get('baseline'))}. "
                "After warm-up Marin treats sudden router-metric changes as instability signals (router collapse).")
    return f"{a['metric']} looks unusual at step {N.count(step)}."


def _excursion(a: dict[str, Any]) -> str:
    d = a["details"]
    head = (f"From step {N.count(d.get('start'))} to {N.count(d.get('end'))} the loss stayed more than "
            f"{N.percent(d.get('threshold_ratio', 1.5) - 1, 0)} above its trend (up to {_v(d.get('max_ratio'))}× trend) — "
            "Marin's hero runbook alert for a sustained loss spike.")
    if a["cause_class"] == "data_batch":
        return (head + f" The gradient norm stayed normal throughout (robust z {N.sig(d.get('grad_z'), 3)}) and the loss "
                f"came straight back to trend afterwards ({_v(d.get('after_ratio'))}× trend over the next "
                f"{N.count(d.get('return_rows'))} logged steps): the model was fine, a run of batches was not — the "
                "bad-data signature (PaLM, OLMo 2). Look at what the data loader served over these steps.")
    if a["cause_class"] == "optimizer" and d.get("grad_moved"):
        return (head + f" The gradient norm spiked at step {N.count(d.get('grad_peak_step'))} ({_v(d.get('grad_peak_value'))} vs "
                f"{_v(d.get('grad_baseline'))}), before or with it: an update went wrong — the optimizer/learning-rate "
                "signature (BLOOM's 104B run, OLMo 2).")
    back = (" It has not come back to trend." if d.get("returned") is False else
            " Whether it comes back is not known yet." if d.get("returned") is None else "")
    return head + " No gradient spike came before it" + ("" if d.get("grad_moved") is False else " (or none is logged)") + \
        f", so neither a bad batch nor a bad update is proven; the run may be diverging.{back}"


def _resume_mismatch(d: dict[str, Any], kind: str) -> str:
    minor = kind == "resume_offset"
    bar = d.get("alert_bar") or {}
    if d.get("phase") == "catch-up":
        what = (f"the child replays its parent's batches (their difference varies {N.sig(d.get('spread'), 2)} row to row, "
                f"the loss itself {N.sig(d.get('noise'), 2)}), yet its loss differs by {N.sig(d.get('median_abs_diff'), 3)} "
                + (f"at the median — below the runbook's {bar.get('value')} during catch-up, but clear of the numerics "
                   f"noise (over half that bar)" if minor else
                   f"at the median, above the runbook's {d.get('threshold')} during catch-up"))
    else:
        what = (f"after the first {N.count(d.get('resume_warmup_steps'))} steps its loss sits "
                f"{N.percent(d.get('mismatch'), 2, signed=True)} from its parent's at the median "
                f"({_v(d.get('child_median'))} vs {_v(d.get('parent_median'))}), "
                + (f"short of the runbook's {N.percent(bar.get('value'), 0)} after the post-resume warm-up but more than "
                   f"half of it and {N.sig(abs(d.get('mismatch') or 0) / d['standard_error'], 2) if d.get('standard_error') else 'several'} "
                   "standard errors from zero" if minor else
                   f"beyond the runbook's {N.percent(d.get('threshold'), 0)} after the post-resume warm-up"))
    decided = d.get("decided_to")
    lasted = (f" The gap held on past the {N.count(d.get('compare_steps'))} steps that decide it, to step "
              f"{N.count(d.get('end'))}." if isinstance(decided, int) and isinstance(d.get("end"), int) and d["end"] > decided
              else "")
    tail = (" Below the runbook's bar it pages nobody; it is still a resume that did not quite continue its parent."
            if minor else " Marin's runbook compares a resumed run with its parent over 200 steps.")
    return (f"This run was resumed from {d.get('fork_parent')} at step {N.count(d.get('fork_step'))}, and both logged steps "
            f"{N.count(d.get('start'))}–{N.count(d.get('decided_to', d.get('end')))}: {what} ({N.count(d.get('rows_over'))} "
            f"of {N.count(d.get('rows'))} compared steps past it).{lasted} A faithful resume continues its parent's loss; "
            "one that does not points at the restart — a wrong or partial checkpoint, optimizer state not restored, the "
            "data loader at another position — not at the model." + tail)


def _throughput_dip(d: dict[str, Any]) -> str:
    short_of = (d.get("alert_bar") or {}).get("short_of") or []
    took = N.duration(d["duration_s"]) if isinstance(d.get("duration_s"), (int, float)) else None
    why = []
    if "depth" in short_of:
        why.append(f"shallower than the runbook's 20% (at worst {N.percent(1 - (d.get('worst_ratio') or 1), 0)} below)")
    if "duration" in short_of:
        why.append("shorter than its several 15-minute checks" + (f" ({took})" if took else ""))
    still = " It is still under way at the last logged step." if d.get("ongoing") else ""
    return (f"From step {N.count(d.get('start'))} to {N.count(d.get('end'))} throughput ran at "
            f"{N.percent(d.get('ratio', 0), 0)} of its baseline before the drop ({N.count(d.get('rows'))} logged rows). "
            f"Marin's hero runbook alerts on throughput sustained 20–30% below baseline over several checks; this slowdown "
            f"was {' and '.join(why) or 'below that bar'}, so it pages nobody — but the run was slower here, and that is "
            "the infrastructure (a slow node, network or storage, a preemption nearby), not the model." + still)


def config_changes(d: dict[str, Any], limit: int = 4) -> str:
    """A fork's config changes as words: 'optimizer.weight_decay 0 → 0.02; seed 0 → 1', or ''."""
    c = d.get("config_changes")
    if not isinstance(c, dict) or not c.get("count"):
        return ""
    parts = [f"{k} {_cfg(v[0])} → {_cfg(v[1])}" for k, v in (c.get("changed") or {}).items()]
    parts += [f"{k} = {_cfg(v)} (new)" for k, v in (c.get("added") or {}).items()]
    parts += [f"{k} (dropped)" for k in (c.get("removed") or {})]
    more = c["count"] - min(len(parts), limit)
    return "; ".join(parts[:limit]) + (f"; {N.count(more)} more" if more > 0 else "")


def _cfg(v: Any) -> str:
    text = N.measured(v) if isinstance(v, float) else str(v)
    return text if len(text) <= 40 else text[:39] + "…"


def _adam_drift(a: dict[str, Any]) -> str:
    d = a["details"]
    module = roles_mod.MODULE_LABELS.get(d.get("module"), d.get("module"))
    what = "attention gate" if "gate" in a["metric"] and d.get("module") == "attention" else module
    leaves = d.get("leaves_drifting") or 1
    many = f"s of {N.count(leaves)} leaves together (led by" if leaves > 1 else " ("
    loss = (" The loss stopped falling over the same window: the drift is already costing something."
            if d.get("loss_moved") else " The loss still looks healthy: this is an early warning, not yet a failure.")
    cause = (" The router's logits scale with its weight, so routing sharpens toward collapse as it grows."
             if a["cause_class"] == "moe_routing" else "")
    return (f"The {what} norm{many} {roles_mod.leaf_path(a['metric'])}) grew "
            f"{N.percent(d.get('rise'), 1, signed=True)} from step {N.count(d.get('start'))} to {N.count(d.get('end'))}, "
            f"{N.percent(d.get('window_rise'), 1, signed=True)} in {N.count(d.get('thresholds', {}).get('window_blocks', 5) * (d.get('block_steps') or 100))} "
            f"steps against {N.percent(d.get('before_rise'), 1, signed=True)} in the same span before (Mann–Kendall p "
            f"{N.sig(d.get('p'), 2)}). It is trained by Adam without weight decay, so nothing pulls its norm back: "
            "Marin's hero saw the attention-gate norm grow this way (issue #8818) and added weight decay on the "
            "attention gate and the router weight from step 54k (PR #8833)." + cause + loss)


def _norm_jump(a: dict[str, Any], recipe: roles_mod.RecipeRoles) -> str:
    d, step = a["details"], a["step"]
    mods = d.get("by_module") or []
    top = mods[0] if mods else None
    label = roles_mod.MODULE_LABELS.get(top["module"], top["module"]) if top else "no module"
    share = N.percent(top["share"], 0) if top else "?"
    spanned = d.get("steps_spanned") or 0
    gap = (f" This change spans {N.count(spanned)} steps (a gap in the log); divided over them it is still far above the "
           "usual per-step change, so the gap alone does not explain it." if d.get("spans_gap") else "")
    if a["cause_class"] == "heuristic_parameter":
        rule = ("Marin's Quantile Balancing (QB) replaces the bias every step with a value solved from a quantile "
                "of the previous step's router logits, so its norm can jump in a single step"
                if recipe.bias_rule == "qb" else "the load-balancing rule sets it without gradients")
        return (f"The total parameter norm jumped at step {N.count(step)}, and {share} of the change in ‖θ‖² comes from the "
                f"router bias. The router bias is not trained by gradients: {rule}. It only shifts which experts "
                "each token is sent to; it does not change what any expert computes. This is expected balancing "
                "dynamics, not instability" + (
                    "; loss and gradient norm stayed calm around it." if d.get("loss_calm") else
                    " — but loss or gradient norm also moved nearby: see the other findings.") + gap)
    if a["cause_class"] == "moe_routing":
        return (f"The total parameter norm jumped at step {N.count(step)}, driven by the router bias ({share}), and the bias "
                "moved further than its sign-rule update (±γ per expert per step, at most γ·√E in norm) allows. "
                "That points to a different update rule or a bug in load balancing." + gap)
    return (f"The total parameter norm jumped at step {N.count(step)}; {share} of the change in ‖θ‖² is in {label}. "
            "Matrices trained by MuonH/AdamH should keep their norm, so a jump there means the optimizer "
            "did something unusual; Adam-trained parameters (embeddings, router, gates) can grow, but not suddenly." + gap)


def headline(f: dict[str, Any]) -> str:
    """One line naming what happened and its cause class, for the summary of a step."""
    d, kind, step, cause = f["evidence"], f["kind"], f["step"], f["cause_class"]
    at = f"at step {N.count(step)}"
    if kind == "co_spike" and d.get("precursor_steps"):
        text = (f"an optimizer co-spike (grad norm {_times(d.get('grad_value'), d.get('grad_baseline'))} at step "
                f"{N.count(d.get('grad_step'))}, loss {_times(d.get('value'), d.get('baseline'))} at step {N.count(step)})")
    elif kind == "co_spike":
        text = f"a loss and grad-norm spike on one batch {at}"
    elif kind == "spike":
        text = f"a loss spike {_times(d.get('value'), d.get('baseline'))} {at} with no gradient warning"
    elif kind == "grad_spike":
        text = f"a grad-norm spike {_times(d.get('value'), d.get('baseline'))} {at}"
    elif kind == "param_norm_jump" and cause == "heuristic_parameter":
        share = sum(r["share"] for r in d.get("by_module") or [] if r.get("module") == "router_bias")
        text = f"the router bias re-set by its balancing rule {at} ({N.percent(share, 0)} of Δ‖θ‖²; expected dynamics)"
    elif kind == "param_norm_jump":
        mods = d.get("by_module") or []
        where = roles_mod.MODULE_LABELS.get(mods[0]["module"], mods[0]["module"]) if mods else "the parameters"
        text = f"a parameter-norm jump in {where} {at}"
    elif kind == "logit_growth":
        text = (f"output-logit growth over steps {N.count(d.get('start'))}–{N.count(d.get('end'))} "
                f"(loss {N.percent(d.get('loss_rise'), 1, signed=True)})")
    elif kind == "hyperball_drift":
        text = f"{roles_mod.leaf_path(f['metric'])} leaving its hyperball {at}"
    elif kind == "adam_drift":
        text = (f"{roles_mod.leaf_path(f['metric'])} (Adam, no weight decay) drifting "
                f"{N.percent(d.get('rise'), 1, signed=True)} over steps {N.count(d.get('start'))}–{N.count(d.get('end'))}")
    elif kind == "resume_mismatch":
        text = (f"the loss after the resume at step {N.count(d.get('fork_step'))} not matching {d.get('fork_parent')}'s "
                f"({N.percent(d.get('median_rel_diff'), 2, signed=True)})")
    elif kind == "resume_offset":
        text = (f"the loss after the resume at step {N.count(d.get('fork_step'))} a little off {d.get('fork_parent')}'s "
                f"({N.percent(d.get('median_rel_diff'), 2, signed=True)}, below the runbook's bar)")
    elif kind == "throughput_collapse":
        text = (f"throughput at {N.percent(d.get('ratio'), 0)} of baseline over steps "
                f"{N.count(d.get('start'))}–{N.count(d.get('end'))}")
    elif kind == "throughput_dip":
        text = (f"throughput at {N.percent(d.get('ratio'), 0)} of baseline over steps "
                f"{N.count(d.get('start'))}–{N.count(d.get('end'))} (below the alert's bar)")
    elif kind == "fork":
        changes = config_changes(d, limit=2)
        text = (f"{d.get('run')} forked from {d.get('fork_parent')} at step {N.count(d.get('fork_step'))}"
                + (f", config changed: {changes}" if changes else ""))
    elif kind == "sustained_rise":
        text = f"the loss above 1.5× trend over steps {N.count(d.get('start'))}–{N.count(d.get('end'))}"
    elif kind in ROUTER_WHAT:
        text = f"{ROUTER_WHAT[kind].split(' (')[0]} {at}"
    elif kind == "nonfinite":
        text = f"{f['metric']} became {d.get('value')} {at}"
    elif kind == "level_shift":
        text = f"{f['metric']} shifting to a new level {at}"
    else:
        text = f"{kind.replace('_', ' ')} in {f['metric']} {at}"
    return f"{text} [{cause}]"


_UNDER_WAY = {"adam_drift": "drifting", "hyperball_drift": "off its hyperball", "logit_growth": "growing",
              "throughput_collapse": "slow", "throughput_dip": "slow", "sustained_rise": "above trend",
              "resume_mismatch": "off the parent's", "resume_offset": "off the parent's",
              "routing_entropy_drop": "dropping", "drop_fraction_rise": "rising", "overflow_rise": "rising",
              "router_zloss_jump": "up", "nonfinite": "non-finite"}


def under_way_line(f: dict[str, Any]) -> str:
    """A trend that began long before the step asked about, as context: "params/norm/…attn_gate
    (Adam, no weight decay) already drifting since step 1,520 [optimizer]"."""
    d, kind = f["evidence"], f["kind"]
    since = f.get("start", d.get("start", f["step"]))
    what = {"adam_drift": f"{roles_mod.leaf_path(f['metric'])} (Adam, no weight decay)",
            "hyperball_drift": roles_mod.leaf_path(f["metric"]), "logit_growth": "the output logits",
            "sustained_rise": "the loss", "resume_mismatch": "the loss", "resume_offset": "the loss",
            "throughput_collapse": f"throughput ({N.percent(d.get('ratio'), 0)} of baseline)",
            "throughput_dip": f"throughput ({N.percent(d.get('ratio'), 0)} of baseline)"}.get(kind, f["metric"])
    return f"{what} already {_UNDER_WAY.get(kind, 'under way')} since step {N.count(since)} [{f['cause_class']}]"
