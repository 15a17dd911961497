"""The diff document as text a person reads: `marinctl diff RUN_A RUN_B` and watch's `d` panel.

Both show the same words for the same two runs (analysis/diff.py `diff_runs`): the config keys
that changed, are only in A or only in B, then per metric where the runs separate beyond their
own noise, the largest gap and where, and the last values side by side. Run names and keys are
strangers' text: made inert (render/table.py); numbers through `marinctl.numbers`.
"""

from __future__ import annotations

import json
from typing import Any

from marinctl import numbers as N
from marinctl.render.table import cell, table_lines
from marinctl.text import inert


def diff_text(doc: dict[str, Any]) -> str:
    a, b = inert(doc["run_a"], single_line=True), inert(doc["run_b"], single_line=True)
    cfg = doc["config"]
    lines = [f"A = {a}", f"B = {b}", ""]
    n = len(cfg["changed"]) + len(cfg["only_a"]) + len(cfg["only_b"])
    lines.append(f"config: {len(cfg['changed'])} changed, {len(cfg['only_a'])} only in A, {len(cfg['only_b'])} only in B"
                 + ("" if n else " — identical"))
    rows = [(k, cell(_value(va)), cell(_value(vb))) for k, (va, vb) in cfg["changed"].items()]
    rows += [(k, cell(_value(v)), "—") for k, v in cfg["only_a"].items()]
    rows += [(k, "—", cell(_value(v))) for k, v in cfg["only_b"].items()]
    if rows:
        lines += table_lines(["key", "A", "B"], rows)
    unit = "step" if doc["x"] == "step" else "tokens"
    mets = doc["metrics"]
    apart = [m for m in mets if m["separates_at"] is not None]
    lines += ["", f"metrics aligned by {unit}: {len(apart)} of {len(mets)} separate beyond their own noise"]
    if mets:
        def at(v):
            return "—" if v is None else (N.count(v) if unit == "step" else N.sig(v, 3))

        lines += table_lines(
            ["key", f"separates at ({unit})", "largest gap A−B", "at step", "last A", "last B"],
            [(m["key"], at(m["separates_at"]), N.sig(m["max_gap"], 3) if m["max_gap"] is not None else "—",
              N.count(m["max_gap_step"]) if m["max_gap_step"] is not None else "—",
              N.sig(m["last_a"], 5) if m["last_a"] is not None else "—",
              N.sig(m["last_b"], 5) if m["last_b"] is not None else "—") for m in mets])
    return "\n".join(lines) + "\n"


def _value(v: Any) -> Any:
    """A config value for a cell: nested values as (short) JSON."""
    if isinstance(v, (dict, list)):
        return json.dumps(v, default=str)[:60]
    return v
