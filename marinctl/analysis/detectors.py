"""Anomaly detectors: DuckDB SQL over the full-resolution history, never over samples.

W&B's sampled endpoints hide one-step spikes (peers.md §A.2), so every detector reads the
stored history of a run at full resolution — the run's own steps plus, for a fork child,
its parent's steps up to the fork (store/lineage.py) so baselines never start empty.

Detectors and thresholds (each with its source; peers.md §B.1, marin.md §5):
- **spike** on log(train/loss) and log(grad/norm/total): robust z = 0.6745·(y − median)/MAD
  over the trailing `SPIKE_WINDOW` = 100 points, the current point excluded (a window that
  contains the spike masks it, §B.1). Loss spike z > 8, co-spike both z > 6 — the public
  W&B watcher calibrated on six healthy runs (max z 4.5; never both > 6). Work in log space:
  spikes are multiplicative. The modified z-score is Iglewicz & Hoaglin's (SaQC flagMAD).
- **warm-up aware**: nothing before step 200 (the watcher skips < 200; OLMo-core waits for a
  full window) and thresholds ×1.5 until warm-up ends (BLOOM's glitches cluster there but so
  does fast healthy movement); router metrics only after warm-up (Marin: "sudden z-loss or
  router-metric change (after warmup)", marin.md §5).
- **sustained_rise**: loss > 1.5 × trend (trailing 200-step median) for ≥ 10 consecutive
  steps — Marin's own alert "> 50% above trend for ~10+ steps" (marin.md §5).
- **nonfinite**: any NaN/Inf value (Marin: instability = NaN/Inf; grug crashes on them).
- **step_gap**, **resume** (wall-clock gap > max(10× median step time, 10 min) with no step
  gap; the watcher's SLOW rule and Marin's 30-min wedge alert bound it), **fork** (from the
  lineage), **rewind** (history the store saw before was rewritten; see detect_incremental).
- **throughput_collapse**: 30-step median tokens/s below 0.75 × the median of the 1,000
  steps before — Marin "sustained 20–30% below baseline" (marin.md §5); watcher SLOW uses
  the median of 30 step times > 1.25× baseline.
- **hyperball_drift**: a MuonH/AdamH matrix norm more than 1% from its first logged value.
  Those optimizers project every step back onto the Frobenius sphere (marin.md §1.4, §3.2),
  so their norms hold to ~1e-6 in fp32; 1% is a marinctl choice (no published number).
- **router**: routing-entropy drop (z < −8), drop/overflow fraction rise (z > 8 and
  +0.5 percentage points), router z-loss jump (log z > 8) — DeepSeek-V3 / Marin router
  metrics as instability signals (peers.md §B.3, marin.md §5).
- **param_norm_jump**: robust z > 8 of Δlog‖θ‖ between watch steps (trailing 50 watch
  points) and |Δlog‖θ‖| > 1e-4; classified by exact attribution (attribution.py).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, Sequence

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from marinctl.analysis import roles as roles_mod
from marinctl.store import metrics as M

LOSS, GRAD, PNORM = "train/loss", "grad/norm/total", "params/norm/total"
TPS, DURATION, TIMESTAMP = "throughput/tokens_per_second", "throughput/duration", "_timestamp"
ENTROPY, ZLOSS = "train/router/routing_entropy_mean", "train/router/router_z_loss"
DROP, OVERFLOW = "moe/drop_fraction", "train/router/capacity_overflow_rate_mean"

SPIKE_WINDOW = 100          # trailing points (watcher)
MIN_BASELINE = 30           # points needed before a score counts
SPIKE_Z = 8.0               # watcher LOSS-SPIKE
CO_SPIKE_Z = 6.0            # watcher CO-SPIKE
WARMUP_FACTOR = 1.5         # thresholds during LR warm-up
SKIP_BEFORE = 200           # watcher: skip steps < 200
TREND_WINDOW = 200
RISE_RATIO = 1.5            # Marin: > 50% above trend
RISE_STEPS = 10             # Marin: ~10+ steps
TPUT_RECENT, TPUT_BASE, TPUT_RATIO = 30, 1000, 0.75
RESUME_FACTOR, RESUME_MIN_S = 10.0, 600.0
DRIFT_REL = 0.01
NORM_WINDOW = 50            # watch points
NORM_MIN_DLOG = 1e-4
ROUTER_MIN_RISE = 0.005
LOOKBACK = TPUT_BASE + TPUT_RECENT + 70   # steps read before the first step scored
REVISIT = 100               # steps re-scored at each incremental pass (episodes straddling the watermark)
FINGERPRINT_EVERY = 500     # steps between stored _timestamp fingerprints (rewind detection)

# (key, transform, direction, threshold, MAD floor, kind, cause_class, router metric?)
_SPIKE_KEYS = (
    (LOSS, "log", 1, CO_SPIKE_Z, 1e-4, "spike", None, False),
    (GRAD, "log", 1, CO_SPIKE_Z, 1e-4, "grad_spike", "optimizer", False),
    (ZLOSS, "log", 1, SPIKE_Z, 1e-3, "router_zloss_jump", "moe_routing", True),
    (ENTROPY, "raw", -1, SPIKE_Z, 1e-3, "routing_entropy_drop", "moe_routing", True),
    (DROP, "raw", 1, SPIKE_Z, 1e-4, "drop_fraction_rise", "moe_routing", True),
    (OVERFLOW, "raw", 1, SPIKE_Z, 1e-4, "overflow_rise", "moe_routing", True),
)


@dataclass
class Anomaly:
    run_pk: int
    step: int
    metric: str
    kind: str
    score: float
    cause_class: str
    details: dict[str, Any] = field(default_factory=dict)

    def as_row(self) -> list[Any]:
        return [self.run_pk, self.step, self.metric, self.kind, _finite(self.score), self.cause_class,
                json.dumps(self.details, default=_json_default)]


def _finite(x: float | None) -> float | None:
    return float(x) if x is not None and math.isfinite(x) else None


def _json_default(o: Any) -> Any:
    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.floating,)):
        return _finite(float(o))
    return str(o)


# --- run context the detectors need --------------------------------------------------------------

@dataclass
class RunFrame:
    """One run as detection sees it: its lineage segments, own step range and recipe."""

    run: dict[str, Any]
    segments: list[M.Segment]
    own_lo: int
    warmup_end: int
    roles: roles_mod.RecipeRoles

    @property
    def run_pk(self) -> int:
        return self.run["run_pk"]


def frame(con: duckdb.DuckDBPyConnection, run_pk: int) -> RunFrame:
    from marinctl.analysis.context import warmup_end_step
    from marinctl.store import lineage
    from marinctl.store.runs import get_run

    run = get_run(con, run_pk)
    chain = lineage.chain(con, run)
    segs = lineage.segments_for(chain)
    # detection reads the parent only up to the fork; the run itself to its end
    segs[-1] = (segs[-1][0], segs[-1][1], None)
    own_lo = segs[-1][1] or 0
    return RunFrame(run, segs, own_lo, warmup_end_step(run), roles_mod.recipe_roles(run))


# --- reading ---------------------------------------------------------------------------------

def read(con: duckdb.DuckDBPyConnection, segments, keys: Sequence[str], lo: int, hi: int | None) -> pa.Table:
    """Long (key, step, value) for `keys` over the segments in [lo, hi): one scan of `metrics`."""
    ids = M.key_ids(con, keys)
    if not ids:
        return pa.table({"key": pa.array([], pa.string()), "step": pa.array([], pa.int64()), "value": pa.array([], pa.float64())})
    where, params = M.segment_filter(segments)
    sql = (f"SELECT k.key, m.step, m.value FROM metrics m JOIN metric_keys k USING (key_id)"
           f" WHERE m.key_id IN ({','.join('?' * len(ids))}) AND m.step >= ?"
           + (" AND m.step < ?" if hi is not None else "")
           + f" AND {where.replace('run_pk', 'm.run_pk').replace('step', 'm.step')}")
    params = [*ids.values(), lo, *([hi] if hi is not None else []), *params]
    try:
        return con.sql(sql, params=params).to_arrow_table()
    except (TypeError, AttributeError):  # older DuckDB
        return con.execute(sql, params).fetch_arrow_table()


# --- detectors -------------------------------------------------------------------------------

def _spike_scores(con, data: pa.Table, emit_lo: int, emit_hi: int | None) -> list[tuple]:
    """(key, step, value, median, z) for every point whose |z| passes its key's lowest bar."""
    cfg = pa.table({
        "key": [k[0] for k in _SPIKE_KEYS], "xform": [k[1] for k in _SPIKE_KEYS],
        "dir": [k[2] for k in _SPIKE_KEYS], "thr": [k[3] for k in _SPIKE_KEYS], "floor": [k[4] for k in _SPIKE_KEYS],
    })
    con.register("_det_data", data)
    con.register("_det_cfg", cfg)
    try:
        return con.execute(f"""
            WITH x AS (
                SELECT d.key, d.step, d.value, c.dir, c.thr, c.floor, c.xform,
                       CASE WHEN c.xform = 'log' THEN ln(d.value) ELSE d.value END AS y
                FROM _det_data d JOIN _det_cfg c USING (key)
                WHERE isfinite(d.value) AND (c.xform <> 'log' OR d.value > 0)
            ), w AS (
                SELECT *, median(y) OVER win AS med, mad(y) OVER win AS dev, count(*) OVER win AS n
                FROM x WINDOW win AS (PARTITION BY key ORDER BY step ROWS BETWEEN {SPIKE_WINDOW} PRECEDING AND 1 PRECEDING)
            )
            SELECT key, step, value, CASE WHEN xform = 'log' THEN exp(med) ELSE med END AS base,
                   0.6745 * (y - med) / greatest(dev, floor) AS z
            FROM w
            WHERE n >= {MIN_BASELINE} AND step >= ? {"AND step < ?" if emit_hi is not None else ""}
              AND dir * 0.6745 * (y - med) / greatest(dev, floor) > thr * 0.75
            ORDER BY key, step
        """, [emit_lo, *([emit_hi] if emit_hi is not None else [])]).fetchall()
    finally:
        con.unregister("_det_data")
        con.unregister("_det_cfg")


