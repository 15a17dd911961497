"""Scaling-ladder fits: L(C) = L_inf + A*C^-alpha over rungs, predictions with intervals, hero deviation.

Headless: the `ladder` command and the watch TUI both read from here (the chart is
render/ladder.py's). The fit and its intervals are the profile over α (profile.py); each
rung's and the hero's length come from their schedules (analysis/schedule.py).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from marinctl.analysis.scaling.profile import Profile, profile
from marinctl.analysis.schedule import published_schedule, schedule_of, schedule_of_target
from marinctl.errors import UserError
from marinctl.store import Connection

HERO_COMPUTE = 2.7e24
DEFAULT_METRIC = "eval/paloma/macro_loss"
DEFAULT_LEVEL = 0.9
FRACTIONS = np.round(np.arange(0.05, 1.0001, 0.05), 2)


@dataclass
class Fit:
    """Fitted constants, their standard errors (the linearised covariance) and intervals at `level`
    (the profile's), with the leave-one-point-out refits kept as a diagnostic."""

    L_inf: float
    A: float
    alpha: float
    pinned: bool
    L_inf_err: float = 0.0
    A_err: float = 0.0
    alpha_err: float = 0.0
    loo: list[tuple[float, float, float]] = field(default_factory=list)
    level: float = DEFAULT_LEVEL
    ci: dict[str, tuple[float, float]] = field(default_factory=dict)
    profile: Profile | None = field(default=None, repr=False)

    def predict(self, c: Any) -> np.ndarray:
        return self.L_inf + self.A * np.asarray(c, dtype=float) ** (-self.alpha)

    def band(self, c: Any, level: float | None = None, *, run: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """(lo, hi) at each compute: the interval at `level` (default the fit's) on the law's loss,
        or with `run` on one new run's measured loss (the law's interval and a run's own scatter)."""
        c = np.atleast_1d(np.asarray(c, dtype=float))
        lo, hi = self.profile.interval(c, self.level if level is None else level, predictive=run)
        return lo[0], hi[0]

    @property
    def calibrated(self) -> bool:
        """Whether the points leave residuals to measure the noise (else the intervals are unbounded)."""
        return self.profile is not None and self.profile.calibrated

    def as_dict(self) -> dict[str, Any]:
        out = {"L_inf": self.L_inf, "A": self.A, "alpha": self.alpha, "pinned": self.pinned,
               "L_inf_err": self.L_inf_err, "A_err": self.A_err, "alpha_err": self.alpha_err,
               "loo_refits": len(self.loo), "level": self.level}
        for name, (lo, hi) in self.ci.items():
            out[f"{name}_ci"] = {"lo": lo, "hi": hi}
        return out


def fit_power_law(compute: Any, loss: Any, pin: float | None = None, level: float = DEFAULT_LEVEL, *,
                  loo: bool = True) -> Fit:
    """Least squares by the profile over α, with intervals at `level` (and leave-one-out refits)."""
    c = np.asarray(compute, dtype=float)
    y = np.asarray(loss, dtype=float)
    if len(c) < 3:
        raise UserError(f"need at least three points to fit, got {len(c)}", "give more rungs or points with --points")
    if np.any(~np.isfinite(c)) or np.any(c <= 0):
        raise UserError("compute must be positive and finite", "fix the compute column of the CSV")
    if np.any(~np.isfinite(y)):
        raise UserError("loss must be finite", "fix the loss column of the CSV")
    if pin is not None and np.any(y <= pin):
        raise UserError(f"a loss is at or below the pinned L_inf {pin}", "pin a lower value with --pin")
    prof = profile(c, y, pin)
    b = prof.best
    alpha, linf = float(b["alpha"][0]), float(b["linf"][0])
    A = float(b["a"][0] * np.exp(alpha * prof.l0[0]))
    errs = _standard_errors(c, y, linf, A, alpha, pin)
    ci = {k: (float(lo[0]), float(hi[0])) for k, (lo, hi) in prof.constants(level).items()}
    return Fit(linf, A, alpha, pin is not None, *errs, loo=_leave_one_out(c, y, pin) if loo else [], level=level, ci=ci,
               profile=prof)


def prediction(fit: Fit, c: float) -> dict[str, Any]:
    """One prediction as the contract gives it: the law's loss at `c` and its interval at the fit's
    level (`lo`, `hi`), and the interval for one run's measured loss there (`run_lo`, `run_hi`)."""
    lo, hi = fit.band(c)
    run_lo, run_hi = fit.band(c, run=True)
    return {"compute": c, "loss": float(fit.predict(c)), "lo": float(lo[0]), "hi": float(hi[0]),
            "run_lo": float(run_lo[0]), "run_hi": float(run_hi[0])}


def _standard_errors(c, y, linf, A, alpha, pin) -> tuple[float, float, float]:
    """Standard errors from the linearised covariance s²·(JᵀJ)⁻¹ (NaN with no residuals left)."""
    u = c ** (-alpha)
    cols = [u, -A * np.log(c) * u] if pin is not None else [np.ones_like(c), u, -A * np.log(c) * u]
    J = np.stack(cols, axis=1)
    df = len(c) - J.shape[1]
    resid = y - (linf + A * u)
    if df < 1:
        return (0.0 if pin is not None else float("nan")), float("nan"), float("nan")
    try:
        cov = np.linalg.inv(J.T @ J) * float(resid @ resid) / df
    except np.linalg.LinAlgError:
        return float("nan"), float("nan"), float("nan")
    se = np.sqrt(np.abs(np.diag(cov)))
    return (0.0, float(se[0]), float(se[1])) if pin is not None else (float(se[0]), float(se[1]), float(se[2]))


def _leave_one_out(c: np.ndarray, y: np.ndarray, pin: float | None) -> list[tuple[float, float, float]]:
    """Each point left out in turn, refitted (all at once), where the rest still over-determine the law."""
    n = len(c)
    if n - 1 < (2 if pin is not None else 3):
        return []
    keep = ~np.eye(n, dtype=bool)
    cs, ys = np.stack([c[k] for k in keep]), np.stack([y[k] for k in keep])
    prof = profile(cs, ys, pin)
    b = prof.best
    return [(float(li), float(a * np.exp(al * l0)), float(al))
            for li, a, al, l0 in zip(b["linf"], b["a"], b["alpha"], prof.l0)]


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


def fraction_points(rs: list[dict[str, Any]]) -> list[tuple[float, list[float], list[float]]]:
    """Per fraction of schedule, the computes and values of the rungs that reached it (three at least)."""
    out = []
    for f in FRACTIONS:
        pts = [(r["compute"], v) for r in rs if (v := _value_at_fraction(r["steps"], r["values"], r["num_train_steps"], f)) is not None]
        if len(pts) >= 3:
            out.append((float(f), [p[0] for p in pts], [p[1] for p in pts]))
    return out


def hero_trajectory(rs, pin: float | None, hero_compute: float = HERO_COMPUTE, level: float = DEFAULT_LEVEL):
    """Predicted hero loss at each fraction: (fractions, lo, mid, hi), a fit across the rungs per
    fraction, lo–hi the interval at `level` for one run's loss there (the hero is one run, with its
    own scatter, not the law itself). Fractions the same rungs reached are fitted together."""
    groups: dict[tuple[float, ...], list[tuple[float, list[float]]]] = {}
    for f, c, y in fraction_points(rs):
        if pin is not None and min(y) <= pin:
            continue                                # a fraction the pin cannot fit has no band
        groups.setdefault(tuple(c), []).append((f, y))
    rows = []
    for c, members in groups.items():
        prof = profile(list(c), [y for _, y in members], pin)
        mid = prof.predict([hero_compute])[:, 0]
        lo, hi = prof.interval([hero_compute], level, predictive=True)
        rows += [(f, lo[i, 0], mid[i], hi[i, 0]) for i, (f, _) in enumerate(members)]
    if not rows:
        return None
    rows.sort()
    fr, lo, mid, hi = (np.array(col, dtype=float) for col in zip(*rows))
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


def predicted_band(con: Connection, metric: str, pin: float | None = 1.6,
                   level: float = DEFAULT_LEVEL) -> dict | None:
    """{'steps','compute','lo','mid','hi'} over the hero's steps (compute: spent by that step), or
    None when fewer than three rungs are synced."""
    rs = [r for r in rung_series(con, metric) if len(r["steps"])]
    if len(rs) < 3:
        return None
    traj = hero_trajectory(rs, pin, level=level)
    if traj is None:
        return None
    fr, lo, mid, hi = traj
    steps = np.round(fr * hero_steps(con)).astype(np.int64)
    return {"steps": steps, "compute": fr * HERO_COMPUTE, "lo": lo, "mid": mid, "hi": hi}


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
