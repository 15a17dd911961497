"""Benchmark: how often each kind of interval holds the truth, on SYNTHETIC ladders, sweeps and pairs.

Why `ladder` uses the profile likelihood with an F reference (analysis/scaling/profile.py): the
same SYNTHETIC ladders (L∞ + A·C^−α, v16's published constants, 0.3% Gaussian noise like Marin's
v16 optima about their fit) get five 90% intervals on the loss at a far compute, and the share of
ladders whose interval holds the true loss is printed for each, with the median width:

- `loo`: the leave-one-point-out band (min–max of the refits and the fit) marinctl gave before;
- `wald-t`: the delta method on the linearised covariance, Student's t with n − p df;
- `boot`: a plain residual bootstrap (residuals resampled, refitted, 5th–95th percentile);
- `boot-t`: the same with residuals inflated by √(n/(n − p)) and the percentiles widened to t's;
- `profile-F`: the profile likelihood with an F(1, n − p) threshold (what `ladder` uses).

Then the isoFLOP optimum (parabola.py) on Chinchilla's surface at three noise levels, and the
effective speed-up (speedup.py) with a planted k = 1.3. Data is SYNTHETIC; nothing is timed.

    .venv/bin/python bench/bench_intervals.py [--draws 1000] [--boot 200]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from scipy.special import stdtrit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from marinctl.analysis.scaling.parabola import vertex_intervals  # noqa: E402
from marinctl.analysis.scaling.profile import profile  # noqa: E402
from marinctl.analysis.scaling.speedup import speedups  # noqa: E402
from tests.fakes.sweep import Surface  # noqa: E402

LAW = (1.6, 95.18, 0.0941)
V16 = np.array([1e18, 3e18, 1e19, 3e19, 1e20, 3e20])
RUNGS = np.array([5.5e19, 2.7e20, 1.8e21, 9.2e21])
NOISE = 0.003


def ladders(c, draws, seed, k=1.0):
    linf, a, alpha = LAW
    truth = linf + a * (k * c) ** -alpha
    return truth * (1 + NOISE * np.random.default_rng(seed).standard_normal((draws, len(c))))


def predict(p, at):
    return p.predict([at])[:, 0]


def loo(c, y, pin, at):
    n = len(c)
    keep = ~np.eye(n, dtype=bool)
    full = predict(profile(c, y, pin), at)
    outs = [full]
    for k in keep:
        outs.append(predict(profile(c[k], y[:, k], pin), at))
    s = np.stack(outs, 1)
    return s.min(1), s.max(1)


def wald(c, y, pin, at, level=0.9):
    p = profile(c, y, pin)
    b = p.best
    A = b["a"] * np.exp(b["alpha"] * p.l0)
    al, linf = b["alpha"], b["linf"]
    u = c[None, :] ** -al[:, None]
    cols = [u, -A[:, None] * np.log(c)[None, :] * u]
    if pin is None:
        cols = [np.ones_like(u)] + cols
    J = np.stack(cols, -1)
    df = len(c) - J.shape[-1]
    resid = y - (linf[:, None] + A[:, None] * u)
    s2 = (resid ** 2).sum(1) / df
    cov = np.linalg.inv(np.einsum("lni,lnj->lij", J, J)) * s2[:, None, None]
    ut = at ** -al
    g = [ut, -A * np.log(at) * ut]
    if pin is None:
        g = [np.ones_like(ut)] + g
    g = np.stack(g, -1)
    se = np.sqrt(np.einsum("li,lij,lj->l", g, cov, g))
    mu = linf + A * ut
    t = stdtrit(df, 0.5 + level / 2)
    return mu - t * se, mu + t * se


def boot(c, y, pin, at, nboot, seed, inflate=False, level=0.9):
    rng = np.random.default_rng(seed)
    p = profile(c, y, pin)
    b = p.best
    fitted = b["linf"][:, None] + b["a"][:, None] * np.exp(-b["alpha"][:, None] * (np.log(c)[None, :] - p.l0[:, None]))
    resid = y - fitted
    n, df = len(c), p.df
    if inflate:
        resid = resid * np.sqrt(n / df)
    lo, hi = np.empty(len(y)), np.empty(len(y))
    q = (1 - level) / 2
    for i in range(len(y)):
        pick = rng.integers(0, n, size=(nboot, n))
        yb = fitted[i][None, :] + resid[i][pick]
        preds = predict(profile(c, yb, pin), at)
        if inflate:     # widen the percentile spread to Student's t
            z, t = 1.6448536269514722, stdtrit(df, 0.5 + level / 2)
            mid = np.median(preds)
            preds = mid + (preds - mid) * t / z
        lo[i], hi[i] = np.quantile(preds, [q, 1 - q])
    return lo, hi


def held(lo, hi, truth):
    return f"{np.mean((lo <= truth) & (truth <= hi)):6.1%}  (median width {np.median(hi - lo):.4f})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--draws", type=int, default=1000, help="SYNTHETIC ladders (and sweeps, pairs) per row")
    ap.add_argument("--boot", type=int, default=200, help="resamples per ladder for the bootstrap intervals")
    args = ap.parse_args()
    linf, a, alpha = LAW
    print(f"90% intervals on the loss, {args.draws} SYNTHETIC ladders each (bootstraps: first {args.draws // 5})")
    for name, c, at in (("v16 points, at 1e21", V16, 1e21), ("4 rungs, at the hero's 2.7e24", RUNGS, 2.7e24)):
        for pin in (1.6, None):
            y = ladders(c, args.draws, seed=1)
            truth = linf + a * at ** -alpha
            print(f"\n{name}, L∞ {'pinned at 1.6' if pin else 'free'}")
            print(f"  loo        {held(*loo(c, y, pin, at), truth)}")
            print(f"  wald-t     {held(*wald(c, y, pin, at), truth)}")
            few = y[: args.draws // 5]
            print(f"  boot       {held(*boot(c, few, pin, at, args.boot, 2), truth)}")
            print(f"  boot-t     {held(*boot(c, few, pin, at, args.boot, 2, inflate=True), truth)}")
            lo, hi = profile(c, y, pin).interval([at], 0.9)
            print(f"  profile-F  {held(lo[:, 0], hi[:, 0], truth)}")
    print("\nisoFLOP optimum (Chinchilla's surface, six runs D*/3…3·D*), 90% intervals")
    s = Surface()
    for noise in (0.001, 0.003, 0.006):
        for budget in (1e18, 1e20):
            n, d, loss = s.optimum(budget)
            tokens = d * np.geomspace(1 / 3, 3, 6)
            y = s.loss(budget / (6 * tokens), tokens) * (1 + noise * np.random.default_rng(3).standard_normal((args.draws, 6)))
            got = vertex_intervals(np.log10(tokens), y, 0.9)
            unbounded = np.mean(~np.isfinite(got["x_hi"] - got["x_lo"]))
            print(f"  noise {noise:.1%} budget {budget:.0e}: T* {held(got['x_lo'], got['x_hi'], np.log10(d))}  "
                  f"L* {held(got['loss_lo'], got['loss_hi'], loss)}  unbounded {unbounded:.1%}")
    print("\neffective speed-up, planted k = 1.3 (both ladders at the v16 computes), 90% intervals")
    for pin in (1.6, None):
        base, cand = ladders(V16, args.draws, seed=4), ladders(V16, args.draws, seed=5, k=1.3)
        k, lo, hi = speedups(V16, base, V16, cand, pin, [1e18, 3e20, 1e21], 0.9)
        cells = "  ".join(f"at {c:.0e}: {np.mean((lo[:, j] <= 1.3) & (1.3 <= hi[:, j])):.1%}"
                          for j, c in enumerate((1e18, 3e20, 1e21)))
        print(f"  L∞ {'pinned' if pin else 'free  '}  {cells}")


if __name__ == "__main__":
    main()
