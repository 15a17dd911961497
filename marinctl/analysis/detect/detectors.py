"""Anomaly detectors over the full-resolution history, never over samples.

W&B's sampled endpoints hide one-step spikes (wandb/wandb#5694, #4295), so every detector reads the
stored history of a run at full resolution — the run's own steps plus, for a fork child,
its parent's steps up to the fork (store/lineage.py) so baselines never start empty. The windowed statistics run in DuckDB (store/rolling.py);
this module decides what counts as anomalous and why.

Detectors and thresholds, each with its source ("Marin's alerts" are the hero-run alert
thresholds in Marin's `.agents/skills/manage-hero-run/SKILL.md`):
- **spike** on log(train/loss) and log(grad/norm/total): robust z = 0.6745·(y − median)/MAD
  over the trailing `SPIKE_WINDOW` = 100 points, the current point excluded (a window that
  contains the spike masks it). Loss spike z > 8, co-spike both z > 6 — the public
  W&B watcher calibrated on six healthy runs (max z 4.5; never both > 6). Work in log space:
  spikes are multiplicative. The modified z-score is Iglewicz & Hoaglin's (SaQC flagMAD).
- **warm-up aware**: nothing before step 200 (the watcher skips < 200; OLMo-core waits for a
  full window) and thresholds ×1.5 until warm-up ends (BLOOM's glitches cluster there but so
  does fast healthy movement); router metrics only after warm-up (Marin: "sudden z-loss or
  router-metric change (after warmup)", `.agents/skills/manage-hero-run/SKILL.md`).
- **sustained_rise**: loss > 1.5 × trend (trailing 200-row median) for ≥ 10 consecutive
  steps (and ≥ 3 logged rows) — Marin's hero runbook alert "> 50% above trend for ~10+ steps"
  (`.agents/skills/manage-hero-run/SKILL.md`). Its cause is read from its shape, as the spike
  events' is (episodes.py): a grad-norm spike in the `PRECURSOR_ROWS` rows before it or inside
  it (robust z > 6 over the 100 rows before) → `optimizer`; a normal grad norm and a loss back
  within `RETURN_RATIO` = 1.1 × trend over the next `RETURN_ROWS` = 5 rows → `data_batch` (a run
  of bad batches: the model was fine, the data was not; PaLM and OLMo 2 saw loss spikes from
  particular batches); neither → `optimizer` at low confidence (it neither came from a
  gradient nor went away). Loss spikes and level shifts inside its window are this excursion.
- **nonfinite**: any NaN/Inf value (Marin: instability = NaN/Inf; grug crashes on them).
- **step_gap**, **resume** (wall-clock gap > max(10× median step time, 10 min) with no step
  gap; the watcher's SLOW rule and Marin's 30-min wedge alert bound it), **fork** (from the
  lineage), **rewind** (history the store saw before was rewritten; see analysis/detect/detection.py).
- **throughput_collapse**: one window per collapse with a frozen baseline (throughput.py):
  Marin's runbook "sustained 20–30% below baseline over several check cadences"; the watcher's
  SLOW rule gives the 30-row median. A shorter or shallower slowdown is a `throughput_dip`,
  with the bar it did not reach in its evidence (explain reports it; no alert fires on it).
- **hyperball_drift**: a MuonH/AdamH matrix norm more than 1% from its first logged value.
  Those optimizers project every step back onto the Frobenius sphere (marin#8435's optimizer
  table; Marin's `experiments/grug/moe_hero_ep/heuristic.py`),
  so their norms hold to ~1e-6 in fp32; 1% is a marinctl choice (no published number).
- **router**: routing-entropy drop (z < −8), drop/overflow fraction rise (z > 8 and
  +0.5 percentage points), router z-loss jump (log z > 8) — DeepSeek-V3's (arXiv 2412.19437)
  and Marin's router metrics (`experiments/grug/moe/model.py`) as instability signals, as
  Marin's alerts name them.
- **param_norm_jump**: robust z > 8 of Δlog‖θ‖ *per step* between watch steps (trailing 50
  watch points) and |Δlog‖θ‖| > 1e-4; classified by exact attribution (attribution.py). A
  delta is divided by the steps it spans, so the first delta after a gap or a restart is
  judged as that many steps of change: it is found only when its per-step rate is itself
  anomalous (otherwise the gap is the explanation, reported as `step_gap`).
- **step_gap** compares the steps between rows with the run's median logging interval: a run
  logging every 10 steps has no gap at every row; a skip of at least two intervals is one.
- **adam_drift**: an Adam-trained (no weight decay) leaf whose norm keeps growing faster than
  it did — a trend test classed by the leaf's role and whether the loss moved (drift.py;
  Marin issue #8818, PR #8833).
- **resume_mismatch**: a fork child's loss against its parent's over the steps both logged
  (resume.py; the runbook's 0.002 during catch-up, 1% after the post-resume warm-up, judged
  over its 200 steps; the episode runs on over the whole overlap while the gap lasts). A
  smaller but clear gap is a `resume_offset`, with the bar it did not reach in its evidence.
- Spike scores become events (episodes.py: one event per cause, level shifts apart, schedule
  changes quiet), logit growth is a trend test (trends.py), NaN/Inf and overflow markers are
  `numerics` (numerics.py). Window findings (WINDOW_KINDS) carry `start`/`end`; every finding
  carries its key's logging interval (`interval`), which incidents.py groups by.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from typing import TYPE_CHECKING

import numpy as np

from marinctl.analysis.detect import drift, episodes, numerics, resume, throughput, trends
from marinctl.analysis.diff import fork_changes
from marinctl.analysis.explain import roles as roles_mod
from marinctl.domain import Anomaly
from marinctl.store import Connection, history
from marinctl.store.metrics import Segment

if TYPE_CHECKING:   # the windowed statistics (and pyarrow under them) load when a detector runs:
    import pyarrow as pa   # explain on settled steps reads stored findings and needs neither


def _rolling():
    from marinctl.store import rolling
    return rolling

LOSS, GRAD, PNORM, CE = "train/loss", "grad/norm/total", "params/norm/total", "train/cross_entropy_loss"
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
RETURN_ROWS, RETURN_RATIO = 5, 1.1   # marinctl: "back to trend at once" for a data_batch excursion
GRAD_BASE_ROWS = 100        # grad-norm rows before an excursion that say what is normal
RESUME_FACTOR, RESUME_MIN_S = 10.0, 600.0
DRIFT_REL = 0.01
NORM_WINDOW = 50            # watch points
NORM_MIN_POINTS = 10
NORM_MIN_DLOG = 1e-4
ROUTER_MIN_RISE = 0.005
LOOKBACK = throughput.TPUT_BASE + throughput.TPUT_RECENT + 70   # steps read before the first step scored
REF_SPAN = 10_000           # steps read first for the hyperball references (their first logged values)
LOOKAHEAD = 200             # steps read after the last one scored: does a spike come back (episodes.py)?

# (key, transform, direction, threshold, MAD floor, kind, cause_class, router metric?)
_SPIKE_KEYS = (
    (LOSS, "log", 1, CO_SPIKE_Z, 1e-4, "spike", None, False),
    (GRAD, "log", 1, CO_SPIKE_Z, 1e-4, "grad_spike", "optimizer", False),
    (ZLOSS, "log", 1, SPIKE_Z, 1e-3, "router_zloss_jump", "moe_routing", True),
    (ENTROPY, "raw", -1, SPIKE_Z, 1e-3, "routing_entropy_drop", "moe_routing", True),
    (DROP, "raw", 1, SPIKE_Z, 1e-4, "drop_fraction_rise", "moe_routing", True),
    (OVERFLOW, "raw", 1, SPIKE_Z, 1e-4, "overflow_rise", "moe_routing", True),
)

# findings over a window (`start`–`end`), one per window: a later pass lengthens them, explain finds
# them from any step inside
WINDOW_KINDS = ("throughput_collapse", "throughput_dip", "adam_drift", "logit_growth", "sustained_rise", "resume_mismatch",
                "resume_offset")

Owner = Callable[[int], int]   # step -> run_pk the finding belongs to (a stitched lineage has several)
Series = tuple[np.ndarray, np.ndarray]


# --- run context the detectors need --------------------------------------------------------------

@dataclass
class RunFrame:
    """One run as detection sees it: its lineage segments, own step range and recipe."""

    run: dict[str, Any]
    segments: list[Segment]
    own_lo: int
    warmup_end: int
    roles: roles_mod.RecipeRoles
    schedule: list[tuple[int, str]] = field(default_factory=list)   # (step, what): changes the schedule announces
    parent_pk: int | None = None     # a fork child's parent in the store (its loss after the fork is compared)
    parent_config: dict[str, Any] | None = None   # its config (what the fork changed)

    @property
    def run_pk(self) -> int:
        return self.run["run_pk"]


def frame(con: Connection, run_pk: int) -> RunFrame:
    """A run as detection reads it: its own steps plus, for a fork child, its parents' up to the fork."""
    from marinctl.store.runs import get_run

    return frame_of(con, get_run(con, run_pk))