def spikes(con, fr: RunFrame, data: pa.Table, emit_lo: int, emit_hi: int | None, owner) -> list[Anomaly]:
    rows = _spike_scores(con, data, max(emit_lo - 3, 0), emit_hi)
    by_key: dict[str, dict[int, tuple]] = {}
    for key, step, value, base, z in rows:
        by_key.setdefault(key, {})[int(step)] = (value, base, z)
    out: list[Anomaly] = []
    loss, grad = by_key.get(LOSS, {}), by_key.get(GRAD, {})

    def bar(step: int, thr: float) -> float:
        return thr * (WARMUP_FACTOR if step < fr.warmup_end else 1.0)

    used_grad: set[int] = set()
    for step, (value, base, z) in sorted(loss.items()):
        if step < max(emit_lo, SKIP_BEFORE) or (emit_hi is not None and step >= emit_hi):
            continue
        lead = next(((s, grad[s]) for s in (step - 1, step - 2) if s in grad and grad[s][2] > bar(s, CO_SPIKE_Z)), None)
        same = grad.get(step) if step in grad and grad[step][2] > bar(step, CO_SPIKE_Z) else None
        details = {"value": value, "baseline": base, "z": z, "window": SPIKE_WINDOW, "warmup": step < fr.warmup_end,
                   "threshold": bar(step, SPIKE_Z)}
        if lead is not None and z > bar(step, CO_SPIKE_Z):
            gs, (gv, gb, gz) = lead
            used_grad.update({gs, step})
            details.update(grad_step=gs, grad_value=gv, grad_baseline=gb, grad_z=gz, precursor_steps=step - gs)
            out.append(Anomaly(owner(step), step, LOSS, "co_spike", z, "optimizer", details))
        elif same is not None and z > bar(step, CO_SPIKE_Z):
            gv, gb, gz = same
            used_grad.add(step)
            details.update(grad_step=step, grad_value=gv, grad_baseline=gb, grad_z=gz, precursor_steps=0)
            out.append(Anomaly(owner(step), step, LOSS, "co_spike", z, "data_batch", details))
        elif z > bar(step, SPIKE_Z):
            out.append(Anomaly(owner(step), step, LOSS, "spike", z, "data_batch", details))
    for step, (value, base, z) in sorted(grad.items()):
        if step in used_grad or step < max(emit_lo, SKIP_BEFORE) or (emit_hi is not None and step >= emit_hi):
            continue
        if z > bar(step, SPIKE_Z) and not any((step + d) in used_grad for d in (1, 2)):
            out.append(Anomaly(owner(step), step, GRAD, "grad_spike", z, "optimizer",
                               {"value": value, "baseline": base, "z": z, "window": SPIKE_WINDOW, "warmup": step < fr.warmup_end}))
    for key, _, direction, thr, _, kind, cause, router in _SPIKE_KEYS[2:]:
        for step, (value, base, z) in sorted(by_key.get(key, {}).items()):
            if step < max(emit_lo, SKIP_BEFORE, fr.warmup_end if router else 0) or (emit_hi is not None and step >= emit_hi):
                continue
            if direction * z <= thr:
                continue
            if kind in ("drop_fraction_rise", "overflow_rise") and value - base < ROUTER_MIN_RISE:
                continue
            out.append(Anomaly(owner(step), step, key, kind, abs(z), cause, {"value": value, "baseline": base, "z": z, "window": SPIKE_WINDOW}))
    return out


