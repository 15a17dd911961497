"""Row conditions and their episodes: a rule's window test (or "this value is NaN/Inf") row by row.

An alert fires once per episode: the rows in a row where the condition holds are one episode,
which begins at its first row; a row where it does not hold ends it, and the next row where it
holds begins another. A `Track` carries what one (run, rule) needs between passes — the last
values a window reads and whether an episode is open — so a pass reads only the rows it has
not seen. Primed at the follow's first pass, a Track knows an episode already under way and
never fires it: history logged before following began raises nothing.

An episode's start is a function of the stored rows alone, so two followers (or one restarted)
that see the same episode name it the same way, and the store keeps one alert of it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from marinctl.analysis.alerts.rules import Rule

# (values, first) -> (holds, figure) for rows first.. of values
Test = Callable[[np.ndarray, int], tuple[np.ndarray, np.ndarray]]


@dataclass
class Episode:
    """Rows in a row where a condition held: from `start`, seen up to `end`; `figure` is what
    was judged at its first row (the window's stat, the change, the z-score, the value)."""

    start: int
    end: int
    figure: float


@dataclass
class Track:
    """One condition on one run's series between passes."""

    keep: int                                   # values the test reads before a row (window - 1 or more)
    finite_only: bool = True                    # windows skip NaN/Inf (a rule); False: every row (the NaN test)
    last: int | None = None                     # the last step judged
    steps: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    values: np.ndarray = field(default_factory=lambda: np.empty(0))
    open: Episode | None = None
    open_fired: bool = False                    # False: the open episode began before following

    def prime(self, steps: np.ndarray, values: np.ndarray, test: Test) -> None:
        """Take the history up to the baseline: an episode open at its last row is known, never fired."""
        steps, values = self._usable(steps, values)
        if len(steps):
            holds, figure = test(values, len(values) - 1)
            if holds[-1]:
                self.open, self.open_fired = Episode(int(steps[-1]), int(steps[-1]), float(figure[-1])), False
            self.last = int(steps[-1])
        self._keep_tail(steps, values)

    def advance(self, steps: np.ndarray, values: np.ndarray, test: Test) -> list[Episode]:
        """Judge the new rows (steps after `last`); returns the episodes that began among them."""
        new = steps > (self.last if self.last is not None else -1)
        steps, values = self._usable(steps[new], values[new])
        if not len(steps):
            return []
        all_steps = np.concatenate([self.steps, steps])
        all_values = np.concatenate([self.values, values])
        first = len(self.values)
        holds, figure = test(all_values, first)
        begun: list[Episode] = []
        for s, h, f in zip(steps.tolist(), holds.tolist(), figure.tolist()):
            if not h:
                self.open = None
            elif self.open is None:
                self.open, self.open_fired = Episode(int(s), int(s), float(f)), True
                begun.append(self.open)
            else:
                self.open.end = int(s)
        self.last = int(steps[-1])
        self._keep_tail(all_steps, all_values)
        return begun

    def _usable(self, steps: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if not self.finite_only:
            return steps, values
        ok = np.isfinite(values)
        return steps[ok], values[ok]

    def _keep_tail(self, steps: np.ndarray, values: np.ndarray) -> None:
        """The last `keep` rows: what the next row's window reads before it."""
        cut = len(steps) - self.keep
        self.steps, self.values = steps[max(cut, 0):], values[max(cut, 0):]


# --- the tests -----------------------------------------------------------------------------------

def nonfinite_test(values: np.ndarray, first: int) -> tuple[np.ndarray, np.ndarray]:
    v = values[first:]
    return ~np.isfinite(v), v


def rule_test(rule: Rule) -> Test:
    """The row test of a rule (rules.py): threshold, change between windows, or z-score."""

    def test(values: np.ndarray, first: int) -> tuple[np.ndarray, np.ndarray]:
        n = len(values)
        rows = np.arange(first, n)
        holds = np.zeros(len(rows), bool)
        figure = np.full(len(rows), np.nan)
        for j, i in enumerate(rows.tolist()):
            fig = _figure(rule, values, i)
            if fig is None:
                continue
            figure[j] = fig
            holds[j] = _holds(rule, fig)
        return holds, figure

    return test


_STATS = {"min": np.min, "max": np.max, "mean": np.mean, "median": np.median, "sum": np.sum}


def _stat(rule: Rule, window: np.ndarray) -> float:
    return float(_STATS[rule.stat](window))


def _figure(rule: Rule, v: np.ndarray, i: int) -> float | None:
    """What the rule judges at row i (None: too few rows before it yet)."""
    w = rule.window
    if rule.kind == "threshold":
        return _stat(rule, v[i - w + 1:i + 1]) if i + 1 >= w else None
    if rule.kind == "change":
        b = rule.baseline or w
        if i + 1 < w + b:
            return None
        cur, prev = _stat(rule, v[i - w + 1:i + 1]), _stat(rule, v[i - w - b + 1:i - w + 1])
        if rule.absolute is not None:
            return cur - prev
        if prev == 0:
            return 0.0 if cur == 0 else float(np.sign(cur)) * np.inf
        return (cur - prev) / abs(prev)
    r = rule.recent
    if i + 1 < w + r:
        return None
    before = v[i - r - w + 1:i - r + 1]
    judged = float(v[i]) if r == 1 else _stat(rule, v[i - r + 1:i + 1])
    mu, sd = float(np.mean(before)), float(np.std(before, ddof=1))
    rise = judged - mu
    if abs(rise) < rule.min_rise:        # too close to the mean to count, whatever the spread
        return 0.0
    if sd == 0:
        return 0.0 if rise == 0 else float(np.sign(rise)) * np.inf
    return rise / sd


def _holds(rule: Rule, fig: float) -> bool:
    if rule.kind == "threshold":
        return (rule.above is not None and fig > rule.above) or (rule.below is not None and fig < rule.below)
    bar = rule.z if rule.kind == "zscore" else rule.absolute if rule.absolute is not None else rule.relative
    signed = fig if rule.direction == "up" else -fig if rule.direction == "down" else abs(fig)
    return signed > bar if bar == 0 else signed >= bar
