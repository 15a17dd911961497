"""The hero held to the ladder's band: each of its evals against the interval for one run's loss
at that point of its schedule, and the episodes it spends outside.

The band is ladder.py's per-fraction one (`predicted_band`): at each fraction of the schedule a
fit across the rungs that reached it, its interval at the hero's compute for a single run (the
law's own uncertainty and a run's scatter about it). An eval between two fractions is judged
against the band interpolated at its step; evals before the band's first fraction, or after its
last, are not judged. `score` and `episodes` are pure; `scored` and `episodes_for` read the
store for the `ladder` command and the follow's alert pass.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from marinctl.analysis.scaling.ladder import DEFAULT_LEVEL, DEFAULT_METRIC, predicted_band
from marinctl.store import Connection

CAUSE = "hero_band"
QUIET_EVALS = 2   # evals back inside that end an episode: one stray eval does not split it in two


@dataclass
class HeroEval:
    """One eval of the hero against the band at its step."""

    step: int
    compute: float          # spent by this step: the hero's budget × the fraction of its schedule
    loss: float
    lo: float
    hi: float
    predicted: float

    @property
    def inside(self) -> bool:
        return self.lo <= self.loss <= self.hi

    @property
    def side(self) -> str:
        return "inside" if self.inside else ("above" if self.loss > self.hi else "below")

    def as_dict(self) -> dict[str, Any]:
        return {"step": self.step, "compute": self.compute, "loss": self.loss, "lo": self.lo, "hi": self.hi,
                "inside": self.inside, "predicted": self.predicted}


@dataclass
class Episode:
    """Evals in a row outside the band: from `start` (the first outside) to `end` (the last)."""

    start: int
    end: int
    evals: list[HeroEval]
    gap: int = 0                        # steps within which a stored alert is this episode
    figures: dict[str, Any] = field(default_factory=dict)


def score(steps: Any, losses: Any, band: dict[str, Any]) -> list[HeroEval]:
    """Each finite eval within the band's steps, against the band interpolated there."""
    bs = np.asarray(band["steps"], dtype=float)
    steps, losses = np.asarray(steps), np.asarray(losses, dtype=float)
    keep = np.isfinite(losses) & (steps >= bs[0]) & (steps <= bs[-1])
    s, y = steps[keep].astype(float), losses[keep]
    cols = {k: np.interp(s, bs, np.asarray(band[k], dtype=float)) for k in ("compute", "lo", "hi", "mid")}
    return [HeroEval(int(st), float(c), float(v), float(lo), float(hi), float(m))
            for st, v, c, lo, hi, m in zip(s, y, cols["compute"], cols["lo"], cols["hi"], cols["mid"])]


def episodes(evals: list[HeroEval], since: int = -1, level: float = DEFAULT_LEVEL,
             metric: str = DEFAULT_METRIC) -> list[Episode]:
    """Runs of evals outside the band, each ended by QUIET_EVALS evals back inside; an episode that
    began at or before step `since` is history (left out). Each carries its first eval's figures."""
    out: list[Episode] = []
    current: list[HeroEval] = []
    quiet = 0
    for e in evals:
        if not e.inside:
            current.append(e)
            quiet = 0
        elif current:
            quiet += 1
            if quiet >= QUIET_EVALS:
                out.append(_episode(current, evals, level, metric))
                current, quiet = [], 0
    if current:
        out.append(_episode(current, evals, level, metric))
    return [ep for ep in out if ep.start > since]


def _episode(outside: list[HeroEval], evals: list[HeroEval], level: float, metric: str) -> Episode:
    first = outside[0]
    spacing = int(np.median(np.diff([e.step for e in evals]))) if len(evals) > 1 else 0
    edge = first.hi if first.side == "above" else first.lo
    figures = {"metric": metric, "step": first.step, "compute": first.compute, "loss": first.loss,
               "lo": first.lo, "hi": first.hi, "predicted": first.predicted, "level": level, "side": first.side,
               "beyond": first.loss - edge, "evals_outside": len(outside)}
    return Episode(first.step, outside[-1].step, outside, gap=QUIET_EVALS * spacing, figures=figures)


# --- from the store ---------------------------------------------------------------------------------

def scored(con: Connection, metric: str = DEFAULT_METRIC, level: float = DEFAULT_LEVEL,
           pin: float | None = 1.6, band: dict[str, Any] | None = None) -> list[HeroEval] | None:
    """The stored hero lineage's evals of `metric` against the band (None: no hero or no band)."""
    from marinctl.errors import UserError
    from marinctl.store import metrics
    from marinctl.store.lineage import resolve_target

    band = band if band is not None else predicted_band(con, metric, pin, level)
    if band is None:
        return None
    try:
        target = resolve_target(con, "hero")
    except UserError:
        return None
    return score(*metrics.series(con, target.segments, metric), band)


def episodes_for(con: Connection, run: dict[str, Any], since: int, metric: str = DEFAULT_METRIC,
                 level: float = DEFAULT_LEVEL) -> list[Episode]:
    """For an alert pass over `run`: the hero's episodes outside the band that began after `since`
    (nothing when `run` is not of the stored hero lineage)."""
    from marinctl.errors import UserError
    from marinctl.store.lineage import HERO_GROUP, resolve_target

    if run.get("run_group") != HERO_GROUP and not (run.get("source") == "wandb"
                                                   and str(run.get("run_id", "")).startswith("hero-")):
        return []
    try:
        target = resolve_target(con, "hero")
    except UserError:
        return []
    if run["uid"] not in {r["uid"] for r in target.runs}:
        return []
    evals = scored(con, metric, level)
    return episodes(evals, since, level, metric) if evals else []


def words(figures: dict[str, Any], run_label: str) -> tuple[str, str]:
    """An alert's (title, summary) from an episode's figures."""
    from marinctl import numbers as N

    f = figures
    pct = N.percent(f["level"], 0)
    title = (f"{f['metric']} {N.fixed(f['loss'])} at step {N.count(f['step'])}, {f['side']} the ladder's "
             f"{pct} band ({N.fixed(f['lo'])}–{N.fixed(f['hi'])}) on {run_label}")
    summary = (f"The hero's {f['metric']} is {N.fixed(f['loss'])} at step {N.count(f['step'])} "
               f"({N.sig(f['compute'], 3)} FLOPs spent), {f['side']} the {pct} interval the ladder gives one run "
               f"there: {N.fixed(f['lo'])}–{N.fixed(f['hi'])}, predicted {N.fixed(f['predicted'])}.")
    return title, summary
