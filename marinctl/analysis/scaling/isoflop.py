"""Marin's isoFLOP analysis of a synced sweep: per compute budget the loss-optimal tokens, then how
the optimal tokens, parameters and loss scale with compute.

The method is Marin's (Chinchilla's "approach 2"):
- runs are grouped by compute budget: the budget the run's config logs, else the one in its name
  (`isoflop-moe-v16-1e+18-d768`, `isoflop-1e+18-N1e+08-B128-…`: experiments/grug/moe_scaling/
  summary/summary.py parses it from the name; lib/marin/src/marin/scaling_laws/isoflop_analysis.py
  `parse_isoflop_run_name`), else Levanter's `throughput/total_gflops` rounded to one significant
  figure (`round_flops_to_bucket` there);
- each run contributes its tokens (its last `throughput/total_tokens`), its parameters (summary
  `parameter_count`, as `transform_metrics_for_isoflop` reads them) and its final loss (the last
  logged value of the metric: the last eval);
- per budget (three runs at least, as Marin's summary script requires) a parabola of loss against log10(tokens)
  (`np.polyfit(logT, y, 2)` in that script); its vertex −b/2a is the budget's optimal tokens T*
  (`fit_scaling_laws`), its value there the optimal loss. A vertex outside the runs' token range is
  an extrapolation: the budget's runs do not bracket its optimum, and it is named and kept out of the
  fits below (the summary script clips it to the range instead, which hides the same problem);
- N* at T*: log10(params) is linear in log10(tokens) within a budget (N ∝ C/T), so it is read off
  the least-squares line through the budget's runs (Marin's `isoflop_analysis` module takes the nearest run's);
- T*(C) = coef·C^exponent and N*(C) likewise, by a line in log10–log10 (`fit_scaling_laws`), with
  standard errors; L(C) = L∞ + A·C^−α through the optima (ladder.py's fit, `--pin L∞` as
  Marin pins 1.6: experiments/grug/moe/README.md, issue #4447).
Intervals at a level (default 90%): each budget's optimum by the profile of its parabola
(parabola.py: Fieller's interval for T*, N* read off the same line at its ends, L* by the
profile), each exponent by Student's t on the log–log line, L(C)'s constants and predictions by
ladder.py's profile.
Pure: run records and their series in, numbers out (`points_from_store` does the reading).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from marinctl.analysis.scaling.ladder import DEFAULT_LEVEL, Fit, fit_power_law, prediction
from marinctl.errors import UserError

DEFAULT_METRIC = "eval/paloma/macro_loss"
DEFAULT_PREDICT = (1e21, 1e23)          # where Marin's v16 README projects (experiments/grug/moe/README.md)
TOKENS_KEY = "throughput/total_tokens"  # Levanter's cumulative tokens (levanter callbacks/_metrics.py)
GFLOPS_KEY = "throughput/total_gflops"
PARAMS_KEY = "parameter_count"          # the summary key Marin's isoflop analysis reads
BUDGET_KEYS = ("flops_budget", "budget", "compute_budget", "isoflop.budget", "trainer.flops_budget")
MIN_RUNS = 3
_BUDGET_IN_NAME = re.compile(r"(?:^|-)isoflop-(?:[A-Za-z][\w.]*-)*?(\d+(?:\.\d+)?e[+-]?\d+)(?=-|$)", re.I)


@dataclass
class Point:
    """One run of the sweep as the analysis uses it."""

    run: str
    compute: float
    tokens: float
    params: float | None
    loss: float
    budget_from: str          # config | name | total_gflops


@dataclass
class Budget:
    """One compute budget: its runs, their parabola and its minimum."""

    compute: float
    points: list[Point]
    coeffs: tuple[float, float, float] | None = None     # loss = a·x² + b·x + c, x = log10(tokens)
    tokens: float | None = None
    params: float | None = None
    loss: float | None = None
    bracketed: bool = False
    note: str | None = None   # why the optimum is not used (too few runs, no minimum, not bracketed)
    lo: dict[str, float | None] = field(default_factory=dict)   # the optimum's interval: tokens, params, loss
    hi: dict[str, float | None] = field(default_factory=dict)

    @property
    def used(self) -> bool:
        return self.tokens is not None and self.bracketed

    def as_dict(self) -> dict[str, Any]:
        lo, hi = (min(p.tokens for p in self.points), max(p.tokens for p in self.points)) if self.points else (None, None)
        return {"compute": self.compute, "runs": len(self.points),
                "optimum": {"tokens": self.tokens, "params": self.params, "loss": self.loss,
                            "lo": self.lo or None, "hi": self.hi or None},
                "bracketed": self.bracketed, "used_in_fit": self.used, "note": self.note,
                "tokens_range": [lo, hi],
                "parabola": None if self.coeffs is None else dict(zip(("a", "b", "c"), self.coeffs)),
                "points": [{"run": p.run, "tokens": p.tokens, "params": p.params, "loss": p.loss,
                            "budget_from": p.budget_from} for p in self.points]}


@dataclass
class LogLine:
    """y = coef·C^exponent fitted as a line in log10–log10, with standard errors (None: too few budgets)."""

    coef: float
    exponent: float
    coef_err: float | None = None
    exponent_err: float | None = None
    lo: float | None = None          # the exponent's interval at `level` (None: too few budgets)
    hi: float | None = None
    level: float = DEFAULT_LEVEL

    def __call__(self, c: float) -> float:
        return self.coef * c ** self.exponent

    def as_dict(self) -> dict[str, Any]:
        return {"coef": self.coef, "exponent": self.exponent, "coef_err": self.coef_err,
                "exponent_err": self.exponent_err, "lo": self.lo, "hi": self.hi, "level": self.level}


@dataclass
class Analysis:
    budgets: list[Budget]
    tokens_opt: LogLine | None
    params_opt: LogLine | None
    fit: Fit | None
    skipped: list[dict[str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def predictions(self, computes: Sequence[float]) -> list[dict[str, Any]]:
        out = []
        for c in computes:
            row: dict[str, Any] = {"compute": c, "loss": None, "lo": None, "hi": None,
                                   "tokens": self.tokens_opt(c) if self.tokens_opt else None,
                                   "params": self.params_opt(c) if self.params_opt else None}
            if self.fit is not None:
                row.update(prediction(self.fit, c))
            out.append(row)
        return out


# --- a run's place in the sweep ---------------------------------------------------------------

def budget_of(run: dict[str, Any]) -> tuple[float, str] | None:
    """(compute budget, where it came from) of a stored run, or None."""
    from marinctl.run_query import MISSING, lookup

    config = run.get("config") or {}
    for key in BUDGET_KEYS:
        v = lookup(config, key)
        if v is not MISSING and (x := _positive(v)) is not None:
            return x, "config"
    for name in (run.get("run_id"), run.get("name")):
        m = _BUDGET_IN_NAME.search(name or "")
        if m and (x := _positive(m.group(1))) is not None:
            return x, "name"
    g = _positive((run.get("summary") or {}).get(GFLOPS_KEY))
    if g is not None:
        return round_to_bucket(g * 1e9), "total_gflops"
    return None


def round_to_bucket(flops: float) -> float:
    """FLOPs to one significant figure (1.05e19 → 1e19, 2.8e19 → 3e19): runs aimed at one budget
    land on it (Marin's `round_flops_to_bucket`)."""
    exponent = math.floor(math.log10(flops))
    mantissa = round(flops / 10 ** exponent)
    return float(10 ** (exponent + 1)) if mantissa == 10 else float(mantissa * 10 ** exponent)


def _positive(v: Any) -> float | None:
    if isinstance(v, bool):
        return None
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) and x > 0 else None


