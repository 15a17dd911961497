"""Slowdowns as windows with a frozen baseline, found from any step inside them: the sustained
collapse Marin's runbook alerts on, and the shorter or shallower ones explain still reports.

Marin's hero runbook alerts on throughput "sustained 20–30% below baseline over several check
cadences", checked every 15 minutes (`.agents/skills/manage-hero-run/SKILL.md`). Scored row by
row against a trailing baseline, a long collapse is missed twice over: the baseline sinks into
the collapse (after `TPUT_BASE` slow rows the slow rate *is* the baseline), and a rate hovering
near the bar crosses it at scattered rows. So a slowdown is a window:

- **onset**: the median rate of the last `TPUT_RECENT` = 30 logged rows (the public W&B
  watcher's SLOW rule: the median of 30 step times) falls below `TPUT_RATIO` = 0.8 × the
  median of the `TPUT_BASE` = 1,000 rows before them — 20% below baseline, the runbook's lower
  bound (computed by DuckDB: store/rolling.rate_drops).
- **the window**: from the onset the baseline is frozen at that pre-onset median; the window
  lasts while the rolling 30-row median stays below `TPUT_RECOVER` = 0.9 × it. The gap between
  the two bars is hysteresis (marinctl's choice), so a rate near the bar is one window, not
  many. Its first and last steps are the first and last logged rows at the slow rate (below
  the onset bar, resp. the recovery bar): a rolling median lags by half its window.
- **sustained** — a `throughput_collapse`, what alerts fire on: the window has lasted
  `TPUT_MIN_S` = 45 minutes of wall clock (`_timestamp`): three of the runbook's 15-minute
  check cadences; without a logged wall clock, 3 × `TPUT_RECENT` rows. A collapse still under
  way at the last logged row is reported as soon as it is that long, and continued by the next
  pass with the same frozen baseline (`Open`, kept in the detection pass's memory), however
  long it lasts.
- **below the alert's bar** — a `throughput_dip`: a window that ended (or is still young)
  before 45 minutes, or a shallower one: the 30-row median below `DIP_RATIO` = 0.9 × baseline
  (10% slower), closed above `DIP_RECOVER` = 0.95 × it, that never reached the runbook's
  depth (both marinctl's choices, the same hysteresis one step up). Unusual, worth saying
  when someone asks about a step inside it, not worth paging anyone: its evidence names the
  bar it did not reach (`alert_bar`: depth, duration, whose). A shallow window that holds a
  deep one is the deep one. A dip still under way is carried to the next pass like a
  collapse, and becomes the collapse when it lasts (detection.py replaces the stored dip).

Score: 1 − the window's median rate / baseline (its depth). Tokens/s is read when logged,
else the inverse of `throughput/duration` (seconds per step).
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
DIP_RATIO = 0.9             # marinctl: a slowdown below the alert's bar — 10% below baseline
DIP_RECOVER = 0.95          # marinctl: the same hysteresis, one step up
COLLAPSE, DIP = "throughput_collapse", "throughput_dip"
DEEP, SHALLOW = "collapse", "dip"     # the two bars a window is found by (and the memory's keys)
BARS = {DEEP: (TPUT_RATIO, TPUT_RECOVER), SHALLOW: (DIP_RATIO, DIP_RECOVER)}
RUNBOOK_BAR = "sustained 20–30% below baseline over several 15-minute checks"

Series = tuple[np.ndarray, np.ndarray]


@dataclass(frozen=True)
class Open:
    """A slowdown still under way at the last row a pass read: where it began, against what, and
    whether it already counts as sustained."""

    key: str
    start: int
    baseline: float
    since: float | None = None      # the wall clock at `start` (its duration, once the rows before are not read)
    sustained: bool = True          # reported as a collapse already (a memory from before dips: always)

    def as_memory(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def of(memory: Any) -> Open | None:
        try:
            since = memory.get("since")
            return Open(str(memory["key"]), int(memory["start"]), float(memory["baseline"]),
                        float(since) if since is not None else None, bool(memory.get("sustained", True)))
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


@dataclass
class _Window:
    first: int          # row indices of the first and last slow rows
    last: int
    start: int          # its first step (a continued window's, from the pass that saw it begin)
    base: float
    since: float | None
    open_: bool         # reaches the last row read, and that is the run's last row
    sustained: bool


def _windows(steps: np.ndarray, rate: np.ndarray, onsets: list[tuple[int, float]], carried: Open | None, tier: str,
             clock: Series | None, reaches_end: bool) -> list[_Window]:
    """The windows one tier's bars find: each onset walked to its recovery (see the module doc)."""
    ratio, recover = BARS[tier]
    todo = [(s, b, False) for s, b in onsets]
    if carried is not None and carried.start < int(steps[0]) + TPUT_BASE:
        todo.insert(0, (max(carried.start, int(steps[0])), carried.baseline, True))   # continued from the last pass
    out: list[_Window] = []
    done_to = -1
    for onset, base, continued in sorted(todo, key=lambda o: (o[0], not o[2])):
        i = int(np.searchsorted(steps, onset))
        if i <= done_to or i >= len(steps):
            continue
        j = done_to = _walk(rate, i, recover * base)
        first = i if continued else next(
            (k for k in range(max(i - TPUT_RECENT + 1, 0), i + 1) if rate[k] < ratio * base), i)
        if j <= first:
            continue
        last = next((k for k in range(j - 1, first - 1, -1) if rate[k] < recover * base), j - 1)
        start = carried.start if continued else int(steps[first])
        since = carried.since if continued else _clock_at(clock, int(steps[first]))
        rows_before = 0 if not continued else max(int(steps[first]) - start, 0) // _interval(steps)
        sustained = (continued and carried.sustained) or _sustained(steps, first, last, clock, since, rows_before)
        out.append(_Window(first, last, start, base, since, j >= len(steps) and reaches_end, sustained))
    return out


