"""An isoFLOP budget's parabola, loss = a·(x − x*)² + L* in x = log10(tokens): its vertex x* and
minimum L* with profile-likelihood intervals, for one budget or many sweeps at once.

At a fixed vertex x* the parabola is linear in (a, L*), so RSS(x*) and L*'s variance factor are
closed forms along a grid of x*. The interval on x* at level P is {x*: RSS(x*) ≤ T}, T =
RSS_min·(1 + F_P(1, n−3)/(n−3)) — Fieller's interval for the ratio −b/2a, exact for Gaussian
noise about a true parabola — with the curvature a kept positive (a vertex that is a maximum is
no optimum). L*'s is the union over that set of L̂*(x*) ± √(v(x*)·(T − RSS(x*))). A set that
reaches the grid's end (SPAN token ranges beyond the runs on either side) is unbounded there:
the budget's runs do not pin its optimum at that level. A parabola is Marin's model of the
budget, not the true curve; the bias this leaves is in the README beside the measured coverage.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from marinctl.analysis.scaling.profile import f_quantile

GRID = 401
SPAN = 1.0    # the grid reaches this many times the runs' log10-token range beyond them


def vertex_intervals(x: Any, y: Any, level: float) -> dict[str, np.ndarray]:
    """x = log10(tokens) (n,) or (L, n), y = loss (n,) or (L, n): each (L,) 'x','x_lo','x_hi',
    'loss','loss_lo','loss_hi' (NaN where the points curve down: no minimum; ±∞ unbounded)."""
    y = np.atleast_2d(np.asarray(y, dtype=float))
    x = np.broadcast_to(np.asarray(x, dtype=float), y.shape)
    n = y.shape[1]
    df = n - 3
    # the free parabola: its vertex and least RSS
    xm = x.mean(1, keepdims=True)
    xc = x - xm
    V = np.stack([xc * xc, xc, np.ones_like(xc)], axis=-1)                    # (L, n, 3)
    coef = np.linalg.solve(np.einsum("lni,lnj->lij", V, V), np.einsum("lni,ln->li", V, y)[..., None])[..., 0]
    a2, a1, a0 = coef[:, 0], coef[:, 1], coef[:, 2]
    rmin = np.maximum(((y - np.einsum("lni,li->ln", V, coef)) ** 2).sum(1), 1e-300)
    minimum = a2 > 0
    with np.errstate(divide="ignore", invalid="ignore"):
        xs = np.where(minimum, -a1 / (2 * a2), np.nan)
    loss = a0 - np.where(minimum, a1 * a1 / (4 * a2), np.nan)
    out = {"x": xs + xm[:, 0], "loss": loss}
    if df < 1:
        nan = np.full(len(y), np.nan)
        return {**out, "x_lo": nan, "x_hi": nan.copy(), "loss_lo": nan.copy(), "loss_hi": nan.copy()}
    top = rmin * (1.0 + f_quantile(level, df) / df)
    # the profile along a grid of vertices (centred like the data): a wide one that finds the set
    # and says whether it is bounded, then a fine one over it
    lo_x, hi_x = xc.min(1), xc.max(1)
    span = np.maximum(hi_x - lo_x, 1e-9)
    g1 = (lo_x - SPAN * span)[:, None] + np.linspace(0.0, 1.0, GRID)[None, :] * ((1 + 2 * SPAN) * span)[:, None]
    rss1, a1_, _, _, _ = _along(g1, xc, y)
    inside1 = (rss1 <= top[:, None]) & (a1_ > 0)
    first1, last1 = np.argmax(inside1, 1), GRID - 1 - np.argmax(inside1[:, ::-1], 1)
    some = inside1.any(1)
    xs_c = np.where(minimum, xs, 0.0)
    rows = np.arange(len(y))
    step = g1[:, 1] - g1[:, 0]
    lo_g = np.where(some, g1[rows, np.maximum(first1 - 1, 0)], xs_c - step)
    hi_g = np.where(some, g1[rows, np.minimum(last1 + 1, GRID - 1)], xs_c + step)
    g = lo_g[:, None] + np.linspace(0.0, 1.0, GRID)[None, :] * (hi_g - lo_g)[:, None]
    rss, a, d, zbar, szz = _along(g, xc, y)
    inside = (rss <= top[:, None]) & (a > 0) & minimum[:, None]
    any_in = inside.any(1)
    first = np.argmax(inside, 1)
    last = GRID - 1 - np.argmax(inside[:, ::-1], 1)
    x_lo = np.where(some & (first1 == 0), -np.inf, _crossing(g, rss, top, first, first - 1))
    x_hi = np.where(some & (last1 == GRID - 1), np.inf, _crossing(g, rss, top, last, last + 1))
    vd = 1.0 / n + zbar ** 2 / szz
    half = np.sqrt(vd * np.maximum(top[:, None] - rss, 0.0))
    l_lo = np.where(inside, d - half, np.inf).min(1)
    l_hi = np.where(inside, d + half, -np.inf).max(1)
    unbounded = ~np.isfinite(x_lo) | ~np.isfinite(x_hi)
    l_lo = np.where(unbounded, -np.inf, l_lo)      # a vertex beyond the grid: so is its loss
    out.update(x_lo=np.where(any_in, x_lo + xm[:, 0], np.nan), x_hi=np.where(any_in, x_hi + xm[:, 0], np.nan),
               loss_lo=np.where(any_in, l_lo, np.nan), loss_hi=np.where(any_in, l_hi, np.nan))
    return out


def _along(g: np.ndarray, xc: np.ndarray, y: np.ndarray):
    """At each vertex of g (L, G): the least-squares curvature, RSS and L* of y = a·(x − g)² + L*."""
    z = (xc[:, None, :] - g[:, :, None]) ** 2                                  # (L, G, n)
    zbar, ybar = z.mean(-1), y.mean(1)[:, None]
    dz, dy = z - zbar[..., None], y[:, None, :] - ybar[..., None]
    szz = np.maximum((dz * dz).sum(-1), 1e-300)
    a = (dz * dy).sum(-1) / szz
    rss = (dy * dy).sum(-1) - a * (dz * dy).sum(-1)
    return rss, a, ybar - a * zbar, zbar, szz


def _crossing(g: np.ndarray, rss: np.ndarray, top: np.ndarray, i: np.ndarray, j: np.ndarray) -> np.ndarray:
    """Where RSS crosses `top` between grid points i (inside) and j (outside), linearly."""
    rows = np.arange(len(g))
    j = np.clip(j, 0, g.shape[1] - 1)
    ri, rj = rss[rows, i], rss[rows, j]
    w = np.where(rj > ri, (top - ri) / np.where(rj > ri, rj - ri, 1.0), 0.0)
    return g[rows, i] + np.clip(w, 0.0, 1.0) * (g[rows, j] - g[rows, i])
