"""Effective speed-up between two ladders: the compute multiplier k with L_cand(C) = L_base(k·C).

k > 1: the candidate reaches at C the loss the baseline needs k·C for (it saves 1 − 1/k of the
compute at equal loss); OLMo-core's effective-compute multiplier and Marin's "effective
speedup", taken at any compute rather than through one refit point.

The interval is the joint profile likelihood of both ladders (independent points, one noise
level: both are fits of the same kind of runs). Holding k fixed at C constrains the two fits by
one equation, L_cand(C) = L_base(k·C), which at fixed exponents (α_base, α_cand) is linear in the
four linear constants, so the least joint RSS under it is RSS_b(α_b) + RSS_c(α_c) +
(L̂_cand(C) − L̂_base(k·C))² / (v_cand(C) + v_base(k·C)) (profile.py's notation). The k kept are
those whose least joint RSS over (α_b, α_c) stays under T = RSS_min·(1 + F_P(1, df)/df), df the
two ladders' residual degrees of freedom together: for each pair of exponents the admissible
base losses at k·C form an interval, inverted through the base's curve at α_b, v_base taken at
k̂ and then, for the pairs at the interval's ends, at their own k. Vectorised over many ladder
pairs for the coverage tests.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from marinctl.analysis.scaling.profile import Profile, f_quantile, profile

GRID = 100      # α per ladder over its joint region, and NEAR about its minimum: (GRID + NEAR + 1)² pairs
NEAR = 20
TOP = 16        # pairs at each end of k's interval worked out again with v_base at their own k
CHUNK = 40      # ladder pairs per block (memory: CHUNK·(GRID + NEAR + 1)² per array)


def _inverse(p: Profile, loss: np.ndarray) -> np.ndarray:
    """The compute at which each grid α's base curve reaches `loss` ((L, G, …) broadcast against the
    grid); ∞ where that curve never comes down to it."""
    shape = (slice(None), slice(None)) + (None,) * (loss.ndim - 2)
    linf, a, al = p.fits["linf"][shape], p.fits["a"][shape], p.alpha[shape]
    ratio = (loss - linf) / a
    ok = ratio > 0
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        logc = p.l0[(slice(None),) + (None,) * (loss.ndim - 1)] - np.log(np.where(ok, ratio, 1.0)) / al
        return np.where(ok, np.exp(np.minimum(logc, 700.0)), np.inf)


def _base_v(p: Profile, logc: np.ndarray) -> np.ndarray:
    """v_base at log compute `logc` ((L, Gb, Gc)), each base α its row."""
    u = np.exp(-p.alpha[:, :, None] * (logc - p.l0[:, None, None]))
    f = p.fits
    if p.pin is None:
        return 1.0 / p.n + (u - f["ubar"][:, :, None]) ** 2 / f["sdd"][:, :, None]
    return u * u / f["suu"][:, :, None]


def speedups(base_c: Any, base_y: Any, cand_c: Any, cand_y: Any, pin: float | None, computes: Any,
             level: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(k, lo, hi), each (L, K): k at each compute for L ladder pairs (1-d losses: one pair)."""
    by, cy = np.atleast_2d(np.asarray(base_y, float)), np.atleast_2d(np.asarray(cand_y, float))
    computes = np.atleast_1d(np.asarray(computes, float))
    out = [np.empty((len(by), len(computes))) for _ in range(3)]
    for s in range(0, len(by), CHUNK):
        block = slice(s, s + CHUNK)
        bc = np.broadcast_to(np.asarray(base_c, float), by.shape)[block]
        cc = np.broadcast_to(np.asarray(cand_c, float), cy.shape)[block]
        for arr, got in zip(out, _block(bc, by[block], cc, cy[block], pin, computes, level)):
            arr[block] = got
    return out[0], out[1], out[2]