def slowdowns(con: Connection, data, cols: dict[str, Series], owner: Callable[[int], int], *,
              carried: dict[str, Open | None] | None = None, reaches_end: bool = True,
              ) -> tuple[list[Anomaly], dict[str, Open]]:
    """Every slowdown window in what was read (anchored at its first step): collapses and dips;
    and the ones still under way at the last row ({tier: Open}; when `reaches_end`: the read ran
    to the run's last row), for the next pass."""
    key, invert = (TPS, False) if TPS in cols else (DURATION, True)
    if key not in cols:
        return [], {}
    steps, v = cols[key]
    ok = np.isfinite(v) & (v > 0)
    steps, rate = steps[ok], (1.0 / v[ok] if invert else v[ok])
    if len(steps) < TPUT_RECENT:
        return [], {}
    from marinctl.store import rolling

    # every row below the shallow bar; those below the deep one are the deep tier's onsets
    drops = rolling.rate_drops(con, data, key, invert=invert, recent=TPUT_RECENT, base=TPUT_BASE,
                               min_points=TPUT_MIN_BASE, ratio=DIP_RATIO)
    carried = {t: o for t, o in (carried or {}).items() if o is not None and o.key == key}
    clock = cols.get(TIMESTAMP)
    deep = _windows(steps, rate, [(int(s), float(b)) for s, r, b in drops if r < TPUT_RATIO * b], carried.get(DEEP),
                    DEEP, clock, reaches_end)
    shallow = [w for w in _windows(steps, rate, [(int(s), float(b)) for s, _, b in drops], carried.get(SHALLOW),
                                   SHALLOW, clock, reaches_end)
               if not any(w.first <= d.last and d.first <= w.last for d in deep)]
    out: list[Anomaly] = []
    still: dict[str, Open] = {}
    for tier, found in ((DEEP, deep), (SHALLOW, shallow)):
        for w in found:
            out.append(_anomaly(w, tier, steps, rate, key, invert, clock, owner))
            if w.open_:
                still[tier] = Open(key, w.start, w.base, w.since, w.sustained and tier == DEEP)
    return sorted(out, key=lambda a: a.step), still


def _anomaly(w: _Window, tier: str, steps: np.ndarray, rate: np.ndarray, key: str, invert: bool,
             clock: Series | None, owner: Callable[[int], int]) -> Anomaly:
    window = rate[w.first:w.last + 1]
    ratio = float(np.median(window) / w.base)
    worst = float(np.min(_medians(rate, w.first, w.last + 1)) / w.base)
    end_clock = _clock_at(clock, int(steps[w.last]))
    duration = end_clock - w.since if w.since is not None and end_clock is not None else None
    collapse = tier == DEEP and w.sustained
    short_of = ([] if tier == DEEP else ["depth"]) + ([] if w.sustained else ["duration"])
    details = {"start": w.start, "end": int(steps[w.last]), "steps": int(steps[w.last]) - w.start + 1,
               "rows": w.last - w.first + 1, "baseline_median": w.base if not invert else 1.0 / w.base,
               "window_median": float(np.median(window)) if not invert else float(1.0 / np.median(window)),
               "ratio": ratio, "worst_ratio": worst, "threshold_ratio": BARS[tier][0],
               "recover_ratio": BARS[tier][1], "recent_window": TPUT_RECENT, "baseline_window": TPUT_BASE,
               "duration_s": duration, "min_duration_s": TPUT_MIN_S, "ongoing": w.open_,
               "rate": "tokens/s" if not invert else "steps/s (1 / throughput/duration)",
               "alert_bar": {"what": RUNBOOK_BAR, "source": "Marin's runbook", "depth": 1.0 - TPUT_RATIO,
                             "duration_s": TPUT_MIN_S, "reached": collapse, "short_of": short_of}}
    if not collapse:
        details["confidence"] = 0.8
    return Anomaly(owner(w.start), w.start, key, COLLAPSE if collapse else DIP, 1.0 - ratio, "infrastructure", details)


def _clock_at(clock: Series | None, step: int) -> float | None:
    """The wall clock at a step (interpolated between logged rows), None outside what was read."""
    if clock is None or not len(clock[0]) or not clock[0][0] <= step <= clock[0][-1]:
        return None
    return float(np.interp(step, clock[0], clock[1]))


def _interval(steps: np.ndarray) -> int:
    return max(int(np.median(np.diff(steps))), 1) if len(steps) > 1 else 1


def _sustained(steps: np.ndarray, first: int, last: int, clock: Series | None, since: float | None,
               rows_before: int) -> bool:
    """Whether a window has lasted the runbook's several check cadences: by the wall clock from
    its start (`since`, a continued window's), else by logged rows."""
    end = _clock_at(clock, int(steps[last]))
    begin = since if since is not None else _clock_at(clock, int(steps[first]))
    if end is not None and begin is not None and np.isfinite(end - begin):
        return end - begin >= TPUT_MIN_S
    return rows_before + last - first + 1 >= TPUT_MIN_ROWS
