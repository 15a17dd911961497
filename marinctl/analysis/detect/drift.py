"""Adam-group norm drift: a parameter Adam trains without weight decay whose norm keeps growing.

In Marin's hero the router weight, the router-bias group, the attention gate, the token
embedding, 1-D norm gains and SConv kernels are trained by Adam with no weight decay (marin#8435),
so nothing holds their norms (roles.py). Attention-gate norm growth (marin#8818) led to
weight decay on the attention gate and the router weight from step 54k (PR #8833, the fork
`hero-wd-gate-router-p02-step54k`). An Adam norm is *meant* to move — fast at first, then
settling — so the question is not whether it moved but whether it keeps growing faster than it
did. No single step is unusual (robust z ≈ 1), so this is a trend test, as logit growth is
(trends.py):

1. **screen** (numpy): each Adam leaf's median log norm in `BLOCK_STEPS` = 100-step blocks (at
   least 5 logged rows: the hero watches every 10 steps), compared across a window of
   `WINDOW_BLOCKS` = 5 blocks (500 steps): the norm rose ≥ `DRIFT_RISE` = 5% over the window
   *and* ≥ `ACCEL` = 2× as much as over the window before it. A healthy Adam norm grows
   fastest early and slows; one that starts growing, or grows faster and faster, is drifting.
   The window before must begin after LR warm-up ends (warm-up itself speeds every Adam norm
   up). 5% per 500 steps and 2× are marinctl's choices; no number is published.
2. **confirm** (scipy.stats, only where the screen fired): Mann–Kendall p < `P_MAX` = 1e-3
   for the norm over the window, and its Theil–Sen slope (Mann 1945; Sen 1968).
3. **episode**: once open, a drift goes on while the norm keeps rising ≥ `DRIFT_RISE` per
   window; it starts at the first block that sits more than a quarter of the bar above the
   course the norm was on before (the window before the first hit, carried forward) and ends
   at the last block still rising. The leaves of one module (every layer's gate, say)
   drifting together are one finding listing them.

Cause, by what the leaf is: the router weight → `moe_routing` (router logits scale with it:
routing sharpens toward collapse); the attention gate, embeddings, norm gains and other Adam
leaves → `optimizer` (Adam without weight decay let the norm run; the hero's fix was weight
decay). And by whether the loss moved: a loss that did not keep falling over the window (its
last block's median at or above its first's) makes the drift a present problem (confidence
0.85); a loss still falling makes it an early warning (0.65).
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np

from marinctl.analysis.detect import trends
from marinctl.analysis.explain import roles as roles_mod
from marinctl.domain import Anomaly

BLOCK_STEPS, BLOCK_ROWS, WINDOW_BLOCKS = 100, 5, 5
DRIFT_RISE = math.log(1.05)
ACCEL = 2.0
P_MAX = 1e-3
ONSET_TOL = DRIFT_RISE / 4
CONFIDENCE = {True: 0.85, False: 0.65}   # loss moved / loss still falling
LOOKBACK_BLOCKS = 2 * WINDOW_BLOCKS + 6  # blocks read before the first step scored: windows, onset level

Series = tuple[np.ndarray, np.ndarray]


def adam_leaves(keys: Sequence[str], recipe: roles_mod.RecipeRoles) -> list[str]:
    """`params/norm/<leaf>` keys of parameters Adam trains (not hyperball, not QB-set, not buffers)."""
    return [k for k in keys if k.startswith("params/norm/") and k != "params/norm/total"
            and recipe.role(roles_mod.leaf_path(k)).role == roles_mod.ADAM]


def block_medians(sig: trends.Signal, block: int) -> dict[int, float]:
    """{block index: median log value} for blocks with at least BLOCK_ROWS rows (trends.block_medians,
    whose sort a watch series every few steps does not need: equal blocks are a reshape)."""
    ids = sig.steps // block
    starts = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]])
    counts = np.diff(np.r_[starts, len(ids)])
    inner = counts[1:-1]
    if len(starts) < 3 or np.any(np.diff(ids[starts]) <= 0) or not np.all(inner == inner[0]):
        return trends.block_medians(sig, block)
    n = int(inner[0])
    out = {int(ids[starts[0]]): float(np.median(sig.y[:starts[1]])), int(ids[starts[-1]]): float(np.median(sig.y[starts[-1]:]))}
    mid = np.median(sig.y[starts[1]:starts[-1]].reshape(-1, n), axis=1)
    out.update(zip(ids[starts[1:-1]].tolist(), mid.tolist()))
    return {b: m for (b, m), c in zip(sorted(out.items()), counts) if c >= BLOCK_ROWS}


def block_of(steps: np.ndarray) -> int:
    rows = int(np.median(np.diff(steps))) if len(steps) > 1 else 1
    return max(BLOCK_STEPS, BLOCK_ROWS * max(rows, 1))


def _screen(meds: dict[int, float], start_after: int, block: int) -> list[tuple[int, int]]:
    """Runs (first, last block) of drift: a block where the norm rose ≥ DRIFT_RISE over the window
    and ≥ ACCEL × the window before (which begins after warm-up) opens one; it goes on while the
    norm keeps rising ≥ DRIFT_RISE per window (the window before it is then the drift itself)."""
    runs: list[tuple[int, int]] = []
    for b in sorted(meds):
        a, r = b - WINDOW_BLOCKS, b - 2 * WINDOW_BLOCKS
        if a not in meds:
            continue
        rise = meds[b] - meds[a]
        if runs and b - runs[-1][1] <= 2 and rise >= DRIFT_RISE:
            runs[-1] = (runs[-1][0], b)
            continue
        if r * block < start_after or r not in meds:
            continue
        if rise >= DRIFT_RISE and rise >= ACCEL * max(meds[a] - meds[r], 0.0):
            runs.append((b, b))
    return runs


def _onset(meds: dict[int, float], first_hit: int, block: int) -> int:
    """Where the norm left the course it was on: the first block after the window before the first
    hit whose median sits more than ONSET_TOL above that window's own trend carried forward."""
    a, r = first_hit - WINDOW_BLOCKS, first_hit - 2 * WINDOW_BLOCKS
    slope = max(meds[a] - meds[r], 0.0) / WINDOW_BLOCKS
    for b in range(a + 1, first_hit + 1):
        if b in meds and meds[b] - (meds[a] + slope * (b - a)) > ONSET_TOL:
            return b * block
    return (a + 1) * block


