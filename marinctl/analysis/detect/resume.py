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

**The episode is the overlap, not the runbook's span.** The runbook's 200 steps decide whether
the child matches; they do not end the mismatch. From there the episode runs on over every
following block of `HOLD_STEPS` = 50 steps both logged whose median gap stays beyond
`HOLD_SHARE` = half the bar that found it (the same sign; hysteresis, as throughput.py's
windows have: marinctl's), so a child still above its parent a thousand steps later is still
in it there; `end` is the last such block's last step (the last step both logged, when the gap
never closes).

**Below the bar.** A gap smaller than the runbook's bar but clear of the loss's noise is a
`resume_offset` — explain says the child runs off its parent there; nobody is paged: a median
past `MINOR_SHARE` = half the bar (0.001 during a replay, 0.5% after the warm-up), and for the
relative gap also `MINOR_SE` = 4 standard errors of that median (1.2533 · 1.4826 · MAD / √n) —
a child on its own batches at 3% noise cannot claim 0.5% from 200 rows. Its evidence names the
bar it did not reach (`alert_bar`). Both thresholds are marinctl's.
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
SPAN = RESUME_WARMUP + COMPARE_STEPS   # steps after the fork that decide the bar
HOLD_STEPS, HOLD_SHARE, HOLD_ROWS = 50, 0.5, 3
MINOR_SHARE, MINOR_SE = 0.5, 4.0
LISTED = 50                 # steps past the bar listed in evidence
MISMATCH, OFFSET = "resume_mismatch", "resume_offset"
CATCH_UP, AFTER = "catch-up", "after the post-resume warm-up"
RUNBOOK_BARS = {CATCH_UP: "> 0.002 during catch-up", AFTER: "> 1% after the post-resume warm-up"}

Series = tuple[np.ndarray, np.ndarray]


def _mad(x: np.ndarray) -> float:
    return float(np.median(np.abs(x - np.median(x)))) if len(x) else 0.0


def compare(child: Series, parent: Series, *, fork_step: int, parent_run: str | None,
            owner: Callable[[int], int]) -> Anomaly | None:
    """The gap between a fork child's loss and its parent's over their overlap (a mismatch, or an
    offset below the bar), or None."""
    cs, cv = child
    ps, pv = parent
    lo, hi = fork_step + 1, fork_step + SPAN
    cm = (cs >= lo) & np.isfinite(cv)
    pm = (ps >= lo) & np.isfinite(pv)
    steps, ci, pi = np.intersect1d(cs[cm], ps[pm], assume_unique=True, return_indices=True)
    every_c, every_p = cv[cm][ci], pv[pm][pi]
    span = steps <= hi
    both, c, p = steps[span], every_c[span], every_p[span]
    if len(both) < MIN_ROWS:
        return None
    d = c - p
    pspan = pm & (ps <= hi)
    noise = _mad(np.diff(pv[pspan])) / np.sqrt(2) if pspan.sum() > 2 else 0.0
    replay = bool(noise > 0 and _mad(d) < REPLAY_SHARE * noise)
    ev: dict[str, Any] = {"fork_parent": parent_run, "fork_step": fork_step, "replay": replay, "noise": noise,
                          "spread": _mad(d), "compared_from": int(both[0]), "compared_to": int(both[-1]),
                          "rows_compared": int(len(both)), "overlap_to": int(steps[-1]), "overlap_rows": int(len(steps)),
                          "catchup_abs": CATCHUP_ABS, "after_rel": AFTER_REL,
                          "resume_warmup_steps": RESUME_WARMUP, "compare_steps": COMPARE_STEPS}
    abs_gap = float(np.median(np.abs(d)))
    after = both > fork_step + RESUME_WARMUP
    rel = c[after] / p[after] - 1.0 if after.sum() >= MIN_REL_ROWS else None
    mismatch = float(np.median(rel)) if rel is not None else 0.0
    whole = (steps, every_c, every_p)
    if replay and abs_gap > CATCHUP_ABS:
        return _finding(MISMATCH, both, c, p, d, CATCH_UP, CATCHUP_ABS, abs_gap, ev, whole, owner)
    if rel is not None and abs(mismatch) > AFTER_REL:
        return _finding(MISMATCH, both[after], c[after], p[after], d[after], AFTER, AFTER_REL, mismatch, ev, whole, owner)
    if replay and abs_gap > MINOR_SHARE * CATCHUP_ABS:
        return _finding(OFFSET, both, c, p, d, CATCH_UP, MINOR_SHARE * CATCHUP_ABS, abs_gap, ev, whole, owner)
    if rel is not None and abs(mismatch) > MINOR_SHARE * AFTER_REL:
        se = 1.2533 * 1.4826 * _mad(rel) / np.sqrt(len(rel))
        if abs(mismatch) > MINOR_SE * se:
            ev["standard_error"] = float(se)
            return _finding(OFFSET, both[after], c[after], p[after], d[after], AFTER, MINOR_SHARE * AFTER_REL, mismatch, ev,
                            whole, owner)
    return None


def _held_to(whole: tuple[np.ndarray, np.ndarray, np.ndarray], phase: str, bar: float, sign: float, from_step: int) -> int:
    """The last step of the episode: past `from_step`, blocks of HOLD_STEPS both logged whose
    median gap stays beyond HOLD_SHARE × `bar` (same sign) carry it on; the first that does not
    (or has fewer than HOLD_ROWS rows) ends it."""
    steps, c, p = whole
    end = from_step
    while True:
        m = (steps > end) & (steps <= end + HOLD_STEPS)
        if m.sum() < HOLD_ROWS:
            return end
        gap = (np.abs(c[m] - p[m]) if phase == CATCH_UP else sign * (c[m] / p[m] - 1.0))
        if float(np.median(gap)) <= HOLD_SHARE * bar:
            return end
        end = int(steps[m][-1])


def _finding(kind: str, steps: np.ndarray, c: np.ndarray, p: np.ndarray, d: np.ndarray, phase: str, bar: float,
             mismatch: float, ev: dict[str, Any], whole, owner) -> Anomaly:
    over = steps[np.abs(d if phase == CATCH_UP else c / p - 1.0) > bar]
    start = int(steps[0])
    rel = float(np.median(c / p - 1.0))
    end = _held_to(whole, phase, bar, 1.0 if mismatch >= 0 else -1.0, int(steps[-1]))
    runbook = CATCHUP_ABS if phase == CATCH_UP else AFTER_REL
    ev.update(start=start, end=end, decided_to=int(steps[-1]), phase=phase, threshold=bar, mismatch=mismatch,
              median_abs_diff=float(np.median(np.abs(d))), median_diff=float(np.median(d)), median_rel_diff=rel,
              child_median=float(np.median(c)), parent_median=float(np.median(p)), rows=int(len(steps)),
              steps_over=[int(s) for s in over[:LISTED]], rows_over=int(len(over)),
              alert_bar={"what": RUNBOOK_BARS[phase], "source": "Marin's runbook", "value": runbook,
                         "reached": kind == MISMATCH})
    if kind == OFFSET:
        ev["confidence"] = 0.8
    return Anomaly(owner(start), start, "train/loss", kind, abs(rel), "infrastructure", ev)