def _islands(steps: list[int], max_gap: int = 1) -> list[tuple[int, int, int]]:
    """Consecutive runs in sorted steps: (first, last, count)."""
    out: list[tuple[int, int, int]] = []
    for s in steps:
        if out and s - out[-1][1] <= max_gap:
            first, _, n = out[-1]
            out[-1] = (first, s, n + 1)
        else:
            out.append((s, s, 1))
    return out


def _emit_island(first: int, last: int, emit_lo: int, emit_hi: int | None, overlap: bool) -> bool:
    if overlap:
        return last >= emit_lo and (emit_hi is None or first < emit_hi)
    return first >= emit_lo and (emit_hi is None or first < emit_hi)


def sustained_rise(con, fr: RunFrame, data: pa.Table, emit_lo, emit_hi, owner, overlap=False) -> list[Anomaly]:
    con.register("_det_data", data)
    try:
        rows = con.execute(f"""
            WITH w AS (
                SELECT step, value, median(value) OVER (ORDER BY step ROWS BETWEEN {TREND_WINDOW} PRECEDING AND 1 PRECEDING) AS trend,
                       count(*) OVER (ORDER BY step ROWS BETWEEN {TREND_WINDOW} PRECEDING AND 1 PRECEDING) AS n
                FROM _det_data WHERE key = ? AND isfinite(value)
            )
            SELECT step, value, trend FROM w WHERE n >= {MIN_BASELINE} AND value > {RISE_RATIO} * trend AND step >= ?
            ORDER BY step
        """, [LOSS, SKIP_BEFORE]).fetchall()
    finally:
        con.unregister("_det_data")
    info = {int(s): (v, t) for s, v, t in rows}
    out = []
    for first, last, n in _islands(sorted(info)):
        if n < RISE_STEPS or not _emit_island(first, last, emit_lo, emit_hi, overlap):
            continue
        ratios = [info[s][0] / info[s][1] for s in range(first, last + 1) if s in info]
        out.append(Anomaly(owner(first), first, LOSS, "sustained_rise", max(ratios), "optimizer",
                           {"start": first, "end": last, "steps": n, "value": info[first][0], "baseline": info[first][1],
                            "max_ratio": max(ratios), "threshold_ratio": RISE_RATIO, "min_steps": RISE_STEPS}))
    return out