def frame_of(con: Connection, run: dict[str, Any]) -> RunFrame:
    from marinctl.analysis.explain.context import schedule_points, warmup_end_step
    from marinctl.store import lineage

    chain = lineage.chain(con, run)
    segs = lineage.segments_for(chain)
    # detection reads the parent only up to the fork; the run itself to its end
    segs[-1] = (segs[-1][0], segs[-1][1], None)
    own_lo = segs[-1][1] or 0
    forked = len(chain) > 1 and run.get("fork_step") is not None
    return RunFrame(run, segs, own_lo, warmup_end_step(run), roles_mod.recipe_roles(run), schedule_points(run),
                    chain[-2]["run_pk"] if forked else None, (chain[-2].get("config") or {}) if forked else None)


def split_keys(con: Connection, data: pa.Table) -> dict[str, Series]:
    """A long (key, step, value) frame as {key: (steps, values)} in step order."""
    return _rolling().by_key(con, data)


def _log_series(cols: dict[str, Series], key: str) -> episodes.KeySeries:
    steps, v = cols.get(key, (np.empty(0, np.int64), np.empty(0)))
    ok = np.isfinite(v) & (v > 0)
    return episodes.KeySeries(steps[ok], np.log(v[ok]))


# --- detectors -------------------------------------------------------------------------------

