"""Sustained throughput collapse: one window with a frozen baseline, found from any step inside it.

Marin's hero runbook alerts on throughput "sustained 20–30% below baseline over several check
cadences", checked every 15 minutes (`.agents/skills/manage-hero-run/SKILL.md`). Scored row by
row against a trailing baseline, a long collapse is missed twice over: the baseline sinks into
the collapse (after `TPUT_BASE` slow rows the slow rate *is* the baseline), and a rate hovering
near the bar crosses it at scattered rows. So a collapse is a window:

- **onset**: the median rate of the last `TPUT_RECENT` = 30 logged rows (the public W&B
  watcher's SLOW rule: the median of 30 step times) falls below `TPUT_RATIO` = 0.8 × the
  median of the `TPUT_BASE` = 1,000 rows before them — 20% below baseline, the runbook's lower
  bound (computed by DuckDB: store/rolling.rate_drops).
- **the window**: from the onset the baseline is frozen at that pre-onset median; the window
  lasts while the rolling 30-row median stays below `TPUT_RECOVER` = 0.9 × it. The gap between
  the two bars is hysteresis (marinctl's choice), so a rate near the bar is one window, not
  many. Its first and last steps are the first and last logged rows at the collapsed rate
  (below the onset bar, resp. the recovery bar): a rolling median lags by half its window.
- **sustained**: reported once the window has lasted `TPUT_MIN_S` = 45 minutes of wall clock
  (`_timestamp`): three of the runbook's 15-minute check cadences; without a logged wall
  clock, 3 × `TPUT_RECENT` rows. A collapse still under way at the last logged row is reported
  as soon as it is that long, and continued by the next pass with the same frozen baseline
  (`Open`, kept in the detection pass's memory), however long it lasts.

Score: 1 − the window's median rate / baseline (the collapse's depth). Tokens/s is read when
logged, else the inverse of `throughput/duration` (seconds per step).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Callable

import numpy as np

from marinctl.domain import Anomaly
from marinctl.store import Connection

TPS, DURATION, TIMESTAMP = "throughput/tokens_per_second", "throughput/duration", "_timestamp"
TPUT_RECENT, TPUT_BASE = 30, 1000
TPUT_RATIO = 0.8            # Marin runbook: sustained 20–30% below baseline — the bar at 20%
TPUT_RECOVER = 0.9          # marinctl: hysteresis, the window closes above 90% of baseline
TPUT_MIN_BASE = 100         # baseline rows before a drop counts
TPUT_MIN_S = 45 * 60        # Marin runbook: "over several check cadences" of 15 min — three
TPUT_MIN_ROWS = 3 * TPUT_RECENT

Series = tuple[np.ndarray, np.ndarray]


@dataclass(frozen=True)
class Open:
    """A collapse still under way at the last row a pass read: where it began, against what."""

    key: str
    start: int
    baseline: float
    since: float | None = None      # the wall clock at `start` (its duration, once the rows before are not read)

    def as_memory(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def of(memory: Any) -> Open | None:
        try:
            since = memory.get("since")
            return Open(str(memory["key"]), int(memory["start"]), float(memory["baseline"]),
                        float(since) if since is not None else None)
        except (TypeError, KeyError, ValueError, AttributeError):
            return None


def _medians(rate: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """The rolling median of `TPUT_RECENT` rows ending at each row lo..hi−1 (fewer rows at the start)."""
    if lo < TPUT_RECENT - 1:
        head = [float(np.median(rate[:k + 1])) for k in range(lo, min(hi, TPUT_RECENT - 1))]
        lo = min(hi, TPUT_RECENT - 1)
    else:
        head = []
    if lo >= hi:
        return np.asarray(head)
    view = np.lib.stride_tricks.sliding_window_view(rate[lo - TPUT_RECENT + 1:hi], TPUT_RECENT)
    return np.r_[head, np.median(view, axis=1)]


def _walk(rate: np.ndarray, i: int, bar: float, chunk: int = 4096) -> int:
    """The first row from `i` on whose rolling median is back at or above `bar` (len: none)."""
    j = i
    while j < len(rate):
        med = _medians(rate, j, min(j + chunk, len(rate)))
        back = np.flatnonzero(med >= bar)
        if len(back):
            return j + int(back[0])
        j += len(med)
    return len(rate)


def collapses(con: Connection, data, cols: dict[str, Series], owner: Callable[[int], int], *,
              open_: Open | None = None, reaches_end: bool = True) -> tuple[list[Anomaly], Open | None]:
    """Every sustained collapse in what was read (anchored at its first step), and the one still
    under way at the last row (when `reaches_end`: the read ran to the run's last row)."""
    key, invert = (TPS, False) if TPS in cols else (DURATION, True)
    if key not in cols:
        return [], None
    steps, v = cols[key]
    ok = np.isfinite(v) & (v > 0)
    steps, rate = steps[ok], (1.0 / v[ok] if invert else v[ok])
    if len(steps) < TPUT_RECENT:
        return [], None
    from marinctl.store import rolling

    onsets = [(int(s), float(b), False) for s, _, b in rolling.rate_drops(
        con, data, key, invert=invert, recent=TPUT_RECENT, base=TPUT_BASE, min_points=TPUT_MIN_BASE, ratio=TPUT_RATIO)]
    if open_ is not None and open_.key == key and open_.start < int(steps[0]) + TPUT_BASE:
        onsets.insert(0, (max(open_.start, int(steps[0])), open_.baseline, True))   # continued from the last pass
    clock = cols.get(TIMESTAMP)
    out: list[Anomaly] = []
    still: Open | None = None
    done_to = -1
    for onset, base, continued in sorted(onsets, key=lambda o: (o[0], not o[2])):
        i = int(np.searchsorted(steps, onset))
        if i <= done_to or i >= len(steps):
            continue
        j = done_to = _walk(rate, i, TPUT_RECOVER * base)
        first = i if continued else next(
            (k for k in range(max(i - TPUT_RECENT + 1, 0), i + 1) if rate[k] < TPUT_RATIO * base), i)
        if j <= first:
            continue
        last = next((k for k in range(j - 1, first - 1, -1) if rate[k] < TPUT_RECOVER * base), j - 1)
        start = open_.start if continued else int(steps[first])
        if not continued and not _sustained(steps, first, last, clock):
            continue
        open_now = j >= len(steps) and reaches_end
        since = open_.since if continued else _clock_at(clock, int(steps[first]))
        end_clock = _clock_at(clock, int(steps[last]))
        window = rate[first:last + 1]
        ratio = float(np.median(window) / base)
        worst = float(np.min(_medians(rate, first, last + 1)) / base)
        details = {"start": start, "end": int(steps[last]), "steps": int(steps[last]) - start + 1, "rows": last - first + 1,
                   "baseline_median": base if not invert else 1.0 / base,
                   "window_median": float(np.median(window)) if not invert else float(1.0 / np.median(window)),
                   "ratio": ratio, "worst_ratio": worst, "threshold_ratio": TPUT_RATIO,
                   "recover_ratio": TPUT_RECOVER, "recent_window": TPUT_RECENT, "baseline_window": TPUT_BASE,
                   "duration_s": end_clock - since if since is not None and end_clock is not None else None,
                   "min_duration_s": TPUT_MIN_S, "ongoing": open_now,
                   "rate": "tokens/s" if not invert else "steps/s (1 / throughput/duration)"}
        out.append(Anomaly(owner(start), start, key, "throughput_collapse", 1.0 - ratio, "infrastructure", details))
        if open_now:
            still = Open(key, start, base, since)
    return out, still


def _clock_at(clock: Series | None, step: int) -> float | None:
    """The wall clock at a step (interpolated between logged rows), None outside what was read."""
    if clock is None or not len(clock[0]) or not clock[0][0] <= step <= clock[0][-1]:
        return None
    return float(np.interp(step, clock[0], clock[1]))


def _duration(steps: np.ndarray, first: int, last: int, clock: Series | None) -> float | None:
    a, b = _clock_at(clock, int(steps[first])), _clock_at(clock, int(steps[last]))
    return b - a if a is not None and b is not None else None


def _sustained(steps: np.ndarray, first: int, last: int, clock: Series | None) -> bool:
    seconds = _duration(steps, first, last, clock)
    if seconds is not None and np.isfinite(seconds):
        return seconds >= TPUT_MIN_S
    return last - first + 1 >= TPUT_MIN_ROWS
