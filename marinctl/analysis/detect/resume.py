"""A resumed or forked run whose loss does not match its parent's over the steps both logged.

Marin's hero runbook (`.agents/skills/manage-hero-run/SKILL.md`) alerts on a resume whose loss
does not match its parent's — "> 0.002 during catch-up", "> 1% after the post-resume warmup" —
and compares a swap against the parent run "over 200 steps". A W&B fork child (the hero's
`hero-<change>-step<N>k` runs; store/lineage.py) trains again the steps its parent logged after
the fork point, so those steps — the lineage's overlap — are where the two can be compared,
row by row at the same step. marinctl's reading of the two bars:

- **catch-up** (absolute, 0.002): a child that replays its parent's batches from the parent's
  state reproduces the parent's loss at each step up to numerics. Such a replay shows as
  differences that barely vary from row to row: their spread (MAD) is under `REPLAY_SHARE` =
  half the loss's own row-to-row noise (MAD of the parent's successive differences / √2). There,
  a median |Δloss| above `CATCHUP_ABS` = 0.002 over the compared steps is a mismatch. A child
  on other batches (a new data order, a swap that changes the data path) cannot meet a bar
  below its own noise; only the relative bar applies to it.
- **after the post-resume warm-up** (relative, 1%): past the first `RESUME_WARMUP` = 50 steps
  after the fork (the runbook gives no length; marinctl's choice: compiled kernels, the data
  loader and a swap's own settling), the median of child/parent − 1 over the next
  `COMPARE_STEPS` = 200 steps (the runbook's comparison span) beyond ±`AFTER_REL` = 1% is a
  mismatch. A median over 200 steps is robust to the child's own spikes.

At least `MIN_ROWS` = 10 compared rows are needed (20 for the relative bar). The finding is
`resume_mismatch` on the loss, cause `infrastructure` (the resume, not the model: a wrong
checkpoint, lost optimizer state, a data loader out of place), at the first compared step,
with the parent, the fork step, both medians, the mismatch, the bar, and the steps compared
and those past the bar in evidence. Score: the relative mismatch.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from marinctl.domain import Anomaly

CATCHUP_ABS = 0.002         # Marin runbook: resume loss mismatch during catch-up
AFTER_REL = 0.01            # Marin runbook: after the post-resume warm-up
RESUME_WARMUP = 50          # marinctl: the post-resume warm-up, in steps
COMPARE_STEPS = 200         # Marin runbook: compare against the parent over 200 steps
REPLAY_SHARE = 0.5
MIN_ROWS, MIN_REL_ROWS = 10, 20
SPAN = RESUME_WARMUP + COMPARE_STEPS   # steps after the fork that are ever compared
LISTED = 50                 # steps past the bar listed in evidence

Series = tuple[np.ndarray, np.ndarray]


def _mad(x: np.ndarray) -> float:
    return float(np.median(np.abs(x - np.median(x)))) if len(x) else 0.0


def compare(child: Series, parent: Series, *, fork_step: int, parent_run: str | None,
            owner: Callable[[int], int]) -> Anomaly | None:
    """The mismatch of a fork child's loss against its parent's over their overlap, or None."""
    cs, cv = child
    ps, pv = parent
    lo, hi = fork_step + 1, fork_step + SPAN
    cm = (cs >= lo) & (cs <= hi) & np.isfinite(cv)
    pm = (ps >= lo) & np.isfinite(pv)
    both, ci, pi = np.intersect1d(cs[cm], ps[pm], assume_unique=True, return_indices=True)
    if len(both) < MIN_ROWS:
        return None
    c, p = cv[cm][ci], pv[pm][pi]
    d = c - p
    noise = _mad(np.diff(pv[pm])) / np.sqrt(2) if pm.sum() > 2 else 0.0
    replay = bool(noise > 0 and _mad(d) < REPLAY_SHARE * noise)
    ev: dict[str, Any] = {"fork_parent": parent_run, "fork_step": fork_step, "replay": replay, "noise": noise,
                          "spread": _mad(d), "compared_from": int(both[0]), "compared_to": int(both[-1]),
                          "rows_compared": int(len(both)), "catchup_abs": CATCHUP_ABS, "after_rel": AFTER_REL,
                          "resume_warmup_steps": RESUME_WARMUP, "compare_steps": COMPARE_STEPS}
    if replay and float(np.median(np.abs(d))) > CATCHUP_ABS:
        over = both[np.abs(d) > CATCHUP_ABS]
        return _finding(both, c, p, d, over, "catch-up", CATCHUP_ABS, float(np.median(np.abs(d))), ev, owner)
    after = both > fork_step + RESUME_WARMUP
    if after.sum() >= MIN_REL_ROWS:
        rel = c[after] / p[after] - 1.0
        mismatch = float(np.median(rel))
        if abs(mismatch) > AFTER_REL:
            over = both[after][np.abs(rel) > AFTER_REL]
            return _finding(both[after], c[after], p[after], d[after], over, "after the post-resume warm-up", AFTER_REL,
                            mismatch, ev, owner)
    return None


def _finding(steps: np.ndarray, c: np.ndarray, p: np.ndarray, d: np.ndarray, over: np.ndarray, phase: str, bar: float,
             mismatch: float, ev: dict[str, Any], owner) -> Anomaly:
    start, end = int(steps[0]), int(steps[-1])
    rel = float(np.median(c / p - 1.0))
    ev.update(start=start, end=end, phase=phase, threshold=bar, mismatch=mismatch,
              median_abs_diff=float(np.median(np.abs(d))), median_diff=float(np.median(d)), median_rel_diff=rel,
              child_median=float(np.median(c)), parent_median=float(np.median(p)), rows=int(len(steps)),
              steps_over=[int(s) for s in over[:LISTED]], rows_over=int(len(over)))
    return Anomaly(owner(start), start, "train/loss", "resume_mismatch", abs(rel), "infrastructure", ev)
