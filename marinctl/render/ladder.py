"""The ladder's log-log charts (points, fitted power law, its interval band, predictions; two
ladders side by side), the isoFLOP chart (parabolas and optima), and how intervals read as text."""

from __future__ import annotations

from typing import Any

import numpy as np

from marinctl.analysis.scaling.ladder import Fit


def span(lo: float | None, hi: float | None, decimals: int = 4) -> str:
    """An interval as text: `2.5990 – 2.6130`, an unbounded end as −∞ / ∞."""
    from marinctl import numbers as N

    def end(x: float | None) -> str:
        if x is not None and np.isinf(x):
            return "∞" if x > 0 else "−∞"
        return N.fixed(x, decimals) if x is not None and abs(x) < 1e4 else N.sig(x, 4)
    return f"{end(lo)} – {end(hi)}"


def constants_line(f: dict[str, Any]) -> str:
    """The fitted law and its constants' intervals, one line (`f`: Fit.as_dict())."""
    from marinctl import numbers as N

    pct = N.percent(f["level"], 0)
    linf = f"{N.fixed(f['L_inf'])} (pinned)" if f["pinned"] else f"{N.fixed(f['L_inf'])} ({span(*_ci(f, 'L_inf'))})"
    lo_a, hi_a = _ci(f, "A")
    a_span = f"{N.sig(lo_a)} – {N.sig(hi_a)}" if np.isfinite(lo_a) and np.isfinite(hi_a) else span(lo_a, hi_a)
    return (f"L(C) = L_inf + A·C^-alpha, {pct} intervals:   L_inf = {linf}   A = {N.sig(f['A'])} ({a_span})   "
            f"alpha = {N.fixed(f['alpha'])} ({span(*_ci(f, 'alpha'))})")


def _ci(f: dict[str, Any], name: str) -> tuple[float, float]:
    ci = f.get(f"{name}_ci") or {}
    return ci.get("lo", float("nan")), ci.get("hi", float("nan"))


def _grid(points: list[dict[str, Any]], predict: list[float] | None) -> np.ndarray:
    xs = [p["compute"] for p in points] + list(predict or [])
    return np.logspace(np.log10(min(xs)), np.log10(max(xs)), 60)


def _figure(width: int, height: int):
    import plotext as plt

    plt.clear_figure()
    plt.plotsize(width, height)
    plt.theme("clear")
    return plt


def _done(plt, ylabel: str) -> str:
    plt.xlabel("log10 compute (FLOPs)")
    plt.ylabel(ylabel)
    out = plt.uncolorize(plt.build())
    plt.clear_figure()
    return out


def ladder_chart(points: list[dict[str, Any]], fit: Fit, predict: list[float] | None = None,
                 width: int = 80, height: int = 20) -> str:
    """Points, fitted curve and predictions on log10 axes, as uncoloured text."""
    plt = _figure(width, height)
    grid = _grid(points, predict)
    plt.plot(np.log10(grid).tolist(), np.log10(fit.predict(grid)).tolist(), label="fit", marker="braille")
    plt.scatter([np.log10(p["compute"]) for p in points], [np.log10(p["loss"]) for p in points], label="points", marker="o")
    if predict:
        plt.scatter([np.log10(c) for c in predict], np.log10(fit.predict(predict)).tolist(), label="predicted", marker="x")
    return _done(plt, "log10 loss")


def _about(plt, grid: np.ndarray, ref: Fit, fit: Fit, pts: list[dict[str, Any]], label: str, point: str,
           line: str | None, band: str) -> None:
    """One ladder drawn against the reference fit: its fit (unless it is the reference), its band, its points."""
    xs = np.log10(grid)
    name = f"{label} " if label else ""
    if line is not None:
        plt.plot(xs.tolist(), (fit.predict(grid) - ref.predict(grid)).tolist(), label=f"{name}fit", marker=line)
    if fit.calibrated:
        lo, hi = fit.band(grid)
        ok = np.isfinite(lo) & np.isfinite(hi)
        what = f"{name}{fit.level:.0%} band" + ("" if label else ", the law")
        plt.plot(xs[ok].tolist(), (lo - ref.predict(grid))[ok].tolist(), marker=band, label=what)
        plt.plot(xs[ok].tolist(), (hi - ref.predict(grid))[ok].tolist(), marker=band)
    c = np.array([p["compute"] for p in pts])
    plt.scatter(np.log10(c).tolist(), (np.array([p["loss"] for p in pts]) - ref.predict(c)).tolist(),
                label=f"{name}points", marker=point)