def throughput(con, fr: RunFrame, data: pa.Table, emit_lo, emit_hi, owner, overlap=False) -> list[Anomaly]:
    con.register("_det_data", data)
    try:
        key, sign = (TPS, 1.0) if data.filter(pc.equal(data["key"], TPS)).num_rows else (DURATION, -1.0)
        rows = con.execute(f"""
            WITH x AS (SELECT step, CASE WHEN ? > 0 THEN value ELSE 1.0 / value END AS rate
                       FROM _det_data WHERE key = ? AND isfinite(value) AND value > 0),
            w AS (SELECT step, rate,
                         median(rate) OVER (ORDER BY step ROWS BETWEEN {TPUT_RECENT - 1} PRECEDING AND CURRENT ROW) AS recent,
                         median(rate) OVER (ORDER BY step ROWS BETWEEN {TPUT_BASE + TPUT_RECENT} PRECEDING AND {TPUT_RECENT} PRECEDING) AS base,
                         count(*) OVER (ORDER BY step ROWS BETWEEN {TPUT_BASE + TPUT_RECENT} PRECEDING AND {TPUT_RECENT} PRECEDING) AS n
                  FROM x)
            SELECT step, recent, base FROM w WHERE n >= 100 AND recent < {TPUT_RATIO} * base ORDER BY step
        """, [sign, key]).fetchall()
    finally:
        con.unregister("_det_data")
    info = {int(s): (r, b) for s, r, b in rows}
    out = []
    for first, last, n in _islands(sorted(info)):
        if not _emit_island(first, last, emit_lo, emit_hi, overlap):
            continue
        r, b = info[first]
        worst = min(info[s][0] / info[s][1] for s in info if first <= s <= last)
        out.append(Anomaly(owner(first), first, key, "throughput_collapse", 1.0 - worst, "infrastructure",
                           {"start": first, "end": last, "steps": n, "recent_median": r if sign > 0 else 1 / r,
                            "baseline_median": b if sign > 0 else 1 / b, "ratio": worst, "threshold_ratio": TPUT_RATIO,
                            "recent_window": TPUT_RECENT, "baseline_window": TPUT_BASE}))
    return out