def point_of(run: dict[str, Any], tokens: float | None, loss: float | None) -> tuple[Point | None, str | None]:
    """A run as a sweep point, or the reason it cannot be one."""
    budget = budget_of(run)
    if budget is None:
        return None, "no compute budget (config, name or total_gflops)"
    if tokens is None:
        return None, f"no {TOKENS_KEY}"
    if loss is None:
        return None, "no final value of the metric"
    params = _positive((run.get("summary") or {}).get(PARAMS_KEY))
    return Point(run["run_id"], budget[0], tokens, params, loss, budget[1]), None


# --- per budget ---------------------------------------------------------------------------------

def fit_budget(compute: float, points: list[Point], level: float = DEFAULT_LEVEL) -> Budget:
    """The budget's parabola in log10(tokens), its minimum and that's interval (see the module doc)."""
    b = Budget(compute, sorted(points, key=lambda p: p.tokens))
    x = np.log10([p.tokens for p in b.points])
    y = np.array([p.loss for p in b.points], dtype=float)
    if len(b.points) < MIN_RUNS or len(np.unique(x)) < MIN_RUNS:
        b.note = f"{len(b.points)} run(s) at distinct token counts: a parabola needs {MIN_RUNS}"
        return b
    a2, a1, a0 = (float(v) for v in np.polyfit(x, y, 2))
    b.coeffs = (a2, a1, a0)
    if not a2 > 0:
        b.note = "loss does not curve up on both sides: no minimum (widen the sweep)"
        return b
    xs = -a1 / (2 * a2)
    b.tokens, b.loss = float(10 ** xs), float(a2 * xs * xs + a1 * xs + a0)
    with_params = [(px, p.params) for px, p in zip(x, b.points) if p.params is not None]
    params_at = None
    if len(with_params) >= 2:
        px, pn = np.array([w[0] for w in with_params]), np.log10([w[1] for w in with_params])
        slope, icpt = np.polyfit(px, pn, 1)
        params_at = lambda at: 10 ** (icpt + slope * at)  # noqa: E731
        b.params = float(params_at(xs))
    _budget_interval(b, x, y, level, params_at)
    b.bracketed = bool(x.min() <= xs <= x.max())
    if not b.bracketed:
        side = "above" if xs > x.max() else "below"
        b.note = (f"runs do not bracket the optimum: it lies {side} their tokens "
                  f"({10 ** x.min():.3g}–{10 ** x.max():.3g}); extrapolated, left out of the fits")
    return b