def spikes(con: Connection, fr: RunFrame, data: pa.Table, emit_lo: int, emit_hi: int | None, owner: Owner,
           overlap: bool = False, cols: dict[str, Series] | None = None) -> list[Anomaly]:
    """Loss and gradient spikes made into events (episodes.py), router-metric jumps."""
    cols = cols if cols is not None else split_keys(con, data)
    loss_s, grad_s = _log_series(cols, LOSS), _log_series(cols, GRAD)
    interval = episodes.interval_of(loss_s.steps)
    margin = (episodes.GROUP_ROWS + episodes.PRECURSOR_ROWS + 1) * interval
    # each key's lowest bar (warm-up aside); loss and grad down to an event's easing tail
    specs = [(k[0], k[1], k[2], episodes.TAIL_Z if k[0] in (LOSS, GRAD) else k[3] * 0.75, k[4]) for k in _SPIKE_KEYS]
    rows = _rolling().robust_z(con, data, specs, SPIKE_WINDOW, MIN_BASELINE, max(emit_lo - margin, 0), emit_hi)
    by_key: dict[str, dict[int, tuple]] = {}
    for key, step, value, base, z in rows:
        by_key.setdefault(key, {})[int(step)] = (value, base, z)

    def bar(step: int, thr: float) -> float:
        return thr * (WARMUP_FACTOR if step < fr.warmup_end else 1.0)

    out = episodes.spike_events(by_key.get(LOSS, {}), by_key.get(GRAD, {}), loss_s, grad_s, bar=bar, co_z=CO_SPIKE_Z,
                                spike_z=SPIKE_Z, window=SPIKE_WINDOW, skip_before=SKIP_BEFORE, loss_key=LOSS, grad_key=GRAD,
                                schedule=fr.schedule, warmup_end=fr.warmup_end, emit_lo=emit_lo, emit_hi=emit_hi,
                                owner=owner, overlap=overlap)
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


