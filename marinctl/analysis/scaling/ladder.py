"""Scaling-ladder fits: L(C) = L_inf + A*C^-alpha over rungs, predictions with bands, hero deviation.

Headless: the `ladder` command and the watch TUI both read from here (the chart is
render/ladder.py's). Fitting uses scipy; each rung's and the hero's length come from their
schedules (analysis/schedule.py).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from marinctl.analysis.schedule import published_schedule, schedule_of, schedule_of_target
from marinctl.errors import UserError
from marinctl.store import Connection

HERO_COMPUTE = 2.7e24
DEFAULT_METRIC = "eval/paloma/macro_loss"
FRACTIONS = np.round(np.arange(0.05, 1.0001, 0.05), 2)


@dataclass
class Fit:
    """Fitted constants with standard errors (covariance) and a leave-one-out spread."""

    L_inf: float
    A: float
    alpha: float
    pinned: bool
    L_inf_err: float = 0.0
    A_err: float = 0.0
    alpha_err: float = 0.0
    loo: list[tuple[float, float, float]] = field(default_factory=list)

    def predict(self, c: Any) -> np.ndarray:
        return self.L_inf + self.A * np.asarray(c, dtype=float) ** (-self.alpha)

    def band(self, c: Any) -> tuple[np.ndarray, np.ndarray]:
        """Lo/hi over the leave-one-rung-out refits (and the central fit)."""
        c = np.asarray(c, dtype=float)
        preds = [self.predict(c)] + [li + a * c ** (-al) for li, a, al in self.loo]
        stack = np.vstack([np.atleast_1d(p) for p in preds])
        return stack.min(axis=0), stack.max(axis=0)

    def as_dict(self) -> dict[str, Any]:
        return {"L_inf": self.L_inf, "A": self.A, "alpha": self.alpha, "pinned": self.pinned,
                "L_inf_err": self.L_inf_err, "A_err": self.A_err, "alpha_err": self.alpha_err,
                "loo_refits": len(self.loo)}


def _fit_once(c: np.ndarray, y: np.ndarray, pin: float | None):
    """One fit; an undefined covariance (as many points as constants) gives NaN errors, not a warning."""
    import warnings

    from scipy.optimize import OptimizeWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", OptimizeWarning)
        return _fit_quiet(c, y, pin)


def _fit_quiet(c: np.ndarray, y: np.ndarray, pin: float | None):
    from scipy.optimize import curve_fit

    logc = np.log(c)
    if pin is not None:
        if np.any(y <= pin):
            raise UserError(f"a loss is at or below the pinned L_inf {pin}", "pin a lower value with --pin")
        # start from the log-linear fit of log(y - pin) on log C
        slope, icpt = np.polyfit(logc, np.log(y - pin), 1)
        f = lambda lc, logA, alpha: pin + np.exp(logA - alpha * lc)  # noqa: E731
        p, cov = curve_fit(f, logc, y, p0=[icpt, -slope], maxfev=20000)
        A = float(np.exp(p[0]))
        perr = np.sqrt(np.abs(np.diag(cov))) if np.all(np.isfinite(cov)) else np.array([np.nan, np.nan])
        return (pin, A, float(p[1])), (0.0, A * float(perr[0]), float(perr[1]))
    f = lambda lc, linf, logA, alpha: linf + np.exp(logA - alpha * lc)  # noqa: E731
    linf0 = float(y.min()) * 0.8
    slope, icpt = np.polyfit(logc, np.log(y - linf0), 1)
    p, cov = curve_fit(f, logc, y, p0=[linf0, icpt, max(-slope, 1e-3)], maxfev=20000,
                       bounds=([0.0, -50, 0.0], [float(y.min()), 50, 5.0]))
    A = float(np.exp(p[1]))
    perr = np.sqrt(np.abs(np.diag(cov))) if np.all(np.isfinite(cov)) else np.full(3, np.nan)
    return (float(p[0]), A, float(p[2])), (float(perr[0]), A * float(perr[1]), float(perr[2]))


def fit_power_law(compute: Any, loss: Any, pin: float | None = None) -> Fit:
    """Least-squares fit with parameter covariance and leave-one-rung-out refits for a band."""
    c = np.asarray(compute, dtype=float)
    y = np.asarray(loss, dtype=float)
    if len(c) < 3:
        raise UserError(f"need at least three points to fit, got {len(c)}", "give more rungs or points with --points")
    if np.any(~np.isfinite(c)) or np.any(c <= 0):
        raise UserError("compute must be positive and finite", "fix the compute column of the CSV")
    if np.any(~np.isfinite(y)):
        raise UserError("loss must be finite", "fix the loss column of the CSV")
    (linf, A, alpha), (e0, e1, e2) = _fit_once(c, y, pin)
    loo = []
    if len(c) >= 4 or (pin is not None and len(c) >= 3):
        for i in range(len(c)):
            keep = np.arange(len(c)) != i
            try:
                loo.append(_fit_once(c[keep], y[keep], pin)[0])
            except Exception:  # noqa: BLE001 — a refit that does not converge just adds no spread
                continue
    return Fit(linf, A, alpha, pin is not None, e0, e1, e2, loo)


def read_points(path: str | Path) -> list[dict[str, Any]]:
    """Rows of a `compute,loss[,name]` CSV ('#' lines are comments)."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as e:
        raise UserError(f"cannot read points file {str(path)!r}: {e.strerror or e}", "pass a CSV with --points compute,loss[,name]") from None
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    reader = csv.DictReader(lines)
    if not reader.fieldnames or "compute" not in reader.fieldnames or "loss" not in reader.fieldnames:
        raise UserError(f"{p.name}: needs a header with columns compute,loss[,name]", "add the header line `compute,loss,name`")
    out = []
    for i, row in enumerate(reader, start=2):
        try:
            c, y = float(row["compute"]), float(row["loss"])
        except (TypeError, ValueError):
            raise UserError(f"{p.name} line {i}: compute and loss must be numbers", "fix the CSV") from None
        if not np.isfinite(c) or c <= 0:
            raise UserError(f"{p.name} line {i}: compute must be positive, got {row['compute']}", "fix the compute column")
        out.append({"name": (row.get("name") or f"point{i - 1}").strip(), "compute": c, "loss": y})
    if len(out) < 3:
        raise UserError(f"{p.name}: need at least three points to fit, got {len(out)}", "add more rows to the CSV")
    return out