def timing(con, fr: RunFrame, data: pa.Table, emit_lo, emit_hi, owner) -> list[Anomaly]:
    """Step gaps and wall-clock gaps (resumes) on the run's own steps, plus its fork point."""
    con.register("_det_data", data)
    try:
        rows = con.execute(f"""
            WITH t AS (SELECT step, value AS ts, lag(step) OVER (ORDER BY step) AS prev_step, lag(value) OVER (ORDER BY step) AS prev_ts
                       FROM _det_data WHERE key = ?),
            w AS (SELECT *, ts - prev_ts AS dt,
                         median(ts - prev_ts) OVER (ORDER BY step ROWS BETWEEN {SPIKE_WINDOW} PRECEDING AND 1 PRECEDING) AS med_dt
                  FROM t)
            SELECT step, prev_step, dt, med_dt FROM w
            WHERE prev_step IS NOT NULL AND step >= ? {"AND step < ?" if emit_hi is not None else ""}
              AND (step - prev_step > 1 OR (dt > greatest({RESUME_FACTOR} * coalesce(med_dt, 0), {RESUME_MIN_S})))
            ORDER BY step
        """, [TIMESTAMP if data.filter(pc.equal(data["key"], TIMESTAMP)).num_rows else LOSS, emit_lo,
              *([emit_hi] if emit_hi is not None else [])]).fetchall()
    finally:
        con.unregister("_det_data")
    out: list[Anomaly] = []
    fork_at = (fr.run.get("fork_step") + 1) if fr.run.get("fork_step") is not None else None
    for step, prev, dt, med in rows:
        step, prev = int(step), int(prev)
        if fork_at is not None and abs(step - fork_at) <= 1 and step - prev <= 1:
            continue  # the fork's own wall gap: reported as the fork
        if step - prev > 1:
            out.append(Anomaly(owner(step), step, "_step", "step_gap", float(step - prev - 1), "infrastructure",
                               {"previous_step": prev, "missing_steps": step - prev - 1, "wall_gap_s": dt}))
        else:
            out.append(Anomaly(owner(step), step, TIMESTAMP, "resume", float(dt / med) if med else float(dt), "infrastructure",
                               {"previous_step": prev, "wall_gap_s": dt, "median_step_s": med,
                                "threshold_s": max(RESUME_FACTOR * (med or 0), RESUME_MIN_S)}))
    if fork_at is not None and fork_at >= emit_lo and (emit_hi is None or fork_at < emit_hi):
        out.append(Anomaly(fr.run_pk, fork_at, "_lineage", "fork", 1.0, "infrastructure",
                           {"fork_parent": fr.run.get("fork_parent"), "fork_step": fr.run.get("fork_step"),
                            "run": fr.run.get("run_id")}))
    return out


def nonfinite(con, fr: RunFrame, emit_lo, emit_hi, owner) -> list[Anomaly]:
    where, params = M.segment_filter(fr.segments)
    rows = con.execute(
        f"SELECT k.key, min(m.step), count(*), any_value(m.value) FROM metrics m JOIN metric_keys k USING (key_id)"
        f" WHERE m.step >= ? {'AND m.step < ?' if emit_hi is not None else ''} AND NOT isfinite(m.value)"
        f" AND {where.replace('run_pk', 'm.run_pk').replace('step', 'm.step')} GROUP BY k.key ORDER BY 2, 1",
        [emit_lo, *([emit_hi] if emit_hi is not None else []), *params]).fetchall()
    out = []
    for key, step, count, value in rows:
        out.append(Anomaly(owner(int(step)), int(step), key, "nonfinite", float(count), "numerics",
                           {"first_step": int(step), "count": int(count), "value": str(value)}))
    return out


def hyperball_leaves(con, fr: RunFrame) -> list[str]:
    keys = [r[0] for r in con.execute("SELECT key FROM metric_keys WHERE starts_with(key, 'params/norm/') AND key <> ?", [PNORM]).fetchall()]
    return [k for k in keys if fr.roles.role(roles_mod.leaf_path(k)).hyperball]


def hyperball_refs(con, fr: RunFrame, leaves: Sequence[str]) -> dict[str, tuple[int, float]]:
    """Each hyperball leaf's first logged (step, value) in the lineage: the sphere's radius."""
    ids = M.key_ids(con, leaves)
    if not ids:
        return {}
    where, params = M.segment_filter(fr.segments)
    rows = con.execute(
        f"SELECT k.key, min(m.step), arg_min(m.value, m.step) FROM metrics m JOIN metric_keys k USING (key_id)"
        f" WHERE m.key_id IN ({','.join('?' * len(ids))}) AND isfinite(m.value)"
        f" AND {where.replace('run_pk', 'm.run_pk').replace('step', 'm.step')} GROUP BY k.key",
        [*ids.values(), *params]).fetchall()
    return {k: (int(s), float(v)) for k, s, v in rows if v}