def sustained_rise(con: Connection, fr: RunFrame, data: pa.Table, emit_lo, emit_hi, owner: Owner,
                   overlap=False, cols: dict[str, Series] | None = None) -> list[Anomaly]:
    """Loss excursions > RISE_RATIO × trend for RISE_STEPS steps, each classed by its shape."""
    cols = cols if cols is not None else split_keys(con, data)
    rows = _rolling().above_trend(con, data, LOSS, TREND_WINDOW, MIN_BASELINE, RISE_RATIO, SKIP_BEFORE)
    info = {int(s): (v, t) for s, v, t in rows}
    interval = episodes.interval_of(cols.get(LOSS, (np.empty(0, np.int64), None))[0])
    out = []
    for first, last, n in _islands(sorted(info), interval):
        if last - first + interval < RISE_STEPS or n < 3 or not _emit_island(first, last, emit_lo, emit_hi, overlap):
            continue
        ratios = [info[s][0] / info[s][1] for s in info if first <= s <= last]
        trend = info[first][1]
        cause, conf, why = excursion_cause(cols, first, last, trend, fr.warmup_end)
        out.append(Anomaly(owner(first), first, LOSS, "sustained_rise", max(ratios), cause,
                           {"start": first, "end": last, "steps": last - first + interval, "rows": n, "value": info[first][0],
                            "baseline": trend, "max_ratio": max(ratios), "threshold_ratio": RISE_RATIO,
                            "min_steps": RISE_STEPS, "confidence": conf, **why}))
    return out


def excursion_cause(cols: dict[str, Series], first: int, last: int, trend: float,
                    warmup_end: int) -> tuple[str, float, dict[str, Any]]:
    """(cause, confidence, evidence) of a loss excursion over [first, last]: see the module doc."""
    why: dict[str, Any] = {"return_rows": RETURN_ROWS, "return_ratio": RETURN_RATIO}
    gs, gv = cols.get(GRAD, (np.empty(0, np.int64), np.empty(0)))
    ok = np.isfinite(gv) & (gv > 0)
    gs, gy = gs[ok], np.log(gv[ok])
    lead = max(int(np.searchsorted(gs, first)) - episodes.PRECURSOR_ROWS, 0)
    base = gy[max(lead - GRAD_BASE_ROWS, 0):lead]
    grad_z = None
    if len(base) >= MIN_BASELINE:
        med = float(np.median(base))
        mad = max(float(np.median(np.abs(base - med))), 1e-4)
        inside = gy[lead:int(np.searchsorted(gs, last, side="right"))]
        if len(inside):
            k = int(np.argmax(inside))
            grad_z = 0.6745 * (float(inside[k]) - med) / mad
            why.update(grad_z=grad_z, grad_peak_step=int(gs[lead + k]), grad_peak_value=float(np.exp(inside[k])),
                       grad_baseline=float(np.exp(med)))
    bar = CO_SPIKE_Z * (WARMUP_FACTOR if first < warmup_end else 1.0)
    why["grad_moved"] = None if grad_z is None else bool(grad_z > bar)
    if why["grad_moved"]:
        return "optimizer", 0.8, why
    ls, lv = cols.get(LOSS, (np.empty(0, np.int64), np.empty(0)))
    after = lv[int(np.searchsorted(ls, last, side="right")):][:RETURN_ROWS]
    after = after[np.isfinite(after)]
    if len(after) >= min(RETURN_ROWS, 3) and trend:
        why.update(after_ratio=float(np.median(after)) / trend, returned=float(np.median(after)) / trend <= RETURN_RATIO)
        if why["returned"] and why["grad_moved"] is False:
            return "data_batch", 0.75, why
    else:
        why["returned"] = None    # the live edge: not known yet
    return "optimizer", 0.5, why


def slowdowns(con: Connection, fr: RunFrame, data: pa.Table, emit_lo, emit_hi, owner: Owner,
              overlap=False, cols: dict[str, Series] | None = None, carried: dict[str, throughput.Open | None] | None = None,
              ) -> tuple[list[Anomaly], list[Anomaly], dict[str, throughput.Open]]:
    """Slowdowns as windows (throughput.py: collapses and dips): (in range, begun before `emit_lo`
    and still reaching into it, those still under way). Tokens/s and step duration are per-step
    rates, so a logging gap leaves them comparable; the windows count logged rows."""
    cols = cols if cols is not None else split_keys(con, data)
    found, still = throughput.slowdowns(con, data, cols, owner, carried=carried, reaches_end=emit_hi is None)
    inside = [a for a in found if episodes.in_range(a, emit_lo, emit_hi, overlap)]
    before = [a for a in found if not overlap and a.step < emit_lo and a.details["end"] >= emit_lo]
    return inside, before, still


