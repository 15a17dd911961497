"""The ladder's log-log chart: rung points, the fitted power law, and the predicted compute."""

from __future__ import annotations

from typing import Any

import numpy as np

from marinctl.analysis.scaling.ladder import Fit


def ladder_chart(points: list[dict[str, Any]], fit: Fit, predict: list[float] | None = None,
                 width: int = 80, height: int = 20) -> str:
    """Points, fitted curve and predictions on log10 axes, as uncoloured text."""
    import plotext as plt

    plt.clear_figure()
    plt.plotsize(width, height)
    plt.theme("clear")
    xs = [p["compute"] for p in points] + list(predict or [])
    lo, hi = np.log10(min(xs)), np.log10(max(xs))
    grid = np.logspace(lo, hi, 60)
    plt.plot(np.log10(grid).tolist(), np.log10(fit.predict(grid)).tolist(), label="fit", marker="braille")
    plt.scatter([np.log10(p["compute"]) for p in points], [np.log10(p["loss"]) for p in points], label="points", marker="o")
    if predict:
        plt.scatter([np.log10(c) for c in predict], np.log10(fit.predict(predict)).tolist(), label="predicted", marker="x")
    plt.xlabel("log10 compute (FLOPs)")
    plt.ylabel("log10 loss")
    out = plt.uncolorize(plt.build())
    plt.clear_figure()
    return out


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
