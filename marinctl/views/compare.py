"""Other runs on the same charts: any runs a viewer picked, aligned on the view's x axis.

Each compared run is mapped onto the axis through its *own* schedule and clock (steps,
its tokens per step, a fraction of its own length, hours since its own start), so a 200-step
rung and the 390k-step hero line up on "fraction of schedule" and a fork lines up on steps.
The ladder overlays of `o` (every stored rung and reproduction on the fraction axis) are
the same lines for a fixed set of runs. A run that cannot be placed on the axis (no known
length for fractions, no tokens per step) is left off that chart and the legend says why.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from marinctl.views.chart_axis import Axis, axis_for
from marinctl.views.chart_data import Overlay
from marinctl.analysis.schedule import schedule_of, schedule_of_target
from marinctl.store import Connection
from marinctl.store import series as S
from marinctl.store.lineage import Target


@dataclass
class LegendEntry:
    """One line of the legend: its colour slot, its name, and why it is missing (when it is)."""

    slot: int
    name: str
    note: str | None = None


def _line(con: Connection, target: Target, axis: Axis, keys: Sequence[str], x_lo: float, x_hi: float,
          last_step: int, buckets: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """{key: (x, bucket means)} of one run over the x window [x_lo, x_hi] of `axis`."""
    lo = max(0, int(np.floor(axis.step_at(x_lo))))
    hi = min(last_step, int(np.ceil(axis.step_at(x_hi))))
    if hi < lo:
        return {}
    envs = S.envelopes(con, target.segments, keys, lo, hi + 1, buckets)
    out = {}
    for key, env in envs.items():
        if len(env):
            centres = (env.step_lo + env.step_hi) / 2.0
            out[key] = (axis.x(centres), env.mean)
    return out


def compare_lines(con: Connection, targets: Sequence[tuple[int, Target]], keys: Sequence[str], mode: str,
                  x_lo: float, x_hi: float, buckets: int) -> tuple[dict[str, list[Overlay]], list[LegendEntry]]:
    """The picked runs' lines for `keys` over the x window, and the legend; `targets` are (colour slot, run)."""
    lines: dict[str, list[Overlay]] = {}
    legend = []
    for slot, target in targets:
        name = target.name if not target.stitched or target.name != "hero" else "hero (stitched)"
        last = target.leaf.get("last_step")
        axis = axis_for(con, target, mode, 0, int(last or 0), schedule_of_target(target))
        if last is None:
            legend.append(LegendEntry(slot, name, "no history stored"))
            continue
        if axis.mode != mode:
            legend.append(LegendEntry(slot, name, f"no {mode} axis for it"))
            continue
        legend.append(LegendEntry(slot, name))
        for key, (x, y) in _line(con, target, axis, keys, x_lo, x_hi, int(last), buckets).items():
            lines.setdefault(key, []).append(Overlay(name, x, y, slot))
    return lines, legend


def ladder_lines(con: Connection, keys: Sequence[str], buckets: int, exclude_uid: str | None,
                 first_slot: int) -> tuple[dict[str, list[Overlay]], list[LegendEntry]]:
    """`o`: each stored ladder rung and reproduction over its whole length, on the fraction axis."""
    from marinctl import rungs
    from marinctl.store import runs as runs_store
    from marinctl.store.lineage import single

    lines: dict[str, list[Overlay]] = {}
    legend = []
    seen = set()
    slot = first_slot
    for r in rungs.rungs():
        if r["rung"] == "hero":
            continue
        for run in runs_store.find_rung_runs(con, r["rung"]) + runs_store.repro_runs(con, r["name"]):
            if run["uid"] in seen or run["uid"] == exclude_uid:
                continue
            seen.add(run["uid"])
            total = schedule_of(run).total_steps
            if run.get("last_step") is None or not total:
                continue
            name = ("repro " if run["source"] == "repro" else "") + r["name"]
            axis = Axis("fraction", "fraction", 1.0 / total)
            got = _line(con, single(run), axis, keys, 0.0, (int(run["last_step"]) + 1) / total, int(run["last_step"]),
                        buckets)
            if not got:
                continue
            legend.append(LegendEntry(slot, name))
            for key, (x, y) in got.items():
                lines.setdefault(key, []).append(Overlay(name, x, y, slot))
            slot += 1
    return lines, legend