def timing(con: Connection, fr: RunFrame, data: pa.Table, emit_lo, emit_hi, owner: Owner,
           cols: dict[str, Series] | None = None, since: int = 0) -> list[Anomaly]:
    """Step gaps (against the run's median logging interval) and wall-clock gaps (resumes) on the
    run's own steps (from `since`), plus its fork point."""
    cols = cols if cols is not None else split_keys(con, data)
    rows = _rolling().gaps(con, data, TIMESTAMP if TIMESTAMP in cols else LOSS, window=SPIKE_WINDOW,
                        factor=RESUME_FACTOR, min_seconds=RESUME_MIN_S, lo=emit_lo, hi=emit_hi, since=since)
    out: list[Anomaly] = []
    fork_at = (fr.run.get("fork_step") + 1) if fr.run.get("fork_step") is not None else None
    for step, prev, dt, med, med_ds in rows:
        step, prev = int(step), int(prev)
        interval = max(int(round(med_ds or 1)), 1)
        gap = step - prev > 1 and step - prev >= 2 * interval
        if fork_at is not None and abs(step - fork_at) <= interval and not gap:
            continue  # the fork's own wall gap: reported as the fork
        if gap:
            out.append(Anomaly(owner(step), step, "_step", "step_gap", float(step - prev - interval), "infrastructure",
                               {"previous_step": prev, "missing_steps": step - prev - interval, "logging_interval": interval,
                                "missing_rows": (step - prev) // interval - 1, "wall_gap_s": dt}))
        else:
            out.append(Anomaly(owner(step), step, TIMESTAMP, "resume", float(dt / med) if med else float(dt), "infrastructure",
                               {"previous_step": prev, "wall_gap_s": dt, "median_step_s": med, "logging_interval": interval,
                                "threshold_s": max(RESUME_FACTOR * (med or 0), RESUME_MIN_S)}))
    if fork_at is not None and fork_at >= emit_lo and (emit_hi is None or fork_at < emit_hi):
        details = {"fork_parent": fr.run.get("fork_parent"), "fork_step": fr.run.get("fork_step"), "run": fr.run.get("run_id")}
        if fr.parent_config is not None:
            details["config_changes"] = fork_changes(fr.parent_config, fr.run.get("config") or {})
        out.append(Anomaly(fr.run_pk, fork_at, "_lineage", "fork", 1.0, "infrastructure", details))
    return out


def nonfinite(con: Connection, fr: RunFrame, emit_lo, emit_hi, owner: Owner) -> list[Anomaly]:
    return numerics.nonfinite(history.nonfinite(con, fr.segments, emit_lo, emit_hi), owner)


def hyperball_leaves(con: Connection, fr: RunFrame, keys: Sequence[str] | None = None) -> list[str]:
    keys = history.keys_with_prefix(con, "params/norm/", exclude=[PNORM]) if keys is None else \
        [k for k in keys if k.startswith("params/norm/") and k != PNORM]
    return [k for k in keys if fr.roles.role(roles_mod.leaf_path(k)).hyperball]


def hyperball_refs(con: Connection, fr: RunFrame, leaves: Sequence[str]) -> dict[str, tuple[int, float]]:
    """Each hyperball leaf's first logged (step, value) in the lineage: the sphere's radius.
    Only the first REF_SPAN steps are read (a leaf not logged there is, in practice, another
    run's); a lineage that logged none of them there costs one full scan."""
    refs = history.first_values(con, fr.segments, leaves, below=REF_SPAN) or history.first_values(con, fr.segments, leaves)
    return {k: sv for k, sv in refs.items() if sv[1]}


def hyperball_drift(con: Connection, fr: RunFrame, data: pa.Table, refs: dict[str, tuple[int, float]], emit_lo, emit_hi,
                    owner: Owner) -> list[Anomaly]:
    if not refs or not data.num_rows:
        return []
    rows = _rolling().crossings(con, data, {k: v for k, (_, v) in refs.items()}, DRIFT_REL, emit_lo, emit_hi)
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


def param_norm_jumps(con: Connection, fr: RunFrame, data: pa.Table, emit_lo, emit_hi, owner: Owner,
                     attribute: bool = True, cols: dict[str, Series] | None = None) -> list[Anomaly]:
    from marinctl.analysis.explain import attribution as att_mod
    rows = _rolling().log_change_z(con, data, PNORM, window=NORM_WINDOW, min_points=NORM_MIN_POINTS,
                                min_change=NORM_MIN_DLOG, bar=SPIKE_Z, lo=max(emit_lo, SKIP_BEFORE), hi=emit_hi, per_step=True)
    steps = (cols if cols is not None else split_keys(con, data)).get(PNORM, (np.empty(0, np.int64), None))[0]
    usual = episodes.interval_of(steps)
    out = []
    for step, prev, value, d, med, z in rows:
        step, prev = int(step), int(prev)
        details = {"value": value, "previous_step": prev, "previous_value": value / math.exp(d), "dlog": d,
                   "steps_spanned": step - prev, "dlog_per_step": d / (step - prev), "baseline_dlog_per_step": med,
                   "baseline_dlog": med * usual, "z": z, "window": NORM_WINDOW, "spans_gap": step - prev >= 2 * usual}
        cause, conf = "none", 0.3
        if attribute:
            att = att_mod.attribute(con, fr.segments, fr.roles, prev, step)
            if att is not None:
                cause, conf, verdict = classify_norm_change(att, fr.roles, step - prev)
                details.update(verdict=verdict, top_leaves=[{"name": l["name"], "share": l["share"]} for l in att.top_leaves(5)],
                               **att_mod.evidence(att))
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


# --- logit growth ------------------------------------------------------------------------------

def lm_head_keys(keys: Sequence[str]) -> list[str]:
    """`params/norm/<leaf>` keys of the output layer (several leaves: their root-sum-of-squares)."""
    return [k for k in keys if k.startswith("params/norm/") and k != PNORM
            and roles_mod.module_of(roles_mod.leaf_path(k)) == "lm_head"]


def logit_signals(cols: dict[str, Series], head_keys: Sequence[str], logit_keys: Sequence[str]) -> list[trends.Signal]:
    """lm_head norm, z-loss (a logged key, else `train/loss − train/cross_entropy_loss`), max logits."""
    out = []
    heads = [cols[k] for k in head_keys if k in cols]
    if heads:
        steps = heads[0][0]
        if all(len(h[0]) == len(steps) and np.array_equal(h[0], steps) for h in heads):
            norm = np.sqrt(sum(h[1] ** 2 for h in heads))
            out.append(trends.signal("lm_head", head_keys[0] if len(heads) == 1 else "lm_head leaves", (steps, norm)))
    zkey = next((k for k in trends.Z_LOSS_KEYS if k in cols), None)
    if zkey is not None:
        out.append(trends.signal("z_loss", zkey, cols[zkey]))
    elif LOSS in cols and CE in cols:
        (ls, lv), (cs, cv) = cols[LOSS], cols[CE]
        both, li, ci = np.intersect1d(ls, cs, assume_unique=True, return_indices=True)
        with np.errstate(invalid="ignore"):
            gap = lv[li] - cv[ci]
        out.append(trends.signal("z_loss", f"{LOSS} − {CE}", (both, gap)))
    for k in logit_keys:
        if k in cols:
            out.append(trends.signal("max_logit", k, cols[k]))
    return [s for s in out if s is not None]


def logit_growth(fr: RunFrame, cols: dict[str, Series], head_keys, logit_keys, owner: Owner) -> list[Anomaly]:
    loss = cols.get(LOSS)
    if loss is None or not len(loss[0]):
        return []
    return trends.logit_growth(trends.signal("loss", LOSS, loss), logit_signals(cols, head_keys, logit_keys),
                               start_after=max(SKIP_BEFORE, fr.warmup_end), last_step=int(loss[0][-1]), owner=owner,
                               metric=LOSS)


def _absorbed(a: Anomaly, episode: Anomaly) -> bool:
    """Whether a finding is part of a logit-growth episode (inside its window and about the output
    layer — lm_head drift, an lm_head-dominated norm jump — or the loss rising with it), or of a
    sustained loss excursion (a loss spike or level shift inside it)."""
    d = episode.details
    if episode.kind == "sustained_rise":
        every = d.get("interval") or 1
        return (a.metric == LOSS and a.kind in ("spike", "level_shift")
                and d["start"] - episodes.PRECURSOR_ROWS * every <= a.step <= d["end"])
    if not (d["start"] - 10 <= a.step <= d["end"]):
        return False
    if a.kind == "hyperball_drift":
        return all(roles_mod.module_of(roles_mod.leaf_path(l["name"])) == "lm_head" for l in a.details.get("leaves", []))
    if a.kind == "param_norm_jump":
        mods = a.details.get("by_module") or []
        return bool(mods) and mods[0]["module"] == "lm_head"
    return a.kind == "sustained_rise"


def hand_over(found: list[Anomaly]) -> list[Anomaly]:
    """Findings a logit-growth episode or a sustained excursion explains are listed in its
    evidence, not reported apart."""
    episodes_ = [a for a in found if a.kind in ("logit_growth", "sustained_rise")]
    out = []
    for a in found:
        owner_ep = next((e for e in episodes_ if a is not e and _absorbed(a, e)), None)
        if owner_ep is None:
            out.append(a)
        else:
            owner_ep.details.setdefault("absorbed", []).append({"kind": a.kind, "metric": a.metric, "step": a.step})
    return out


# --- every detector --------------------------------------------------------------------------

def scan(con: Connection, fr: RunFrame, emit_lo: int, emit_hi: int | None = None, *,
         overlap: bool = False, refs: dict[str, tuple[int, float]] | None = None, owner: Owner | None = None,
         trends_out: list[Anomaly] | None = None, carry: dict[str, Any] | None = None,
         carry_out: dict[str, Any] | None = None, extended_out: list[Anomaly] | None = None) -> list[Anomaly]:
    """Every detector over steps [emit_lo, emit_hi), reading LOOKBACK steps of history before.
    `trends_out` collects every logit-growth episode seen in what was read, in range or not;
    `extended_out` the window findings begun before `emit_lo` that still reach into it (the
    pass stores them again, longer); `carry` / `carry_out` the windows still under way at the
    last row (a throughput collapse and its frozen baseline), from and for the next pass."""
    owner = owner or (lambda step: fr.run_pk)
    read_lo = max(emit_lo - LOOKBACK, 0)
    read_hi = None if emit_hi is None else emit_hi + LOOKAHEAD
    keys = history.keys_with_prefix(con, "")
    heads = lm_head_keys(keys)
    extra = [*trends.Z_LOSS_KEYS, *trends.max_logit_keys(keys), *numerics.marker_keys(keys), *heads]
    dense = history.frame(con, fr.segments, [LOSS, GRAD, TPS, DURATION, TIMESTAMP, ENTROPY, ZLOSS, DROP, OVERFLOW, PNORM, CE,
                                             *[k for k in extra if k in set(keys)]], read_lo, read_hi)
    cols = split_keys(con, dense)
    extended: list[Anomaly] = []
    found = spikes(con, fr, dense, emit_lo, emit_hi, owner, overlap, cols)
    found += sustained_rise(con, fr, dense, emit_lo, emit_hi, owner, overlap, cols)
    inside, before, still = slowdowns(con, fr, dense, emit_lo, emit_hi, owner, overlap, cols,
                                      {tier: throughput.Open.of((carry or {}).get(tier)) for tier in throughput.BARS})
    found += inside
    extended += before
    if carry_out is not None:
        carry_out.update({tier: o.as_memory() for tier, o in still.items()})
    own_lo = fr.own_lo if not overlap else 0
    found += timing(con, fr, dense, max(emit_lo, own_lo), emit_hi, owner, cols, since=own_lo)
    found += nonfinite(con, fr, emit_lo, emit_hi, owner)
    found += numerics.overflow({k: cols[k] for k in numerics.marker_keys(list(cols))}, emit_lo, emit_hi, owner)
    found += param_norm_jumps(con, fr, dense, emit_lo, emit_hi, owner, cols=cols)
    leaves = hyperball_leaves(con, fr, keys)
    if leaves:
        refs = refs if refs is not None else hyperball_refs(con, fr, leaves)
        watch = history.frame(con, fr.segments, [k for k in leaves if k in refs], max(emit_lo - 20 * 10, 0), emit_hi)
        found += hyperball_drift(con, fr, watch, refs, emit_lo, emit_hi, owner)
    for a in adam_drifts(con, fr, keys, cols, emit_lo, emit_hi, owner) + resume_mismatch(con, fr, emit_lo, emit_hi, owner):
        if episodes.in_range(a, emit_lo, emit_hi, overlap):
            found.append(a)
        elif not overlap and a.step < emit_lo <= a.details["end"]:
            extended.append(a)
    growth = logit_growth(fr, cols, heads, trends.max_logit_keys(keys), owner)
    if trends_out is not None:
        trends_out.extend(growth)
    kept = hand_over(stamp_intervals(found + growth, cols))
    kept = [a for a in kept if a.kind != "logit_growth" or episodes.in_range(a, emit_lo, emit_hi, overlap)]
    if extended_out is not None:
        extended_out.extend(stamp_intervals(extended, cols))
    return kept


def adam_drifts(con: Connection, fr: RunFrame, keys: Sequence[str], cols: dict[str, Series], emit_lo: int,
                emit_hi: int | None, owner: Owner) -> list[Anomaly]:
    """Adam-group norm drift (drift.py) over what a pass scores, reading the windows it needs before."""
    leaves = drift.adam_leaves(keys, fr.roles)
    if not leaves:
        return []
    block = drift.block_of(cols[PNORM][0]) if PNORM in cols else drift.BLOCK_STEPS
    lo = max(emit_lo - drift.LOOKBACK_BLOCKS * block, 0)
    watch = split_keys(con, history.frame(con, fr.segments, [*leaves, LOSS], lo, None if emit_hi is None else emit_hi + block))
    return drift.adam_drift(watch, leaves, fr.roles, start_after=max(SKIP_BEFORE, fr.warmup_end), loss=watch.get(LOSS),
                            owner=owner)


def resume_mismatch(con: Connection, fr: RunFrame, emit_lo: int, emit_hi: int | None, owner: Owner) -> list[Anomaly]:
    """A fork child's loss against its parent's over the steps both logged after the fork (resume.py):
    the runbook's span decides, the whole overlap is the episode's extent."""
    fork = fr.run.get("fork_step")
    if fr.parent_pk is None or fork is None:
        return []
    lo = int(fork) + 1
    if emit_hi is not None and lo >= emit_hi:
        return []
    parent = split_keys(con, history.frame(con, [(fr.parent_pk, lo, None)], [LOSS], lo, None)).get(LOSS)
    if parent is None or not len(parent[0]) or int(parent[0][-1]) < emit_lo:
        return []        # the overlap ends before the steps scored: nothing of it reaches them
    hi = int(parent[0][-1]) + 1
    child = split_keys(con, history.frame(con, [(fr.run_pk, lo, hi)], [LOSS], lo, hi)).get(LOSS)
    if child is None:
        return []
    found = resume.compare(child, parent, fork_step=int(fork), parent_run=fr.run.get("fork_parent"), owner=owner)
    return [found] if found is not None else []


def stamp_intervals(found: list[Anomaly], cols: dict[str, Series]) -> list[Anomaly]:
    """Each detection's logging interval (`details["interval"]`): its key's usual distance between
    logged rows (a watch leaf: the total norm's; else the loss's). Incidents group by it (incidents.py)."""
    usual: dict[str, int] = {}

    def of(key: str) -> int:
        if key not in usual:
            steps = cols.get(key, (None,))[0]
            usual[key] = episodes.interval_of(steps) if steps is not None else of(LOSS) if key != LOSS else 1
        return usual[key]

    for a in found:
        if "interval" not in a.details:
            key = a.metric if a.metric in cols else PNORM if a.metric.startswith("params/norm/") and PNORM in cols else LOSS
            a.details["interval"] = of(key)
    return found
