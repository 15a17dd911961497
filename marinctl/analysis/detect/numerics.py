"""Numerics: NaN/Inf values, and the overflow markers mixed-precision trainers log.

- **nonfinite**: any NaN/Inf value (Marin: instability = NaN/Inf; grug raises "Non-finite
  loss … at step N+1" and Levanter's `crash_on_nan` stops the run: Marin's
  `lib/levanter/src/levanter/trainer.py`, `.agents/skills/manage-hero-run/SKILL.md`).
- **overflow**: fp16 dynamic loss scaling halves its scale at each overflowing step and skips
  that update; OPT-175B's logbook shows the scale "collapsing" to its floor before NaNs
  (facebookresearch/metaseq `projects/OPT/chronicles/`, the 27% update; BLOOM's "skipped
  iterations"). A logged loss scale below 1/`SCALE_DROP` = 1/8 of its peak over the previous
  `SCALE_WINDOW` = 100 rows (three halvings), or a skipped/overflow counter that went up, is
  `numerics`. 8× is marinctl's choice (one halving is routine).
"""

from __future__ import annotations

import re
from typing import Callable, Sequence

import numpy as np

from marinctl.domain import Anomaly

SCALE_DROP = 8.0
SCALE_WINDOW = 100

_SCALE = re.compile(r"(^|/)(loss_scale|grad_scale|scaler/scale|loss_scaler)$", re.I)
_COUNTER = re.compile(r"(skipped|overflow|nonfinite|num_nan|num_inf|inf_count|nan_count)", re.I)
_NOT_COUNTER = re.compile(r"capacity|drop|router", re.I)


def nonfinite(rows: Sequence[tuple[str, int, int, float]], owner: Callable[[int], int]) -> list[Anomaly]:
    """One finding per key: its first non-finite step and how many there are (history.nonfinite's rows)."""
    return [Anomaly(owner(step), step, key, "nonfinite", float(count), "numerics",
                    {"first_step": step, "count": count, "value": str(value)}) for key, step, count, value in rows]


def marker_keys(keys: Sequence[str]) -> list[str]:
    """Loss-scale and skipped/overflow counter keys (not MoE capacity overflow)."""
    return [k for k in keys if _SCALE.search(k) or (_COUNTER.search(k) and not _NOT_COUNTER.search(k))]


def overflow(series: dict[str, tuple[np.ndarray, np.ndarray]], emit_lo: int, emit_hi: int | None,
             owner: Callable[[int], int]) -> list[Anomaly]:
    """The first step in range where a loss scale collapsed or an overflow counter rose, per key."""
    out = []
    for key, (steps, v) in series.items():
        ok = np.isfinite(v)
        steps, v = steps[ok], v[ok]
        if len(v) < 2:
            continue
        if _SCALE.search(key):
            padded = np.r_[np.full(SCALE_WINDOW - 1, v[0]), v]
            peak = np.lib.stride_tricks.sliding_window_view(padded, SCALE_WINDOW).max(axis=1)   # trailing, this row included
            hit = np.flatnonzero(v[1:] * SCALE_DROP < peak[:-1]) + 1
            what = "the loss scale fell below 1/8 of its recent peak (repeated overflows halving it)"
        else:
            hit = np.flatnonzero(v[1:] > v[:-1]) + 1
            what = "an overflow/skipped-step counter went up"
        hit = hit[(steps[hit] >= emit_lo) & ((steps[hit] < emit_hi) if emit_hi is not None else True)]
        if len(hit):
            i = int(hit[0])
            out.append(Anomaly(owner(int(steps[i])), int(steps[i]), key, "overflow", float(len(hit)), "numerics",
                               {"value": float(v[i]), "previous_value": float(v[i - 1]), "steps": len(hit), "what": what,
                                "first_step": int(steps[i])}))
    return out