def _budget_interval(b: Budget, x: np.ndarray, y: np.ndarray, level: float, params_at) -> None:
    """The optimum's interval at `level` (parabola.py); N* at the ends of T*'s (its line is monotone;
    an unbounded end stays unbounded, 0 or ∞)."""
    from marinctl.analysis.scaling.parabola import vertex_intervals

    if len(x) <= 3:
        return
    got = {k: float(v[0]) for k, v in vertex_intervals(x, y, level).items()}
    if math.isnan(got["x_lo"]):
        return
    b.lo = {"tokens": 10 ** got["x_lo"], "params": None, "loss": got["loss_lo"]}
    b.hi = {"tokens": 10 ** got["x_hi"], "params": None, "loss": got["loss_hi"]}
    if params_at is not None:
        with np.errstate(over="ignore", invalid="ignore"):
            ends = sorted(float(params_at(np.float64(e))) for e in (got["x_lo"], got["x_hi"]))
        b.lo["params"], b.hi["params"] = ends


def loglog(c: Sequence[float], y: Sequence[float], level: float = DEFAULT_LEVEL) -> LogLine | None:
    """coef·C^exponent through the points (log10–log10 least squares), with standard errors and
    the exponent's Student-t interval at `level` from three points on; None under two points."""
    if len(c) < 2:
        return None
    lc, ly = np.log10(np.asarray(c, float)), np.log10(np.asarray(y, float))
    if len(c) == 2:
        slope = (ly[1] - ly[0]) / (lc[1] - lc[0])
        return LogLine(float(10 ** (ly[0] - slope * lc[0])), float(slope), level=level)
    from scipy.special import stdtrit

    slope, icpt = (float(v) for v in np.polyfit(lc, ly, 1))
    df = len(lc) - 2
    sxx = float(((lc - lc.mean()) ** 2).sum())
    s2 = float(((ly - (icpt + slope * lc)) ** 2).sum()) / df
    slope_err, icpt_err = math.sqrt(s2 / sxx), math.sqrt(s2 * (1 / len(lc) + lc.mean() ** 2 / sxx))
    coef = float(10 ** icpt)
    t = float(stdtrit(df, 0.5 + level / 2))
    return LogLine(coef, slope, coef * math.log(10) * icpt_err, slope_err, slope - t * slope_err, slope + t * slope_err,
                   level)


# --- the whole sweep ----------------------------------------------------------------------------

def analyze(points: list[Point], *, pin: float | None = None, skipped: list[dict[str, str]] | None = None,
            level: float = DEFAULT_LEVEL) -> Analysis:
    """Budgets, their optima and the three scaling fits, with intervals at `level`."""
    by_budget: dict[float, list[Point]] = {}
    for p in points:
        by_budget.setdefault(p.compute, []).append(p)
    budgets = [fit_budget(c, ps, level) for c, ps in sorted(by_budget.items())]
    used = [b for b in budgets if b.used]
    out = Analysis(budgets, loglog([b.compute for b in used], [b.tokens for b in used], level),
                   loglog([b.compute for b in used if b.params], [b.params for b in used if b.params], level),
                   None, list(skipped or []))
    for b in budgets:
        if b.note:
            out.notes.append(f"budget {b.compute:.3g}: {b.note}")
    if len(used) >= 3:
        out.fit = fit_power_law([b.compute for b in used], [b.loss for b in used], pin, level)
    else:
        out.notes.append(f"{len(used)} budget(s) with a bracketed optimum: L(C) needs 3")
    return out


def points_from_store(con, entity: str, project: str, metric: str,
                      select: Callable[[dict[str, Any]], bool] | None = None) -> tuple[list[Point], list[dict[str, str]]]:
    """The project's stored runs as sweep points (and those that are not, with why)."""
    from marinctl.store import metrics as M
    from marinctl.store.runs import list_runs

    runs = [r for r in list_runs(con) if r["entity"] == entity and r["project"] == project]
    if not runs:
        raise UserError(f"no runs of {entity}/{project} are stored",
                        f"mirror the sweep first: `marinctl sync {entity}/{project}`")
    if select is not None:
        runs = [r for r in runs if select(r)]
    points, skipped = [], []
    for run in runs:
        seg = [(run["run_pk"], None, None)]
        tokens = _last(*M.series(con, seg, TOKENS_KEY)) or _positive((run.get("summary") or {}).get(TOKENS_KEY))
        loss = _last(*M.series(con, seg, metric))
        if loss is None:
            v = (run.get("summary") or {}).get(metric)
            loss = float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None
        p, why = point_of(run, tokens, loss)
        if p is None:
            skipped.append({"run": run["run_id"], "reason": why})
        else:
            points.append(p)
    return points, skipped


def _last(steps: np.ndarray, values: np.ndarray) -> float | None:
    ok = np.isfinite(values)
    return float(values[ok][-1]) if ok.any() else None