def hyperball_drift(con, fr: RunFrame, data: pa.Table, refs: dict[str, tuple[int, float]], emit_lo, emit_hi, owner) -> list[Anomaly]:
    if not refs or not data.num_rows:
        return []
    ref_tab = pa.table({"key": list(refs), "ref": [v for _, v in refs.values()]})
    con.register("_det_data", data)
    con.register("_det_ref", ref_tab)
    try:
        rows = con.execute(f"""
            WITH x AS (SELECT d.key, d.step, d.value, r.ref, abs(d.value / r.ref - 1) AS dev FROM _det_data d JOIN _det_ref r USING (key)),
            w AS (SELECT *, lag(dev) OVER (PARTITION BY key ORDER BY step) AS prev_dev FROM x)
            SELECT key, step, value, ref, dev FROM w
            WHERE dev > {DRIFT_REL} AND (prev_dev IS NULL OR prev_dev <= {DRIFT_REL}) AND step >= ? {"AND step < ?" if emit_hi is not None else ""}
            ORDER BY step, dev DESC
        """, [emit_lo, *([emit_hi] if emit_hi is not None else [])]).fetchall()
    finally:
        con.unregister("_det_data")
        con.unregister("_det_ref")
    by_step: dict[int, list[tuple]] = {}
    for key, step, value, ref, dev in rows:
        by_step.setdefault(int(step), []).append((key, value, ref, dev))
    out = []
    for step, leaves in sorted(by_step.items()):
        key, value, ref, dev = leaves[0]
        role = fr.roles.role(roles_mod.leaf_path(key))
        out.append(Anomaly(owner(step), step, key, "hyperball_drift", dev, "optimizer",
                           {"value": value, "reference": ref, "relative_drift": dev, "threshold": DRIFT_REL,
                            "role": role.role, "module": role.module, "layer": role.layer, "leaves_drifting": len(leaves),
                            "leaves": [{"name": k, "value": v, "reference": r, "relative_drift": d} for k, v, r, d in leaves[:10]]}))
    return out


def param_norm_jumps(con, fr: RunFrame, data: pa.Table, emit_lo, emit_hi, owner, attribute: bool = True) -> list[Anomaly]:
    from marinctl.analysis import attribution as att_mod

    con.register("_det_data", data)
    try:
        rows = con.execute(f"""
            WITH x AS (SELECT step, value, ln(value) - lag(ln(value)) OVER (ORDER BY step) AS d, lag(step) OVER (ORDER BY step) AS prev_step
                       FROM _det_data WHERE key = ? AND isfinite(value) AND value > 0),
            w AS (SELECT *, median(d) OVER win AS med, mad(d) OVER win AS dev, count(d) OVER win AS n
                  FROM x WINDOW win AS (ORDER BY step ROWS BETWEEN {NORM_WINDOW} PRECEDING AND 1 PRECEDING))
            SELECT step, prev_step, value, d, med, 0.6745 * (d - med) / greatest(dev, 1e-9) AS z FROM w
            WHERE n >= 10 AND d IS NOT NULL AND abs(d) > {NORM_MIN_DLOG} AND abs(0.6745 * (d - med) / greatest(dev, 1e-9)) > {SPIKE_Z}
              AND step >= ? {"AND step < ?" if emit_hi is not None else ""}
            ORDER BY step
        """, [PNORM, max(emit_lo, SKIP_BEFORE), *([emit_hi] if emit_hi is not None else [])]).fetchall()
    finally:
        con.unregister("_det_data")
    out = []
    for step, prev, value, d, med, z in rows:
        step, prev = int(step), int(prev)
        details = {"value": value, "previous_step": prev, "previous_value": value / math.exp(d), "dlog": d,
                   "baseline_dlog": med, "z": z, "window": NORM_WINDOW}
        cause, conf = "none", 0.3
        if attribute:
            att = att_mod.attribute(con, fr.segments, fr.roles, prev, step)
            if att is not None:
                cause, conf, verdict = classify_norm_change(att, fr.roles, step - prev)
                details.update(verdict=verdict, delta_sq=att.total_delta,
                               by_module=[{k: r[k] for k in ("module", "share")} for r in att.by_module[:6]],
                               by_role=[{k: r[k] for k in ("role", "share")} for r in att.by_role],
                               top_leaves=[{"name": l["name"], "share": l["share"]} for l in att.top_leaves(5)])
        details["confidence"] = conf
        out.append(Anomaly(owner(step), step, PNORM, "param_norm_jump", abs(z), cause, details))
    return out


def classify_norm_change(att, recipe: roles_mod.RecipeRoles, steps: int) -> tuple[str, float, str]:
    """(cause_class, confidence, verdict) for a total-norm change from its exact attribution."""
    heur = att.share_of(role=roles_mod.HEURISTIC)
    ball = sum(att.share_of(role=r) for r in roles_mod.HYPERBALL)
    if heur >= 0.5:
        if recipe.bias_rule == "sign":
            bound = recipe.sign_rule_bound(steps)
            moved = max((abs(l["after"] - l["before"]) for l in att.leaves if l["role"] == roles_mod.HEURISTIC), default=0.0)
            if bound is not None and moved > bound:
                return "moe_routing", min(0.95, heur), "router_bias moved faster than its sign rule allows"
        return "heuristic_parameter", round(min(0.99, heur), 3), "expected balancing dynamics, not instability"
    if ball >= 0.5:
        return "optimizer", round(min(0.9, ball), 3), "hyperball-constrained matrices changed norm"
    return "optimizer", round(max(0.3, min(0.8, att.share_of(role=roles_mod.ADAM))), 3), "Adam-group parameters moved"