def _loss_moved(loss: Series | None, lo: int, hi: int) -> bool | None:
    if loss is None:
        return None
    s, v = loss
    m = (s >= lo) & (s <= hi) & np.isfinite(v) & (v > 0)
    y = np.log(v[m])
    if len(y) < 2 * BLOCK_ROWS:
        return None
    k = max(len(y) // 10, BLOCK_ROWS)
    return bool(np.median(y[-k:]) >= np.median(y[:k]))


def _together(found: list[dict]) -> list[list[dict]]:
    """Leaf episodes of one module whose windows overlap: one finding."""
    groups: list[list[dict]] = []
    for e in sorted(found, key=lambda e: (e["module"], e["start"])):
        g = groups[-1] if groups else None
        if g and g[0]["module"] == e["module"] and e["start"] <= max(x["end"] for x in g):
            g.append(e)
        else:
            groups.append([e])
    return sorted(groups, key=lambda g: min(x["anchor"] for x in g))


def adam_drift(cols: dict[str, Series], leaves: Sequence[str], recipe: roles_mod.RecipeRoles, *, start_after: int,
               loss: Series | None, owner: Callable[[int], int]) -> list[Anomaly]:
    """`adam_drift` episodes (see the module doc), one per module, placed at the end of the block
    where the screen first held, with `start`/`end` the episode's window."""
    found: list[dict] = []
    for key in leaves:
        if key not in cols:
            continue
        sig = trends.signal("adam", key, cols[key])
        if sig is None:
            continue
        block = block_of(sig.steps)
        meds = block_medians(sig, block)
        for b0, b1 in _screen(meds, start_after, block):
            lo, hi = (b0 - WINDOW_BLOCKS) * block, min((b1 + 1) * block - 1, int(sig.steps[-1]))
            t = trends.trend(sig, lo, hi)
            if t is None or t["slope"] <= 0 or t["p"] >= P_MAX:
                continue
            start = _onset(meds, b0, block)
            role = recipe.role(roles_mod.leaf_path(key))
            m = (sig.steps >= start) & (sig.steps <= hi)
            first, last = sig.y[m][:BLOCK_ROWS], sig.y[m][-BLOCK_ROWS:]
            rise = float(math.expm1(np.median(last) - np.median(first))) if len(first) and len(last) else None
            found.append({
                "module": role.module, "key": key, "anchor": min((b0 + 1) * block - 1, int(sig.steps[-1])), "start": start, "end": hi,
                "rise": rise, "slope_per_1k": t["slope"] * 1000, "p": t["p"], "tau": t["tau"], "layer": role.layer,
                "window_rise": float(math.expm1(meds[b0] - meds[b0 - WINDOW_BLOCKS])),
                "before_rise": float(math.expm1(meds[b0 - WINDOW_BLOCKS] - meds[b0 - 2 * WINDOW_BLOCKS])), "block": block})
    out = []
    for leaves_ in _together(found):
        module = leaves_[0]["module"]
        lead = max(leaves_, key=lambda l: (l["rise"] or 0.0))
        start, end = min(l["start"] for l in leaves_), max(l["end"] for l in leaves_)
        anchor = min(l["anchor"] for l in leaves_)
        moved = _loss_moved(loss, start, end)
        cause = "moe_routing" if module == "router" else "optimizer"
        details = {"start": start, "end": end, "window_steps": end - start + 1, "module": module,
                   "role": roles_mod.ADAM, "rise": lead["rise"], "window_rise": lead["window_rise"],
                   "before_rise": lead["before_rise"], "slope_per_1k": lead["slope_per_1k"], "p": lead["p"],
                   "leaves_drifting": len(leaves_), "loss_moved": moved, "block_steps": lead["block"],
                   "leaves": [{"name": l["key"], "layer": l["layer"], "rise": l["rise"], "p": l["p"]}
                              for l in sorted(leaves_, key=lambda l: -(l["rise"] or 0.0))[:10]],
                   "thresholds": {"window_rise": math.expm1(DRIFT_RISE), "accel": ACCEL, "p": P_MAX,
                                  "window_blocks": WINDOW_BLOCKS, "block_steps": lead["block"]},
                   "confidence": CONFIDENCE[bool(moved)]}
        out.append(Anomaly(owner(anchor), anchor, lead["key"], "adam_drift", (lead["rise"] or 0.0) * 100, cause, details))
    return out
