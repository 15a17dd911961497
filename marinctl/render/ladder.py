"""The ladder's log-log chart: rung points, the fitted power law, and the predicted compute."""

from __future__ import annotations

from typing import Any

import numpy as np

from marinctl.analysis.ladder import Fit


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
