"""The explain document as text a person reads: `marinctl explain step N` and watch's `e` panel.

Both show the same words for the same step. Every stored string (metric names, titles,
URLs — GitHub and W&B text is untrusted) passes through `inert`; every number through
`marinctl.numbers`.
"""

from __future__ import annotations

import textwrap
from typing import Any, Sequence

from marinctl import numbers as N
from marinctl.views.chart_data import Marker
from marinctl.analysis.explain.explanations import config_changes, rise, under_way_line
from marinctl.text import inert


def _t(v: Any) -> str:
    return inert(v, single_line=True)


def _wrap(text: str, indent: str = "   ", width: int = 96) -> list[str]:
    return textwrap.wrap(text, width=width, initial_indent=indent, subsequent_indent=indent)


def explain_text(doc: dict[str, Any]) -> str:
    """Human form of the explain document (analysis/explain/explain.py's `explain`)."""
    lines = []
    head = f"explain step {N.count(doc['step'])} · {_t(doc['run'])}"
    if doc.get("stitched"):
        head += f" (stitched lineage; this step is in {_t(doc['run_at_step'])})"
    if doc.get("synthetic"):
        head += " · SYNTHETIC data"
    lines += [head, ""]
    if doc.get("summary"):
        lines += _wrap(_t(doc["summary"]), indent="") + [""]
    findings = doc["findings"]
    if not findings:
        lines += ["Nothing unusual at or near this step: no spike, jump, drift, gap or slowdown was detected", ""]
    for i, f in enumerate(findings, 1):
        lines += _finding_lines(i, f)
    lines += _context_lines(doc["context"])
    if doc.get("metric_evidence"):
        me = doc["metric_evidence"]
        lines.append(f"  {_t(me['metric'])} at step {N.count(me['step'])}: {N.measured(me.get('value'))}"
                     + (f" vs baseline {N.measured(me.get('baseline'))}" if me.get("baseline") is not None else "")
                     + (f" (robust z {N.fixed(me['z'], 1)})" if isinstance(me.get("z"), float) else ""))
        if me.get("role_note"):
            lines.append(f"  {'':13}{me['module'].replace('_', ' ')}, "
                         + (f"layer {me['layer']}: " if me.get("layer") is not None else "") + me["role_note"])
    return "\n".join(lines) + "\n"


def _finding_lines(i: int, f: dict[str, Any]) -> list[str]:
    severity = f" · {f['severity']}" if f.get("severity") else ""
    lines = [f"{i}. {_t(f['metric'])} · {f['kind'].replace('_', ' ')} at step {N.count(f['step'])}"
             f"   [{f['cause_class']}{severity} · confidence {N.fixed(f['confidence'], 2)}]"]
    ev = f["evidence"]
    if f.get("under_way"):
        lines += _wrap(f"{_t(under_way_line(f))}: context, not what changed here"
                       + ("; still under way at the last logged step" if f.get("open") else ""))
    elif f.get("open") and isinstance(f.get("start"), int):
        lines.append(f"   since step {N.count(f['start'])}, still under way at the last logged step")
    bar = ev.get("alert_bar")
    if isinstance(bar, dict) and bar.get("reached") is False:
        short = f" (short of its {' and '.join(bar.get('short_of') or [])})" if bar.get("short_of") else ""
        lines += _wrap(f"below the alert's bar: {_t(bar.get('source'))} — {_t(bar.get('what'))}{short}")
    if f["kind"] == "fork" and config_changes(ev):
        lines += _wrap(f"config changed at the fork: {_t(config_changes(ev, limit=6))}")
    if "value" in ev and "baseline" in ev:
        z = ev.get("z")
        lines.append(f"   value {N.measured(ev['value'])} vs baseline {N.measured(ev['baseline'])}"
                     + (f" (robust z {N.fixed(z, 1)})" if isinstance(z, float) else ""))
    if ev.get("grad_step") is not None:
        lines.append(f"   grad norm at step {N.count(ev['grad_step'])}: {N.measured(ev.get('grad_value'))}"
                     f" vs {N.measured(ev.get('grad_baseline'))} (z {N.fixed(ev.get('grad_z', 0), 1)},"
                     f" {N.count(ev.get('precursor_steps'))} step(s) before the loss)")
    if f["kind"] == "param_norm_jump":
        lines.append(f"   ‖θ‖ {N.measured(ev.get('previous_value'))} → {N.measured(ev.get('value'))} between steps"
                     f" {N.count(ev.get('previous_step'))} and {N.count(f['step'])};"
                     f" Δ‖θ‖² = {N.measured(ev.get('delta_sq'))} (z {N.fixed(ev.get('z', 0), 1)})")
        if ev.get("by_module"):
            lines.append("   by module: " + " · ".join(f"{_t(r.get('label', r['module']))} {N.percent(r['share'], signed=True)}"
                                                      for r in ev["by_module"][:5]))
        if ev.get("by_layer"):
            lines.append("   by layer:  " + " · ".join(f"{_t(r['label'])} {N.percent(r['share'], signed=True)}"
                                                      for r in ev["by_layer"][:5]))
    slow = f["kind"] in ("throughput_collapse", "throughput_dip")
    if (f["kind"] == "sustained_rise" or slow) and ev.get("steps"):
        lines.append(f"   steps {N.count(ev.get('start'))}–{N.count(ev.get('end'))} ({N.count(ev['steps'])} steps)"
                     + (f": {N.percent(ev.get('ratio'), 0)} of baseline {N.measured(ev.get('baseline_median'))}"
                        if slow else ""))
    if f["kind"] in ("resume_mismatch", "resume_offset"):
        lines.append(f"   vs {_t(ev.get('fork_parent'))} over steps {N.count(ev.get('start'))}–"
                     f"{N.count(ev.get('decided_to', ev.get('end')))} ({_t(ev.get('phase'))}): median Δ"
                     f" {N.sig(ev.get('median_diff'), 3)} ({N.percent(ev.get('median_rel_diff'), 2, signed=True)});"
                     f" {N.count(ev.get('rows_over'))} of {N.count(ev.get('rows'))} steps past the bar"
                     + (f"; the gap held to step {N.count(ev['end'])}" if isinstance(ev.get("decided_to"), int)
                        and isinstance(ev.get("end"), int) and ev["end"] > ev["decided_to"] else ""))
    if f["kind"] == "adam_drift":
        lines.append(f"   window steps {N.count(ev.get('start'))}–{N.count(ev.get('end'))}:"
                     f" {N.percent(ev.get('rise'), 1, signed=True)} (Mann–Kendall p {N.sig(ev.get('p'), 2)});"
                     f" loss {'moved' if ev.get('loss_moved') else 'still falling'}")
    if len(ev.get("event_steps") or []) > 1:
        lines.append("   event at logged steps " + ", ".join(N.count(s) for s in ev["event_steps"][:12])
                     + (" …" if len(ev["event_steps"]) > 12 else ""))
    if f["kind"] == "logit_growth":
        lines.append(f"   window steps {N.count(ev.get('start'))}–{N.count(ev.get('end'))}: loss "
                     f"{N.percent(ev.get('loss_rise'), 1, signed=True)} (Mann–Kendall p {N.sig(ev.get('loss_p'), 2)})")
        for s in ev.get("signals", []):
            lines.append(f"   {_t(s['key'])}: {rise(s['rise'])} over the window"
                         f" (Theil–Sen {N.sig(s['slope_per_1k'], 3)} log/1k steps, p {N.sig(s['p'], 2)})")
    if f.get("attribution") and f["kind"] != "param_norm_jump":
        lines.append("   by layer: " + " · ".join(f"{_t(a['name'])} {N.percent(a['share'], 0)}" for a in f["attribution"][:4]))
    if f["kind"] == "param_norm_jump" and f.get("attribution"):
        lines.append("   top leaves: " + " · ".join(f"{_t(a['name'].replace('params/norm/', ''))} {N.percent(a['share'], signed=True)}"
                                                   for a in f["attribution"][:3]))
    lines += _wrap(_t(f["explanation"]))
    for link in f.get("links", []):
        lines.append(f"   W&B: {_t(link)}")
    lines.append("")
    return lines


