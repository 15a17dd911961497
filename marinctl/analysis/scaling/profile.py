"""L(C) = L∞ + A·C^−α by its profile over α: fits and calibrated intervals, for one ladder or many.

At a fixed α the model is linear in (L∞, A), so its least-squares fit, residual sum of squares
RSS(α) and the variance factor of any linear figure (a prediction, L∞, A) are closed forms. A
dense grid of α per ladder (numpy, many ladders at once) then gives:
- the least-squares fit: the α of least RSS;
- the profile-likelihood interval at a level P of any figure f (Bates & Watts' profile t for
  nonlinear least squares): the f for which the least RSS with f held fixed stays under
  T = RSS_min·(1 + F_P(1, n−p)/(n−p)), p the fitted constants (2 with L∞ pinned, 3 free).
  With α held fixed that least RSS is RSS(α) + (f − f̂(α))²/v(α), so the interval is the union
  over α of f̂(α) ± √(v(α)·(T − RSS(α))). The F reference makes it exact for a linear model
  and carries the small-sample penalty of estimating the noise from n − p residuals; the
  profile over α carries the curvature of extrapolating a power law. Its coverage on
  SYNTHETIC ladders is in the README and tests/test_ladder_intervals.py.
- with `predictive=True`, the interval for one new run's measured loss (its own scatter added:
  v + 1), what a single run such as the hero is held to.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

ALPHA_RANGE = (1e-3, 4.0)   # the exponents a loss-vs-compute law can take; a region at an end is unbounded there
COARSE = 300                # log-spaced α over ALPHA_RANGE: where each ladder's region lies
FINE = 400                  # α over the region, per ladder
NEAR = 150                  # α between the coarse minimum's neighbours, per ladder
WIDE = 0.999                # the region gridded finely: the profile's 99.9% set of α


def f_quantile(level: float, df: int) -> float:
    """F's `level` quantile with (1, df) degrees of freedom (scipy.special: no scipy.stats import)."""
    from scipy.special import fdtri

    return float(fdtri(1, df, level))


def _lines(u: np.ndarray, y: np.ndarray, pin: float | None) -> dict[str, np.ndarray]:
    """Least squares of y on u (…, G, n) at each α: with L∞ free, y = L∞ + a·u (centred, so that
    a small α does not cancel digits); pinned, y − pin = a·u. y is (…, n)."""
    yb = y[..., None, :]
    if pin is None:
        ubar, ybar = u.mean(-1), y.mean(-1)[..., None]
        du, dy = u - ubar[..., None], yb - ybar[..., None]
        sdd = np.maximum((du * du).sum(-1), 1e-300)
        a = (du * dy).sum(-1) / sdd
        rss = (dy * dy).sum(-1) - a * (du * dy).sum(-1)
        return {"a": a, "linf": ybar - a * ubar, "rss": rss, "ubar": ubar, "sdd": sdd}
    yp = yb - pin
    suu = (u * u).sum(-1)
    a = (u * yp).sum(-1) / suu
    rss = (yp * yp).sum(-1) - a * (u * yp).sum(-1)
    return {"a": a, "linf": np.full_like(a, pin), "rss": rss, "suu": suu}


