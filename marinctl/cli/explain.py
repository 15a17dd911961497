"""`explain step N` (why a step looks the way it does) and `anomalies` (stored detections)."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from marinctl import output

explain_app = typer.Typer(help="Explain what is unusual at a step: ranked findings, evidence, cause, context.",
                          no_args_is_help=True, rich_markup_mode=None)


def register(app: typer.Typer) -> None:
    """Add this module's commands to the root app."""
    app.add_typer(explain_app, name="explain")
    explain_app.command("step", help=(
        "What is unusual at or near step N, ranked, with evidence, a cause class and a plain explanation. "
        "RUN: hero (default), a run id, rung1..rung4."))(step)
    app.command("anomalies", help="Detections stored for a run (default: the hero lineage, or the only run).")(anomalies)


def step(
    n: Annotated[int, typer.Argument(metavar="N", help="The step to explain.")],
    run: Annotated[Optional[str], typer.Option("--run", metavar="RUN", help="hero (default), a run id, rung1..rung4.")] = None,
    metric: Annotated[Optional[str], typer.Option("--metric", metavar="KEY", help="Focus on one metric, e.g. params/norm/total.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="JSON output (the contract's shape).")] = False,
) -> None:
    from marinctl.analysis.explain import explain
    from marinctl.errors import UserError
    from marinctl.store import open_store
    from marinctl.store.lineage import resolve_target

    if n < 0:
        raise UserError(f"step must be 0 or more, not {n}", "e.g. `marinctl explain step 500`")
    with open_store().connect() as con:
        target = resolve_target(con, run)
        doc = explain(con, target, n, metric)
    if json_out:
        output.print_json(doc)
        return
    print(render(doc), end="")


def anomalies(
    run: Annotated[Optional[str], typer.Option("--run", metavar="RUN", help="hero (default), a run id, rung1..rung4.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="JSON output.")] = False,
) -> None:
    from marinctl.analysis.explain import anomalies as list_anomalies
    from marinctl.store import open_store
    from marinctl.store.lineage import resolve_target

    with open_store().connect() as con:
        target = resolve_target(con, run)
        rows = list_anomalies(con, target)
    if json_out:
        output.print_json([{k: r[k] for k in ("run", "step", "metric", "kind", "score", "cause_class")} for r in rows])
        return
    if not rows:
        print(f"no anomalies detected for {target.name} — detection runs after each `marinctl sync`")
        return
    output.print_table(["step", "run", "metric", "kind", "score", "cause"],
                       [(f"{r['step']:,}", r["run"], r["metric"], r["kind"], r["score"], r["cause_class"]) for r in rows])
    print(f"\n{len(rows)} detections · details: marinctl explain step N" + (f" --run {target.name}" if run else ""))


def _num(x) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:,.4g}" if abs(x) < 1e6 else f"{x:.4g}"
    return f"{x:,}" if isinstance(x, int) else str(x)


def _wrap(text: str, indent: str = "   ", width: int = 96) -> list[str]:
    import textwrap

    return textwrap.wrap(text, width=width, initial_indent=indent, subsequent_indent=indent)


def render(doc: dict) -> str:
    """Human form of the explain document; every stored string passes through `inert`."""
    from marinctl.text import inert

    t = lambda v: inert(v, single_line=True)  # noqa: E731
    lines = []
    head = f"explain step {doc['step']:,} · {t(doc['run'])}"
    if doc.get("stitched"):
        head += f" (stitched lineage; this step is in {t(doc['run_at_step'])})"
    if doc.get("synthetic"):
        head += " · SYNTHETIC data"
    lines += [head, ""]
    findings = doc["findings"]
    if not findings:
        lines += ["Nothing unusual at or near this step: no spike, jump, drift, gap or slowdown was detected", ""]
    for i, f in enumerate(findings, 1):
        lines.append(f"{i}. {t(f['metric'])} · {f['kind'].replace('_', ' ')} at step {f['step']:,}"
                     f"   [{f['cause_class']} · confidence {f['confidence']:.2f}]")
        ev = f["evidence"]
        if "value" in ev and "baseline" in ev:
            z = ev.get("z")
            lines.append(f"   value {_num(ev['value'])} vs baseline {_num(ev['baseline'])}" + (f" (robust z {z:.1f})" if isinstance(z, float) else ""))
        if ev.get("grad_step") is not None:
            lines.append(f"   grad norm at step {ev['grad_step']:,}: {_num(ev.get('grad_value'))} vs {_num(ev.get('grad_baseline'))}"
                         f" (z {ev.get('grad_z', 0):.1f}, {ev.get('precursor_steps')} step(s) before the loss)")
        if f["kind"] == "param_norm_jump":
            lines.append(f"   ‖θ‖ {_num(ev.get('previous_value'))} → {_num(ev.get('value'))} between steps {ev.get('previous_step'):,} and {f['step']:,};"
                         f" Δ‖θ‖² = {_num(ev.get('delta_sq'))} (z {ev.get('z', 0):.1f})")
            if ev.get("by_module"):
                lines.append("   by module: " + " · ".join(f"{t(r.get('label', r['module']))} {r['share']:+.1%}" for r in ev["by_module"][:5]))
            if ev.get("by_layer"):
                lines.append("   by layer:  " + " · ".join(f"{t(r['label'])} {r['share']:+.1%}" for r in ev["by_layer"][:5]))
        if f["kind"] in ("sustained_rise", "throughput_collapse") and ev.get("steps"):
            lines.append(f"   steps {ev.get('start'):,}–{ev.get('end'):,} ({ev['steps']} steps)")
        if f.get("attribution") and f["kind"] != "param_norm_jump":
            lines.append("   by layer: " + " · ".join(f"{t(a['name'])} {a['share']:.0%}" for a in f["attribution"][:4]))
        if f["kind"] == "param_norm_jump" and f.get("attribution"):
            lines.append("   top leaves: " + " · ".join(f"{t(a['name'].replace('params/norm/', ''))} {a['share']:+.1%}" for a in f["attribution"][:3]))
        lines += _wrap(t(f["explanation"]))
        for link in f.get("links", []):
            lines.append(f"   W&B: {t(link)}")
        lines.append("")
    c = doc["context"]
    lr = c.get("lr", {})
    lines.append("context")
    lr_text = f"{c['lr_phase']}"
    if lr.get("warmup_end_step") is not None:
        lr_text += f" (warm-up ends at step {lr['warmup_end_step']:,}"
        lr_text += f" of {lr['total_steps']:,}, {lr.get('schedule_from')})" if lr.get("total_steps") else ")"
    if lr.get("learning_rate") is not None:
        lr_text += f"; lr {lr['learning_rate']:.4g}"
    lines.append(f"  LR schedule  {lr_text}")
    dp = c.get("data", {})
    if dp.get("name"):
        nxt = f"; next switch at step {dp['next_switch']:,}" if dp.get("next_switch") else ""
        lines.append(f"  data mix     phase {dp['number']} ({t(dp['name'])}) since step {dp['start_step']:,}{nxt}")
    if c.get("evals"):
        lines.append("  evals        at steps " + ", ".join(f"{s:,}" for s in c["evals"][:6]))
    if c.get("checkpoints"):
        lines.append("  checkpoints  at steps " + ", ".join(f"{s:,}" for s in c["checkpoints"][:6]))
    for p in c.get("lineage", []):
        lines.append(f"  lineage      {t(p['run'])} forked from {t(p['parent'])} at step {p['fork_step']:,}")
    ev = c.get("events", [])
    if ev:
        lines.append(f"  events       (within ±{c.get('event_window', 0):,} steps)")
        for e in ev[:6]:
            step = f"step {e['step']:,}" if e.get("step") is not None else "step ?"
            lines.append(f"    {step:<13} {t(e.get('kind'))}: {t(e.get('title'))[:70]}  {t(e.get('url') or '')}")
    else:
        lines.append(f"  events       none within ±{c.get('event_window', 0):,} steps")
    moved = c.get("moved", [])
    if moved:
        for i, m in enumerate(moved[:4]):
            lines.append(("  also moved   " if i == 0 else "               ")
                         + f"{t(m['metric'])}: {_num(m['value'])} vs {_num(m['baseline'])} (z {m['z']:.0f})")
    else:
        lines.append("  also moved   nothing else stood out at this step")
    if doc.get("metric_evidence"):
        me = doc["metric_evidence"]
        lines.append(f"  {t(me['metric'])} at step {me['step']:,}: {_num(me.get('value'))}"
                     + (f" vs baseline {_num(me.get('baseline'))}" if me.get("baseline") is not None else "")
                     + (f" (robust z {me['z']:.1f})" if isinstance(me.get("z"), float) else ""))
        if me.get("role_note"):
            lines.append(f"  {'':13}{me['module'].replace('_', ' ')}, " + (f"layer {me['layer']}: " if me.get("layer") is not None else "")
                         + me["role_note"])
    return "\n".join(lines) + "\n"