def _block(bc, by, cc, cy, pin, computes, level):
    b0, c0 = profile(bc, by, pin), profile(cc, cy, pin)
    df = b0.df + c0.df
    rb, rc = b0.best["rss"], c0.best["rss"]
    top = (rb + rc) * (1.0 + f_quantile(level, df) / df)
    # each ladder gridded over the exponents the other leaves room for
    b = profile(bc, by, pin, ceiling=top - rc, fine=GRID, near=NEAR)
    c = profile(cc, cy, pin, ceiling=top - rb, fine=GRID, near=NEAR)
    room = top[:, None, None] - b.rss[:, :, None] - c.rss[:, None, :]          # (L, Gb, Gc)
    admissible = room >= 0
    room = np.maximum(room, 0.0)
    cand_best = c0.predict(computes)                                             # (L, K)
    base_best = Profile(b0.pin, b0.n, b0.l0, b0.best["alpha"][:, None],
                        {k: b0.best[k][:, None] for k in ("linf", "a")}, b0.best)
    k_hat = _inverse(base_best, cand_best[:, None, :])[:, 0, :] / computes[None, :]
    mu_c, v_c = c.at(computes)                                                   # (L, Gc, K)
    lo, hi = np.empty_like(k_hat), np.empty_like(k_hat)
    for j, comp in enumerate(computes):
        for sign, out in ((1.0, hi), (-1.0, lo)):          # +: the candidate's loss lower, k higher
            # every pair with v_base where k̂ puts it; then the pairs at the end, again with v_base at their own k
            logc = np.broadcast_to(np.log(k_hat[:, j] * comp)[:, None, None], room.shape)
            k = _inverse(b, mu_c[:, None, :, j] - sign * np.sqrt(room * (v_c[:, None, :, j] + _base_v(b, logc)))) / comp
            k = np.where(admissible, k, np.nan).reshape(len(k), -1)
            k = np.where(np.isnan(k), -np.inf if sign > 0 else np.inf, k)
            ends = np.argpartition(-sign * k, TOP - 1, axis=1)[:, :TOP]
            out[:, j] = _again(b, c, room, mu_c[..., j], v_c[..., j], ends, np.take_along_axis(k, ends, 1), comp, sign)
    return k_hat, np.minimum(lo, k_hat), np.maximum(hi, k_hat)


def _again(b: Profile, c: Profile, room, mu_c, v_c, ends, k, comp: float, sign: float) -> np.ndarray:
    """(L,) the end of k's interval over the pairs `ends` (flat indices into (Gb, Gc)), v_base taken at
    each pair's own k."""
    rows = np.arange(len(ends))[:, None]
    ib, ic = np.divmod(ends, room.shape[2])
    f = b.fits
    u = np.exp(-b.alpha[rows, ib] * (np.log(np.clip(k * comp, 1e-300, 1e300)) - b.l0[:, None]))
    if b.pin is None:
        v_b = 1.0 / b.n + (u - f["ubar"][rows, ib]) ** 2 / f["sdd"][rows, ib]
    else:
        v_b = u * u / f["suu"][rows, ib]
    target = mu_c[rows, ic] - sign * np.sqrt(room[rows, ib, ic] * (v_c[rows, ic] + v_b))
    ratio = (target - f["linf"][rows, ib]) / f["a"][rows, ib]
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        logc = b.l0[:, None] - np.log(np.where(ratio > 0, ratio, 1.0)) / b.alpha[rows, ib]
        again = np.where(ratio > 0, np.exp(np.minimum(logc, 700.0)), np.inf) / comp
    again = np.where(np.isfinite(k) | np.isinf(again), again, np.nan)      # pairs that were never admissible
    return np.nanmax(again, 1) if sign > 0 else np.nanmin(again, 1)


def effective_speedup(base_c: Any, base_y: Any, cand_c: Any, cand_y: Any, pin: float | None,
                      computes: Any, level: float) -> list[dict[str, Any]]:
    """One pair of ladders: `[{"compute","value","lo","hi"}]` at each compute."""
    k, lo, hi = speedups(base_c, base_y, cand_c, cand_y, pin, computes, level)
    return [{"compute": float(c), "value": float(k[0, i]), "lo": float(lo[0, i]), "hi": float(hi[0, i])}
            for i, c in enumerate(np.atleast_1d(np.asarray(computes, float)))]