# --- orchestration ---------------------------------------------------------------------------

def scan(con: duckdb.DuckDBPyConnection, fr: RunFrame, emit_lo: int, emit_hi: int | None = None, *,
         overlap: bool = False, refs: dict[str, tuple[int, float]] | None = None, owner=None) -> list[Anomaly]:
    """Every detector over steps [emit_lo, emit_hi), reading LOOKBACK steps of history before."""
    owner = owner or (lambda step: fr.run_pk)
    read_lo = max(emit_lo - LOOKBACK, 0)
    dense = read(con, fr.segments, [LOSS, GRAD, TPS, DURATION, TIMESTAMP, ENTROPY, ZLOSS, DROP, OVERFLOW, PNORM], read_lo,
                 None if emit_hi is None else emit_hi + 5)
    found = spikes(con, fr, dense, emit_lo, emit_hi, owner)
    found += sustained_rise(con, fr, dense, emit_lo, emit_hi, owner, overlap)
    found += throughput(con, fr, dense, emit_lo, emit_hi, owner, overlap)
    own = dense.filter(pc.greater_equal(dense["step"], fr.own_lo)) if not overlap else dense
    found += timing(con, fr, own, max(emit_lo, fr.own_lo if not overlap else 0), emit_hi, owner)
    found += nonfinite(con, fr, emit_lo, emit_hi, owner)
    found += param_norm_jumps(con, fr, dense, emit_lo, emit_hi, owner)
    leaves = hyperball_leaves(con, fr)
    if leaves:
        refs = refs if refs is not None else hyperball_refs(con, fr, leaves)
        watch = read(con, fr.segments, [k for k in leaves if k in refs], max(emit_lo - 20 * 10, 0), emit_hi)
        found += hyperball_drift(con, fr, watch, refs, emit_lo, emit_hi, owner)
    return found


def _state(con, uid: str) -> tuple[int | None, dict]:
    rows = con.execute("SELECT position, extra FROM sync_state WHERE scope = 'detect' AND name = ?", [uid]).fetchall()
    if not rows:
        return None, {}
    extra = rows[0][1]
    return rows[0][0], (json.loads(extra) if isinstance(extra, str) else (extra or {}))


def _fingerprints(con, fr: RunFrame, upto: int) -> list[list[float]]:
    kid = M.key_id(con, TIMESTAMP)
    if kid is None:
        return []
    rows = con.execute(
        f"SELECT step, value FROM metrics WHERE run_pk = ? AND key_id = ? AND step <= ? AND (step % {FINGERPRINT_EVERY} = 0 OR step = ?)"
        " ORDER BY step", [fr.run_pk, kid, upto, upto]).fetchall()
    return [[int(s), float(v)] for s, v in rows]


def _rewound_at(con, fr: RunFrame, fps: list[list[float]]) -> int | None:
    """First step whose stored history differs from what an earlier detection saw (None: same)."""
    if not fps:
        return None
    now = {s: v for s, v in _fingerprints(con, fr, int(fps[-1][0]))}
    prev = fr.own_lo - 1
    for step, ts in fps:
        step = int(step)
        cur = now.get(step)
        if cur is None or not math.isclose(cur, ts, rel_tol=0, abs_tol=1e-3):
            # the rewind lies in (prev, step]: the re-logged steps start after the largest wall gap there
            kid = M.key_id(con, TIMESTAMP)
            rows = con.execute(
                "SELECT step, value - lag(value) OVER (ORDER BY step) AS dt FROM metrics WHERE run_pk = ? AND key_id = ?"
                " AND step BETWEEN ? AND ? ORDER BY dt DESC NULLS LAST LIMIT 1", [fr.run_pk, kid, prev, step]).fetchall()
            return int(rows[0][0]) if rows and rows[0][1] is not None else prev + 1
        prev = step
    return None


def _store(con, fr: RunFrame, found: list[Anomaly], delete_from: int, keep_kinds=("rewind",)) -> int:
    before = con.execute(
        f"SELECT count(*) FROM anomalies WHERE run_pk = ? AND step >= ? AND kind NOT IN ({','.join('?' * len(keep_kinds))})",
        [fr.run_pk, delete_from, *keep_kinds]).fetchall()[0][0]
    con.execute(f"DELETE FROM anomalies WHERE run_pk = ? AND step >= ? AND kind NOT IN ({','.join('?' * len(keep_kinds))})",
                [fr.run_pk, delete_from, *keep_kinds])
    mine = [a for a in found if a.run_pk == fr.run_pk and a.step >= delete_from]
    if mine:
        con.executemany("INSERT INTO anomalies (run_pk, step, metric, kind, score, cause_class, details) VALUES (?, ?, ?, ?, ?, ?, ?)",
                        [a.as_row() for a in mine])
    return max(0, len(mine) - before)