def band_chart(points: list[dict[str, Any]], fit: Fit, predict: list[float] | None = None,
               width: int = 80, height: int = 14) -> str:
    """The interval made visible: each point's loss and the band's ends as distances from the fit,
    widening where the fit extrapolates (uncoloured text)."""
    plt = _figure(width, height)
    grid = _grid(points, predict)
    _about(plt, grid, fit, fit, points, "", "o", None, ".")
    if fit.calibrated:
        lo, hi = fit.band(grid, run=True)
        xs, mid = np.log10(grid), fit.predict(grid)
        plt.plot(xs.tolist(), (lo - mid).tolist(), marker=":", label=f"{fit.level:.0%} band, one run")
        plt.plot(xs.tolist(), (hi - mid).tolist(), marker=":")
    if predict:
        plt.scatter([np.log10(c) for c in predict], [0.0] * len(predict), label="predicted", marker="x")
    return _done(plt, "loss − fit")


def speedup_chart(base: list[dict[str, Any]], base_fit: Fit, cand: list[dict[str, Any]], cand_fit: Fit,
                  predict: list[float] | None = None, width: int = 80, height: int = 20) -> str:
    """Both ladders against the baseline's fit: the baseline's band about zero, the candidate's fit and
    band (below zero: lower loss at equal compute, a speed-up above 1), each one's points."""
    plt = _figure(width, height)
    grid = _grid(base + cand, predict)
    _about(plt, grid, base_fit, base_fit, base, "base", "o", None, ".")
    _about(plt, grid, base_fit, cand_fit, cand, "candidate", "x", "braille", ":")
    return _done(plt, "loss − base fit")


ISOFLOP_MARKERS = ("o", "+", "*", "#", "@", "%", "&", "$")


def isoflop_chart(budgets: list[Any], width: int = 80, height: int = 22) -> str:
    """Each budget's runs (loss against log10 tokens, one marker per budget), its parabola over
    the runs' tokens and its optimum (X); the optima joined by a line. Uncoloured text."""
    import plotext as plt

    plt.clear_figure()
    plt.plotsize(width, height)
    plt.theme("clear")
    optima = []
    for i, b in enumerate(budgets):
        if not b.points:
            continue
        xs = np.log10([p.tokens for p in b.points])
        label = f"{b.compute:.0e}" + ("" if b.bracketed or b.tokens is None else " (not bracketed)")
        plt.scatter(xs.tolist(), [p.loss for p in b.points], marker=ISOFLOP_MARKERS[i % len(ISOFLOP_MARKERS)], label=label)
        if b.coeffs is not None:
            a2, a1, a0 = b.coeffs
            lo, hi = float(xs.min()), float(xs.max())
            if b.tokens is not None:
                lo, hi = min(lo, np.log10(b.tokens)), max(hi, np.log10(b.tokens))
            grid = np.linspace(lo, hi, 40)
            plt.plot(grid.tolist(), (a2 * grid ** 2 + a1 * grid + a0).tolist(), marker="braille")
        if b.tokens is not None:
            optima.append((float(np.log10(b.tokens)), b.loss))
    if optima:
        plt.plot([o[0] for o in optima], [o[1] for o in optima], marker="braille", label="optima")
        plt.scatter([o[0] for o in optima], [o[1] for o in optima], marker="X")
    plt.xlabel("log10 tokens")
    plt.ylabel("loss")
    out = plt.uncolorize(plt.build())
    plt.clear_figure()
    return out