def published_points() -> list[dict[str, Any]]:
    """Marin's v16 isoFLOP optima (the ladder's own final losses are not published)."""
    return read_points(Path(str(resources.files("marinctl.data").joinpath("v16_isoflop.csv"))))


# --- online: rungs from the store --------------------------------------------------------------

def rung_series(con: Connection, metric: str) -> list[dict[str, Any]]:
    """Each synced rung with its compute (from the rung table), its length (its schedule) and metric series.

    A rung run whose length is unknown cannot be placed on the fraction axis and is left out.
    """
    from marinctl import rungs as rung_table
    from marinctl.store import metrics as m
    from marinctl.store.runs import find_rung_runs

    out = []
    for r in rung_table.rungs():
        if r["rung"] == "hero":
            continue
        runs = find_rung_runs(con, r["rung"])
        if not runs:
            continue
        run = runs[-1]
        total = schedule_of(run).total_steps
        if not total:
            continue
        steps, vals = m.series(con, [(run["run_pk"], None, None)], metric)
        out.append({"rung": r["rung"], "name": r["name"], "run": run["run_id"], "compute": float(r["flops"]),
                    "num_train_steps": int(total), "steps": steps, "values": vals})
    return out


def _value_at_fraction(steps: np.ndarray, vals: np.ndarray, total: int, f: float) -> float | None:
    if len(steps) == 0:
        return None
    target = f * total
    if steps[-1] < target * 0.98:
        return None
    i = int(np.argmin(np.abs(steps - target)))
    return float(vals[i]) if abs(steps[i] - target) <= 0.03 * total else None


def fraction_fits(rs: list[dict[str, Any]], pin: float | None) -> list[tuple[float, Fit]]:
    """One fit per fraction of schedule across rungs that reached it."""
    fits = []
    for f in FRACTIONS:
        pts = [(r["compute"], v) for r in rs if (v := _value_at_fraction(r["steps"], r["values"], r["num_train_steps"], f)) is not None]
        if len(pts) < 3:
            continue
        try:
            fits.append((float(f), fit_power_law([p[0] for p in pts], [p[1] for p in pts], pin)))
        except Exception:  # noqa: BLE001
            continue
    return fits


def hero_trajectory(rs, pin: float | None, hero_compute: float = HERO_COMPUTE):
    """Predicted hero loss at each fraction: (fractions, lo, mid, hi)."""
    fits = fraction_fits(rs, pin)
    if not fits:
        return None
    fr = np.array([f for f, _ in fits])
    mid = np.array([float(fit.predict(hero_compute)) for _, fit in fits])
    bands = [fit.band(hero_compute) for _, fit in fits]
    lo = np.array([float(b[0][0]) for b in bands])
    hi = np.array([float(b[1][0]) for b in bands])
    return fr, lo, mid, hi


def hero_steps(con: Connection) -> int:
    """The hero's length: the stored hero's schedule, else the published one."""
    from marinctl.errors import UserError
    from marinctl.store.lineage import resolve_target

    try:
        total = schedule_of_target(resolve_target(con, "hero")).total_steps
    except UserError:
        total = None
    return int(total or published_schedule("hero").total_steps)


def predicted_band(con: Connection, metric: str, pin: float | None = 1.6) -> dict | None:
    """For watch: {'steps','lo','mid','hi'} over the hero's steps, or None when no rungs are synced."""
    rs = [r for r in rung_series(con, metric) if len(r["steps"])]
    if len(rs) < 3:
        return None
    traj = hero_trajectory(rs, pin)
    if traj is None:
        return None
    fr, lo, mid, hi = traj
    steps = np.round(fr * hero_steps(con)).astype(np.int64)
    return {"steps": steps, "lo": lo, "mid": mid, "hi": hi}


def hero_deviation(con: Connection, metric: str, band: dict | None) -> dict | None:
    """The live hero's latest value vs the predicted trajectory at its step (relative, +ve = worse)."""
    if band is None:
        return None
    from marinctl.store import metrics as m
    from marinctl.store.lineage import resolve_target

    try:
        target = resolve_target(con, "hero")
    except Exception:  # noqa: BLE001 — no hero stored
        return None
    steps, vals = m.series(con, target.segments, metric)
    if len(steps) == 0:
        return None
    step, val = int(steps[-1]), float(vals[-1])
    bs = np.asarray(band["steps"], dtype=float)
    if step < bs[0]:
        return None
    pred = float(np.interp(step, bs, band["mid"]))
    return {"step": step, "value": val, "predicted": pred, "deviation": (val - pred) / pred,
            "lo": float(np.interp(step, bs, band["lo"])), "hi": float(np.interp(step, bs, band["hi"]))}


def preregistered_loss(con: Connection) -> float | None:
    """A 'Pre-registered loss' stated in a synced GitHub event body, if any."""
    import re

    from marinctl.store import events

    for body in events.bodies_containing(con, "pre-registered loss"):
        mt = re.search(r"pre-registered loss[^0-9]{0,40}([0-9]+\.[0-9]+)", body or "", re.I)
        if mt:
            return float(mt.group(1))
    return None