def _save_state(con, fr: RunFrame, last: int, refs: dict) -> None:
    extra = {"fingerprints": _fingerprints(con, fr, last), "refs": {k: list(v) for k, v in refs.items()}}
    con.execute(
        "INSERT INTO sync_state (scope, name, position, extra, updated_at) VALUES ('detect', ?, ?, ?, current_timestamp)"
        " ON CONFLICT (scope, name) DO UPDATE SET position = excluded.position, extra = excluded.extra, updated_at = excluded.updated_at",
        [fr.run["uid"], last, json.dumps(extra)])


def _last_step(con, run_pk: int) -> int | None:
    return con.execute("SELECT max(step) FROM metrics WHERE run_pk = ?", [run_pk]).fetchall()[0][0]


def detect_incremental(con: duckdb.DuckDBPyConnection, run_pk: int) -> int:
    """Score the steps synced since the last detection (plus REVISIT steps); returns new anomalies.

    Call with a writable connection after a sync, ideally inside `store.transaction()`; in
    autocommit mode the watermark is written last, so an interrupted pass is simply redone.
    Idempotent: rerunning finds nothing new.
    If history the last detection saw was rewritten (a W&B rewind), records a `rewind`
    anomaly at the first differing step and re-detects from there.
    """
    con.execute("SET enable_progress_bar = false")  # DuckDB draws one on stdout for long queries
    fr = frame(con, run_pk)
    last = _last_step(con, run_pk)
    position, extra = _state(con, fr.run["uid"])
    new = 0
    if position is None:
        start = fr.own_lo
    else:
        rewound = _rewound_at(con, fr, extra.get("fingerprints") or [])
        if rewound is not None:
            con.execute("DELETE FROM anomalies WHERE run_pk = ? AND step >= ?", [run_pk, rewound])
            con.execute("INSERT INTO anomalies (run_pk, step, metric, kind, score, cause_class, details) VALUES (?, ?, ?, ?, ?, ?, ?)",
                        Anomaly(run_pk, rewound, "_step", "rewind", float(max(position - rewound + 1, 0)), "infrastructure",
                                {"previously_detected_to": position, "rewound_from": rewound}).as_row())
            new += 1
            start = rewound
        else:
            start = position + 1
    if last is None or start > last:
        return new
    emit_lo = max(start - REVISIT, fr.own_lo) if position is not None else fr.own_lo
    refs_saved = {k: (int(v[0]), float(v[1])) for k, v in (extra.get("refs") or {}).items()}
    leaves = hyperball_leaves(con, fr)
    if leaves and (not refs_saved or any(k not in refs_saved for k in leaves)):
        refs_saved = hyperball_refs(con, fr, leaves)
    found = scan(con, fr, emit_lo, None, refs=refs_saved)
    new += _store(con, fr, found, emit_lo)
    _save_state(con, fr, last, refs_saved)
    return new


def full_detect(con: duckdb.DuckDBPyConnection, run_pk: int) -> int:
    """Forget this run's detections and score its whole history; returns anomalies stored."""
    con.execute("SET enable_progress_bar = false")
    con.execute("DELETE FROM anomalies WHERE run_pk = ? AND kind <> 'rewind'", [run_pk])
    con.execute("DELETE FROM sync_state WHERE scope = 'detect' AND name = (SELECT uid FROM runs WHERE run_pk = ?)", [run_pk])
    fr = frame(con, run_pk)
    leaves = hyperball_leaves(con, fr)
    refs = hyperball_refs(con, fr, leaves) if leaves else {}
    found = scan(con, fr, fr.own_lo, None, refs=refs)
    n = _store(con, fr, found, fr.own_lo)
    last = _last_step(con, run_pk)
    if last is not None:
        _save_state(con, fr, last, refs)
    return n


def stored(con: duckdb.DuckDBPyConnection, target, lo: int | None = None, hi: int | None = None) -> list[dict[str, Any]]:
    """Stored anomalies of a target (each run's within its lineage segment), by step."""
    out = []
    for run, (pk, slo, shi) in zip(target.runs, target.segments):
        sql = "SELECT step, metric, kind, score, cause_class, details FROM anomalies WHERE run_pk = ?"
        params: list[Any] = [pk]
        for cond, val in (("step >= ?", slo), ("step < ?", shi), ("step >= ?", lo), ("step <= ?", hi)):
            if val is not None:
                sql += f" AND {cond}"
                params.append(val)
        for step, metric, kind, score, cause, details in con.execute(sql, params).fetchall():
            out.append({"run": run["run_id"], "run_pk": pk, "step": int(step), "metric": metric, "kind": kind,
                        "score": score, "cause_class": cause,
                        "details": json.loads(details) if isinstance(details, str) else (details or {})})
    return sorted(out, key=lambda a: (a["step"], a["metric"], a["kind"]))
