"""Logit growth: slow trends over hundreds of steps, which spike tests never see.

Output-logit growth (Wortsman et al. 2023, "Small-scale proxies for large-scale Transformer
training instabilities", arXiv 2309.14322: log Z drifting up until the loss diverges; PaLM's
and OLMo 2's z-loss exists to stop it, arXiv 2204.02311 and 2501.00656) shows as a loss that
*rises* while the output layer grows: the lm_head norm climbs, the z-loss (1e-4·log²Z; in grug
the gap `train/loss − train/cross_entropy_loss`, Marin's `experiments/grug/moe_hero_ep/train.py`)
climbs, and max-logit keys climb when a run logs them. Each step is unremarkable (robust
z ≈ 2), so this is a trend test, not a spike test:

1. **screen** (numpy, every block): medians of log values in `BLOCK_STEPS` = 50-step blocks
   (at least 5 logged rows), compared across a `WINDOW_BLOCKS` = 4-block window (200 steps):
   the loss up ≥ `LOSS_RISE` = 2% *and* a logit signal up — lm_head norm ≥ 1% (the
   hyperball-drift bar: AdamH holds it constant, marin#8435), z-loss ≥ 25%, max logit
   ≥ 10%. A healthy loss falls (or shifts once at a data switch, where the logits stay put);
   the percentages are marinctl's choices.
2. **confirm** (scipy.stats, only where the screen fired): Mann–Kendall (Kendall's τ of the
   values against the step) with p < `P_MAX` = 1e-3 for the loss and for at least one logit
   signal, and Theil–Sen slopes for the numbers. Both are rank-based, so noise and single
   spikes do not move them (Sen 1968; Mann 1945).
3. **window**: the screened blocks form an episode; its start is the earliest onset among
   the confirmed logit signals — the block after the last one still within a quarter of the
   screen's bar of the level before the episode — its end the last step the screen held. Inside that window lm_head drift, lm_head-dominated norm jumps and
   loss rises are this episode, not `optimizer` findings (detectors.scan hands them over).

The finding is `logit_growth` with the window, each signal's rise, slope and p in evidence.
Confidence: 0.7 with one logit signal, 0.85 with two, 0.9 with three.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from marinctl.domain import Anomaly

BLOCK_STEPS, BLOCK_ROWS, WINDOW_BLOCKS = 50, 5, 4
LOSS_RISE = math.log(1.02)
SIGNAL_RISE = {"lm_head": math.log(1.01), "z_loss": math.log(1.25), "max_logit": math.log(1.10)}
P_MAX = 1e-3
MAX_POINTS = 400            # points per series given to the confirmation tests
CONFIDENCE = {1: 0.7, 2: 0.85, 3: 0.9}
ONSET_TOL = {name: rise / 4 for name, rise in SIGNAL_RISE.items()}   # a quarter of the screen's bar

CE = "train/cross_entropy_loss"
Z_LOSS_KEYS = ("train/z_loss", "train/zloss", "train/output_z_loss", "train/aux/z_loss")
_MAX_LOGIT = re.compile(r"max_?logits?|logits?_?max", re.I)
_ROUTER = re.compile(r"router", re.I)

Series = tuple[np.ndarray, np.ndarray]   # steps, values (finite, step order)


def max_logit_keys(keys: Sequence[str]) -> list[str]:
    """Logged max-logit keys (output or attention logits), not the router's."""
    return [k for k in keys if _MAX_LOGIT.search(k) and not _ROUTER.search(k)]


@dataclass
class Signal:
    name: str        # 'loss' | 'lm_head' | 'z_loss' | 'max_logit'
    key: str         # what was read (a key, or 'train/loss − train/cross_entropy_loss')
    steps: np.ndarray
    y: np.ndarray    # log values


def signal(name: str, key: str, s: Series) -> Signal | None:
    steps, v = s
    ok = np.isfinite(v) & (v > 0)
    return Signal(name, key, steps[ok], np.log(v[ok])) if ok.sum() >= 2 * BLOCK_ROWS else None