def _context_lines(c: dict[str, Any]) -> list[str]:
    lines = ["context"]
    lr = c.get("lr", {})
    lr_text = f"{c['lr_phase']}"
    if lr.get("warmup_end_step") is not None:
        lr_text += f" (warm-up ends at step {N.count(lr['warmup_end_step'])}"
        lr_text += f" of {N.count(lr['total_steps'])}, {lr.get('schedule_from')})" if lr.get("total_steps") else ")"
    if lr.get("learning_rate") is not None:
        lr_text += f"; lr {N.sig(lr['learning_rate'], 4)}"
    lines.append(f"  LR schedule  {lr_text}")
    dp = c.get("data", {})
    if dp.get("name"):
        nxt = f"; next switch at step {N.count(dp['next_switch'])}" if dp.get("next_switch") else ""
        lines.append(f"  data mix     phase {dp['number']} ({_t(dp['name'])}) since step {N.count(dp['start_step'])}{nxt}")
    if c.get("evals"):
        lines.append("  evals        at steps " + ", ".join(N.count(s) for s in c["evals"]))
    if c.get("checkpoints"):
        lines.append("  checkpoints  at steps " + ", ".join(N.count(s) for s in c["checkpoints"][:6]))
    for p in c.get("schedule", []):
        moved = ", ".join(f"{k.replace('_', ' ')} ×{N.sig(v, 3)}" for k, v in p.get("level_ratio", {}).items())
        lines.append(f"  schedule     {_t(p['what'])} at step {N.count(p['step'])}" + (f"; expected: {moved}" if moved else ""))
    for p in c.get("lineage", []):
        lines.append(f"  lineage      {_t(p['run'])} forked from {_t(p['parent'])} at step {N.count(p['fork_step'])}")
    ev = c.get("events", [])
    window = N.count(c.get("event_window", 0))
    if ev:
        lines.append(f"  events       (within ±{window} steps)")
        for e in ev[:6]:
            step = f"step {N.count(e['step'])}" if e.get("step") is not None else "step ?"
            lines.append(f"    {step:<13} {_t(e.get('kind'))}: {_t(e.get('title'))[:70]}  {_t(e.get('url') or '')}")
    else:
        lines.append(f"  events       none within ±{window} steps")
    moved = c.get("moved", [])
    if moved:
        for i, m in enumerate(moved[:4]):
            lines.append(("  also moved   " if i == 0 else "               ")
                         + f"{_t(m['metric'])}: {N.measured(m['value'])} vs {N.measured(m['baseline'])} (z {N.fixed(m['z'], 0)})")
    else:
        lines.append("  also moved   nothing else stood out at this step")
    return lines


def panel_text(doc: dict[str, Any] | None, nearby: Sequence[Marker] = (), error: str | None = None) -> str:
    """The watch screen's explain panel: the same text as the CLI, then the markers near the step."""
    lines = [explain_text(doc).rstrip("\n")] if doc is not None else []
    if error:
        lines.append(_t(error))
    if nearby:
        lines += ["", "markers near this step:"]
        lines += [f"  {m.kind} @{N.count(m.step)}: {_t(m.label)}" for m in nearby]
    return "\n".join(lines)
