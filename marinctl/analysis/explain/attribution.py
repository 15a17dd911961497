"""Exact attribution of a change in a total norm to leaves, layers and modules.

A global L2 norm is the root of a sum of squares: ‖θ‖² = Σᵢ ‖θᵢ‖². So between two watch
steps Δ‖θ‖² = Σᵢ Δ‖θᵢ‖² *exactly* — no approximation, no model — and each leaf's share of the
change is Δ‖θᵢ‖² / Δ‖θ‖² (shares sum to 1; a leaf that shrank has a negative share). Leaves
roll up by layer and by module (roles.py) by summing shares. The same split works for
`grad/norm/*`, and per-layer router metrics (`train/router/layer_i/*`) roll up by layer as
deviations from their own baseline.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from marinctl.analysis.explain.roles import MODULE_LABELS, RecipeRoles, leaf_path
from marinctl.store import Connection, history
from marinctl.store import metrics as M

_ROUTER_LAYER = re.compile(r"^train/router/layer_(\d+)/(.+)$")


@dataclass
class Attribution:
    """Per-leaf Δ‖θᵢ‖² between two steps and their rollups; `total_delta` is Δ‖θ‖²."""

    prefix: str
    step_before: int
    step_after: int
    total_before: float
    total_after: float
    leaves: list[dict[str, Any]] = field(default_factory=list)   # name, module, layer, role, before, after, delta, share
    by_module: list[dict[str, Any]] = field(default_factory=list)
    by_layer: list[dict[str, Any]] = field(default_factory=list)
    by_role: list[dict[str, Any]] = field(default_factory=list)
    logged_total_delta: float | None = None   # Δ of the logged `<prefix>/total`², when logged

    @property
    def total_delta(self) -> float:
        """Δ‖θ‖² over the leaves (exactly the sum of the leaves' Δ‖θᵢ‖²)."""
        return float(sum(l["delta"] for l in self.leaves))

    def share_of(self, *, module: str | None = None, role: str | None = None) -> float:
        return float(sum(l["share"] for l in self.leaves
                         if (module is None or l["module"] == module) and (role is None or l["role"] == role)))

    def top_leaves(self, n: int = 5) -> list[dict[str, Any]]:
        return sorted(self.leaves, key=lambda l: -abs(l["share"]))[:n]

    def as_json(self, n: int = 8) -> list[dict[str, Any]]:
        """The contract's `attribution` list: leaves with the largest |share| first."""
        return [{"name": l["name"], "share": l["share"], "module": l["module"], "layer": l["layer"], "role": l["role"],
                 "delta_sq": l["delta"]} for l in self.top_leaves(n)]


def evidence(att: Attribution, n: int = 8) -> dict[str, Any]:
    """What a finding shows of an attribution: leaves (the contract's `attribution` list), module,
    layer and role rollups, Δ‖θ‖² (summed over leaves, and of the logged total) and per step."""
    spanned = max(att.step_after - att.step_before, 1)
    return {"attribution": att.as_json(n),
            "by_module": [{"module": r["module"], "label": r["label"], "share": r["share"]} for r in att.by_module[:6]],
            "by_layer": [{"layer": r["layer"], "label": r["label"], "share": r["share"]} for r in att.by_layer[:6]],
            "by_role": [{"role": r["role"], "share": r["share"]} for r in att.by_role],
            "delta_sq": att.total_delta, "logged_delta_sq": att.logged_total_delta,
            "steps_spanned": spanned, "delta_sq_per_step": att.total_delta / spanned}


def split(before: dict[str, float], after: dict[str, float], roles: RecipeRoles, *, prefix: str = "params/norm/",
          step_before: int = 0, step_after: int = 0) -> Attribution:
    """Attribute Δ Σ‖θᵢ‖² across the leaves present at both steps (pure; no store)."""
    names = sorted(set(before) & set(after))
    b = np.array([before[n] for n in names], dtype=np.float64)
    a = np.array([after[n] for n in names], dtype=np.float64)
    ok = np.isfinite(a) & np.isfinite(b)
    names = [n for n, k in zip(names, ok) if k]
    b, a = b[ok], a[ok]
    delta = a * a - b * b
    total = float(delta.sum())
    att = Attribution(prefix, step_before, step_after, float(np.sqrt((b * b).sum())), float(np.sqrt((a * a).sum())))
    for name, vb, va, d in zip(names, b.tolist(), a.tolist(), delta.tolist()):
        role = roles.role(leaf_path(name))
        att.leaves.append({"name": name, "module": role.module, "layer": role.layer, "role": role.role,
                           "before": vb, "after": va, "delta": d, "share": (d / total) if total else 0.0})
    att.by_module = _rollup(att.leaves, "module", total, label=lambda m: MODULE_LABELS.get(m, m))
    att.by_layer = _rollup(att.leaves, "layer", total, label=lambda l: "global / whole stack" if l is None else f"layer {l}")
    att.by_role = _rollup(att.leaves, "role", total, label=str)
    return att


def _rollup(leaves: Sequence[dict[str, Any]], field_name: str, total: float, label) -> list[dict[str, Any]]:
    sums: dict[Any, float] = defaultdict(float)
    for leaf in leaves:
        sums[leaf[field_name]] += leaf["delta"]
    rows = [{field_name: k, "label": label(k), "delta": v, "share": (v / total) if total else 0.0} for k, v in sums.items()]
    return sorted(rows, key=lambda r: -abs(r["share"]))


def leaf_values(con: Connection, segments, prefix: str, steps: Sequence[int]) -> dict[int, dict[str, float]]:
    """Every `<prefix><leaf>` value (not `total`) logged at the given steps."""
    return history.values_at(con, segments, prefix, steps, exclude=[prefix + "total"])


def attribute(con: Connection, segments, roles: RecipeRoles, step_before: int, step_after: int,
              prefix: str = "params/norm/") -> Attribution | None:
    """Exact split of Δ‖θ‖² between two watch steps, read from the store."""
    vals = leaf_values(con, segments, prefix, [step_before, step_after])
    if step_before not in vals or step_after not in vals:
        return None
    att = split(vals[step_before], vals[step_after], roles, prefix=prefix, step_before=step_before, step_after=step_after)
    t0, t1 = M.series(con, segments, prefix + "total", step_before, step_before + 1)[1], M.series(
        con, segments, prefix + "total", step_after, step_after + 1)[1]
    if len(t0) and len(t1):
        att.logged_total_delta = float(t1[0] ** 2 - t0[0] ** 2)
    return att


def router_layers(con: Connection, segments, metric: str, step: int, baseline: int = 100) -> list[dict[str, Any]]:
    """Per-layer `train/router/layer_i/<metric>`: value at `step` vs the median of the previous
    `baseline` steps, and each layer's share of the summed deviation (largest first)."""
    rows = history.rows_between(con, segments, "train/router/layer_", "/" + metric, step - baseline, step)
    per: dict[int, tuple[list[float], float | None]] = {}
    for key, s, v in rows:
        m = _ROUTER_LAYER.match(key)
        if not m or m.group(2) != metric:
            continue
        layer = int(m.group(1))
        hist, at = per.get(layer, ([], None))
        if s == step:
            at = v
        else:
            hist.append(v)
        per[layer] = (hist, at)
    out = []
    for layer, (hist, at) in per.items():
        if at is None or not hist:
            continue
        base = float(np.median(hist))
        out.append({"layer": layer, "value": at, "baseline": base, "delta": at - base})
    total = sum(abs(r["delta"]) for r in out)
    for r in out:
        r["share"] = abs(r["delta"]) / total if total else 0.0
    return sorted(out, key=lambda r: -r["share"])