def block_medians(sig: Signal, block: int) -> dict[int, float]:
    """{block index: median log value} for blocks with at least BLOCK_ROWS rows."""
    ids = sig.steps // block
    order = np.lexsort((sig.y, ids))
    ids, y = ids[order], sig.y[order]
    starts = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]])
    counts = np.diff(np.r_[starts, len(ids)])
    med = 0.5 * (y[starts + (counts - 1) // 2] + y[starts + counts // 2])
    keep = counts >= BLOCK_ROWS
    return dict(zip(ids[starts][keep].tolist(), med[keep].tolist()))


def _rises(meds: dict[int, float], b: int) -> float | None:
    first = meds.get(b - WINDOW_BLOCKS + 1)
    last = meds.get(b)
    return None if first is None or last is None else last - first


def block_size(signals: Sequence[Signal]) -> int:
    rows = max((int(np.median(np.diff(s.steps))) for s in signals if len(s.steps) > 1), default=1)
    return max(BLOCK_STEPS, BLOCK_ROWS * max(rows, 1))


def screen(loss: Signal, others: Sequence[Signal], *, block: int, start_after: int) -> list[tuple[int, int]]:
    """Runs of consecutive blocks (first, last) where the loss and a logit signal both rose."""
    lm = block_medians(loss, block)
    om = [(s.name, block_medians(s, block)) for s in others]
    hits = []
    for b in sorted(lm):
        if (b - WINDOW_BLOCKS + 1) * block < start_after:
            continue
        rise = _rises(lm, b)
        if rise is None or rise < LOSS_RISE:
            continue
        if any((r := _rises(m, b)) is not None and r >= SIGNAL_RISE[name] for name, m in om):
            hits.append(b)
    runs: list[tuple[int, int]] = []
    for b in hits:
        if runs and b - runs[-1][1] <= 2:     # one quiet block inside an episode does not end it
            runs[-1] = (runs[-1][0], b)
        else:
            runs.append((b, b))
    return runs


def _thin(steps: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    if len(steps) <= MAX_POINTS:
        return steps, y
    idx = np.linspace(0, len(steps) - 1, MAX_POINTS).round().astype(int)
    return steps[idx], y[idx]


def trend(sig: Signal, lo: int, hi: int) -> dict[str, float] | None:
    """Mann–Kendall (Kendall's τ against the step) and Theil–Sen over [lo, hi] of a log signal."""
    from scipy import stats   # only where the screen fired: scipy.stats is slow to import (bench/NOTES.md)

    m = (sig.steps >= lo) & (sig.steps <= hi)
    steps, y = _thin(sig.steps[m], sig.y[m])
    if len(steps) < 2 * BLOCK_ROWS:
        return None
    tau = stats.kendalltau(steps, y)
    slope, intercept, _, _ = stats.theilslopes(y, steps)
    return {"tau": float(tau.statistic), "p": float(tau.pvalue), "slope": float(slope), "intercept": float(intercept),
            "points": int(m.sum())}


def _onset(sig: Signal, block: int, lo: int, first_hit: int) -> int | None:
    """Where a signal left its level: the first block after the last one (before the first
    screened block) whose median sits within ONSET_TOL of the level before the episode (the
    median of the WINDOW_BLOCKS blocks before `lo`)."""
    meds = block_medians(sig, block)
    b_lo = lo // block
    pre = [meds[b] for b in range(b_lo - WINDOW_BLOCKS, b_lo) if b in meds]
    if not pre:
        return None
    level, tol = float(np.median(pre)), ONSET_TOL[sig.name]
    for b in range(first_hit, b_lo - 1, -1):
        if b in meds and meds[b] - level <= tol:
            return (b + 1) * block
    return lo


def logit_growth(loss: Signal | None, others: Sequence[Signal], *, start_after: int, last_step: int,
                 owner: Callable[[int], int], metric: str) -> list[Anomaly]:
    """`logit_growth` episodes (see the module doc); each Anomaly is placed at the block end where
    the screen first held, with `start`/`end` the trend's window."""
    others = [s for s in others if s is not None]
    if loss is None or not others:
        return []
    block = block_size([loss, *others])
    out = []
    for b0, b1 in screen(loss, others, block=block, start_after=start_after):
        lo, hi = (b0 - WINDOW_BLOCKS + 1) * block, min((b1 + 1) * block - 1, last_step)
        lt = trend(loss, lo, hi)
        if lt is None or lt["slope"] <= 0 or lt["p"] >= P_MAX:
            continue
        confirmed = []
        for s in others:
            t = trend(s, lo, hi)
            if t is not None and t["slope"] > 0 and t["p"] < P_MAX:
                confirmed.append((s, t))
        if not confirmed:
            continue
        onsets = [o for s, _ in confirmed if (o := _onset(s, block, lo, b0)) is not None]
        start = min(onsets) if onsets else lo
        anchor = min((b0 + 1) * block - 1, last_step)
        out.append(_finding(loss, lt, confirmed, start, hi, anchor, block, owner, metric))
    return out


def _rise(sig: Signal, lo: int, hi: int) -> float:
    """Relative change between the first and the last 10% of the window (medians)."""
    m = (sig.steps >= lo) & (sig.steps <= hi)
    y = sig.y[m]
    k = max(len(y) // 10, 1)
    return float(math.expm1(np.median(y[-k:]) - np.median(y[:k])))


def _finding(loss: Signal, lt: dict, confirmed, start: int, end: int, anchor: int, block: int, owner, metric) -> Anomaly:
    details: dict = {"start": start, "end": end, "window_steps": end - start + 1, "block_steps": block,
                     "loss_rise": _rise(loss, start, end), "loss_slope_per_1k": lt["slope"] * 1000, "loss_p": lt["p"],
                     "loss_tau": lt["tau"], "signals": [], "thresholds": {
                         "loss_rise": math.expm1(LOSS_RISE), **{k: math.expm1(v) for k, v in SIGNAL_RISE.items()},
                         "p": P_MAX, "window_blocks": WINDOW_BLOCKS}}
    for s, t in confirmed:
        rise = _rise(s, start, end)
        details["signals"].append({"signal": s.name, "key": s.key, "rise": rise, "slope_per_1k": t["slope"] * 1000,
                                   "p": t["p"], "tau": t["tau"], "points": t["points"]})
        details[f"{s.name}_rise"] = rise
        details[f"{s.name}_p"] = t["p"]
    details["confidence"] = CONFIDENCE[min(len(confirmed), 3)]
    return Anomaly(owner(anchor), anchor, metric, "logit_growth", details["loss_rise"] * 100, "logit_growth", details)