@dataclass
class Profile:
    """The profile of L ladders over their α grids (L × G arrays); `best` is each ladder's fit."""

    pin: float | None
    n: int
    l0: np.ndarray          # (L,) mean log compute: u = exp(−α·(ln C − l0)), A = a·exp(α·l0)
    alpha: np.ndarray       # (L, G)
    fits: dict[str, np.ndarray]
    best: dict[str, np.ndarray]   # (L,) alpha, linf, a, rss at the least-squares α

    @property
    def df(self) -> int:
        return self.n - (2 if self.pin is not None else 3)

    @property
    def calibrated(self) -> bool:
        """Whether residuals are left to measure the noise with (else every interval is unbounded)."""
        return self.df >= 1

    @property
    def rss(self) -> np.ndarray:
        return np.maximum(self.fits["rss"], 0.0)

    def threshold(self, level: float) -> np.ndarray:
        """(L,) the RSS a figure's fixed value may reach and stay inside the interval at `level`."""
        rmin = np.maximum(self.best["rss"], 1e-300)
        if not self.calibrated:
            return np.full_like(rmin, np.inf)
        return rmin * (1.0 + f_quantile(level, self.df) / self.df)

    def _u(self, computes: Any) -> np.ndarray:
        """(L, G, K) u at each compute."""
        x = np.log(np.asarray(computes, dtype=float))[None, None, :] - self.l0[:, None, None]
        return np.exp(-self.alpha[..., None] * x)

    def predict(self, computes: Any) -> np.ndarray:
        """(L, K) the least-squares fit's loss at each compute."""
        x = np.log(np.asarray(computes, dtype=float))[None, :] - self.l0[:, None]
        return self.best["linf"][:, None] + self.best["a"][:, None] * np.exp(-self.best["alpha"][:, None] * x)

    def at(self, computes: Any) -> tuple[np.ndarray, np.ndarray]:
        """(L, G, K) each grid α's fitted loss at each compute and its variance factor v."""
        u = self._u(computes)
        f = self.fits
        mu = f["linf"][..., None] + f["a"][..., None] * u
        if self.pin is None:
            v = 1.0 / self.n + (u - f["ubar"][..., None]) ** 2 / f["sdd"][..., None]
        else:
            v = u * u / f["suu"][..., None]
        return mu, v

    def interval(self, computes: Any, level: float, *, predictive: bool = False,
                 ceiling: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(lo, hi), each (L, K): the loss at each compute at `level` (see the module doc);
        `predictive`: one new run's measured loss. `ceiling` (L,) overrides the threshold."""
        mu, v = self.at(computes)
        return self._envelope(mu, v + (1.0 if predictive else 0.0), level, ceiling)

    def _envelope(self, f: np.ndarray, v: np.ndarray, level: float, ceiling: np.ndarray | None = None):
        """Union over α of f̂(α) ± √(v(α)·(T − RSS(α))) where RSS(α) ≤ T; f, v (L, G, K)."""
        t = self.threshold(level) if ceiling is None else ceiling
        room = (t[:, None] - self.rss)[..., None]
        inside = room >= 0
        half = np.sqrt(v * np.maximum(room, 0.0))
        lo = np.where(inside, f - half, np.inf).min(1)
        hi = np.where(inside, f + half, -np.inf).max(1)
        return lo, hi

    def constants(self, level: float) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """{'L_inf','A','alpha': (lo, hi)} each (L,) at `level`. An α region reaching the grid's
        end is unbounded there (0 or ∞), and so are L∞ and A with it."""
        t = self.threshold(level)
        inside = self.rss <= t[:, None]
        g = self.alpha.shape[1]
        first = np.argmax(inside, 1)
        last = g - 1 - np.argmax(inside[:, ::-1], 1)
        rows = np.arange(len(t))
        a_lo = np.where(self.alpha[rows, first] <= ALPHA_RANGE[0] * 1.0001, 0.0, self.alpha[rows, first])
        a_hi = np.where(self.alpha[rows, last] >= ALPHA_RANGE[1] * 0.9999, np.inf, self.alpha[rows, last])
        f = self.fits
        scale = np.exp(self.alpha * self.l0[:, None])[..., None]      # a → A
        if self.pin is None:
            va = 1.0 / f["sdd"]
            vl = 1.0 / self.n + f["ubar"] ** 2 / f["sdd"]
            l_lo, l_hi = self._envelope(f["linf"][..., None], vl[..., None], level)
        else:
            va = 1.0 / f["suu"]
            l_lo = l_hi = np.full((len(t), 1), self.pin)
        A_lo, A_hi = self._envelope(f["a"][..., None] * scale, va[..., None] * scale ** 2, level)
        unbounded = (a_lo == 0.0) | ~np.isfinite(a_hi)
        if self.pin is None:
            l_lo, l_hi = np.where(unbounded, -np.inf, l_lo[:, 0]), np.where(unbounded, np.inf, l_hi[:, 0])
        else:
            l_lo, l_hi = l_lo[:, 0], l_hi[:, 0]
        A_lo, A_hi = np.where(unbounded, 0.0, A_lo[:, 0]), np.where(unbounded, np.inf, A_hi[:, 0])
        return {"L_inf": (l_lo, l_hi), "A": (A_lo, A_hi), "alpha": (a_lo, a_hi)}


def profile(compute: Any, loss: Any, pin: float | None = None, *, ceiling: np.ndarray | None = None,
            fine: int = FINE, near: int = NEAR) -> Profile:
    """The profile of one ladder (1-d `loss`) or many ((L, n) `loss`; `compute` (n,) shared or
    (L, n) each its own). `ceiling` (L,): grid `fine` α over those whose RSS stays under it
    (default: the 99.9% region), and `near` about the least-squares one."""
    y = np.atleast_2d(np.asarray(loss, dtype=float))
    logc = np.log(np.broadcast_to(np.asarray(compute, dtype=float), y.shape))
    n = y.shape[1]
    df = n - (2 if pin is not None else 3)
    l0 = logc.mean(1)
    x = logc - l0[:, None]
    coarse = np.geomspace(*ALPHA_RANGE, COARSE)
    rss = _lines(np.exp(-coarse[None, :, None] * x[:, None, :]), y, pin)["rss"]
    rmin = np.maximum(rss.min(1), 1e-300)
    if ceiling is not None:
        top = np.maximum(ceiling, rmin)
    else:
        top = rmin * (1.0 + f_quantile(WIDE, df) / df) if df >= 1 else np.full_like(rmin, np.inf)
    inside = rss <= top[:, None]
    first = np.maximum(np.argmax(inside, 1) - 1, 0)
    last = np.minimum(COARSE - np.argmax(inside[:, ::-1], 1), COARSE - 1)
    # the least-squares α: between the coarse minimum's neighbours, finely (a region a few residuals
    # wide can be narrower than the wide grid's step), then the parabola through the finest minimum
    at = rss.argmin(1)
    near = _between(coarse[np.maximum(at - 1, 0)], coarse[np.minimum(at + 1, COARSE - 1)], near)
    best_alpha = _refined_minimum(near, _lines(np.exp(-near[..., None] * x[:, None, :]), y, pin)["rss"])
    at_best = _lines(np.exp(-best_alpha[:, None, None] * x[:, None, :]), y, pin)
    # the grid the intervals are read from: the wide region, the minimum's neighbourhood, the minimum
    alpha = np.sort(np.concatenate([_between(coarse[first], coarse[last], fine), near, best_alpha[:, None]], 1), 1)
    fits = _lines(np.exp(-alpha[..., None] * x[:, None, :]), y, pin)
    best = {"alpha": best_alpha, "linf": at_best["linf"][:, 0], "a": at_best["a"][:, 0],
            "rss": np.maximum(np.minimum(at_best["rss"][:, 0], fits["rss"].min(1)), 0.0)}
    return Profile(pin, n, l0, alpha, fits, best)


def _between(lo: np.ndarray, hi: np.ndarray, count: int) -> np.ndarray:
    """(L, count) α log-spaced from lo to hi, per ladder."""
    lo, hi = np.log(lo), np.log(hi)
    return np.exp(lo[:, None] + np.linspace(0.0, 1.0, count)[None, :] * (hi - lo)[:, None])


def _refined_minimum(alpha: np.ndarray, rss: np.ndarray) -> np.ndarray:
    """(L,) the α of least RSS: the grid's, moved to the vertex of the parabola through it and its
    neighbours (in log α, the grid's spacing)."""
    rows = np.arange(len(alpha))
    j = np.clip(rss.argmin(1), 1, alpha.shape[1] - 2)
    la = np.log(alpha)
    x1, x2 = la[rows, j], la[rows, j + 1]
    r0, r1, r2 = rss[rows, j - 1], rss[rows, j], rss[rows, j + 1]
    curv = r0 - 2 * r1 + r2
    step = np.where(curv > 0, 0.5 * (r0 - r2) / np.where(curv > 0, curv, 1.0), 0.0)
    step = np.clip(step, -1.0, 1.0)
    at_edge = (rss.argmin(1) == 0) | (rss.argmin(1) == alpha.shape[1] - 1)
    return np.where(at_edge, alpha[rows, rss.argmin(1)], np.exp(x1 + step * (x2 - x1)))
