"""What `watch` and `plot` draw, computed headless: panels, envelopes, axes, header figures.

The TUI is a thin painter over this module, so every number on screen can be tested
without a terminal. Curves are per-bucket min/max envelopes from `store.metrics.downsample`
(never samples: a one-step spike stays visible at every zoom), smoothed over the bucket
means the way W&B smooths (EMA, optionally debiased), and mapped onto one of four x axes.
Every function takes an open connection and returns plain data; callers keep connections
short (DuckDB allows one writing process, and `sync` may be writing in another terminal).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Sequence

import duckdb
import numpy as np

from marinctl.store import metrics as M
from marinctl.store.lineage import Target

DEFAULT_PANELS = (
    "train/loss", "eval/paloma/macro_loss", "grad/norm/total", "params/norm/total",
    "throughput/mfu", "optim/learning_rate", "moe/drop_fraction", "train/router/routing_entropy_mean",
)
HERO_TOTAL_STEPS = 390_251
HERO_TOKENS_PER_STEP = 46_137_344
HERO_FLOPS_BUDGET = 2.7e24
X_MODES = ("step", "tokens", "fraction", "wall")
SMOOTHINGS = ("none", "ema", "debiased")
STALE_AFTER_S = 15 * 60
RUNG_ALIASES = ("rung1", "rung2", "rung3", "rung4")


# --- smoothing -------------------------------------------------------------------------------

def smooth(values: np.ndarray, mode: str, weight: float = 0.6) -> np.ndarray:
    """W&B-style smoothing of bucket means: plain EMA, or EMA divided by (1 - w^n) (debiased).

    Non-finite points are skipped (they keep the previous smoothed value) so one NaN
    does not blank the rest of the line.
    """
    v = np.asarray(values, dtype=np.float64)
    if mode == "none" or len(v) == 0:
        return v.copy()
    out = np.empty_like(v)
    acc, n, prev = 0.0, 0, math.nan
    for i, x in enumerate(v):
        if not math.isfinite(x):
            out[i] = prev
            continue
        if mode == "debiased":
            acc = acc * weight + (1 - weight) * x
            n += 1
            prev = acc / (1 - weight ** n)
        else:
            acc = x if n == 0 else acc * weight + (1 - weight) * x
            n += 1
            prev = acc
        out[i] = prev
    return out


# --- schedule and x axes ---------------------------------------------------------------------

@dataclass
class Schedule:
    """How long the run is meant to be, so steps can become tokens or a fraction."""

    total_steps: int | None
    tokens_per_step: int | None
    flops_budget: float | None = None
    is_hero: bool = False


def schedule_of(target: Target) -> Schedule:
    cfg = target.leaf.get("config") or {}
    trainer = cfg.get("trainer") if isinstance(cfg.get("trainer"), dict) else {}
    is_hero = target.name == "hero"
    total = cfg.get("num_train_steps") or trainer.get("num_train_steps")
    tps = cfg.get("tokens_per_step")
    rung = _rung_of(target)
    if rung is not None:
        total = total or rung["steps"]
        tps = tps or rung["tokens_per_step"]
    if is_hero:
        total, tps = total or HERO_TOTAL_STEPS, tps or HERO_TOKENS_PER_STEP
    budget = HERO_FLOPS_BUDGET if is_hero else (float(rung["flops"]) if rung else None)
    return Schedule(int(total) if total else None, int(tps) if tps else None, budget, is_hero)


def _rung_of(target: Target) -> dict[str, Any] | None:
    from marinctl import rungs

    text = f"{target.leaf.get('run_id')} {target.leaf.get('name') or ''}"
    for r in rungs.rungs():
        if r["rung"] != "hero" and re.search(rf"(?<!\d){r['name']}(?!\d)", text):
            return r
    return None


@dataclass
class Axis:
    mode: str
    label: str
    scale: float = 1.0          # x = step * scale (step, tokens, fraction)
    wall_steps: np.ndarray | None = None   # wall mode: hours since start, interpolated over steps
    wall_hours: np.ndarray | None = None

    def x(self, steps) -> np.ndarray:
        s = np.asarray(steps, dtype=np.float64)
        if self.mode == "wall" and self.wall_steps is not None and len(self.wall_steps):
            return np.interp(s, self.wall_steps, self.wall_hours)
        return s * self.scale

    def step_at(self, x: float) -> float:
        if self.mode == "wall" and self.wall_steps is not None and len(self.wall_steps):
            return float(np.interp(x, self.wall_hours, self.wall_steps))
        return x / self.scale if self.scale else x


def axis_for(con: duckdb.DuckDBPyConnection, target: Target, mode: str, lo: int, hi: int,
             sched: Schedule | None = None) -> Axis:
    """The x axis; falls back to steps when the run lacks what the mode needs (labelled so)."""
    sched = sched or schedule_of(target)
    if mode == "tokens" and sched.tokens_per_step:
        return Axis("tokens", "tokens", float(sched.tokens_per_step))
    if mode == "fraction" and sched.total_steps:
        return Axis("fraction", f"fraction of {sched.total_steps:,} steps", 1.0 / sched.total_steps)
    if mode == "wall":
        env = M.downsample(con, target.segments, "_timestamp", lo, hi + 1, 512)
        ok = np.isfinite(env.first)
        if ok.sum() >= 1:
            t0_row = con.execute(
                "SELECT min(value) FROM metrics WHERE key_id = (SELECT key_id FROM metric_keys WHERE key = '_timestamp')"
                f" AND run_pk IN ({','.join('?' * len(target.run_pks))})", target.run_pks).fetchall()
            t0 = t0_row[0][0] if t0_row and t0_row[0][0] is not None else float(env.first[ok][0])
            return Axis("wall", "hours since start", 1.0, env.step_lo[ok], (env.first[ok] - t0) / 3600.0)
    return Axis("step", "step" if mode == "step" else f"step ({mode} unavailable)", 1.0)


# --- panels ----------------------------------------------------------------------------------

@dataclass
class Marker:
    step: int
    kind: str            # 'anomaly' | 'event'
    label: str
    value: float | None = None


@dataclass
class Overlay:
    name: str
    x: np.ndarray
    y: np.ndarray


@dataclass
class Band:
    x: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    label: str = "ladder prediction"


@dataclass
class PanelData:
    """One chart's worth: envelope, smoothed line, markers, overlays, all on the panel's x axis."""

    key: str
    steps: np.ndarray        # bucket centre steps
    x: np.ndarray
    vmin: np.ndarray
    vmax: np.ndarray
    line: np.ndarray
    axis_label: str
    raw: np.ndarray = field(default_factory=lambda: np.empty(0))   # bucket means before smoothing
    markers: list[Marker] = field(default_factory=list)
    overlays: list[Overlay] = field(default_factory=list)
    band: Band | None = None
    nonfinite: int = 0

    def __len__(self) -> int:
        return len(self.steps)

    def bucket_at(self, step: float) -> int | None:
        if not len(self.steps):
            return None
        i = int(np.clip(np.searchsorted(self.steps, step), 0, len(self.steps) - 1))
        if i > 0 and abs(self.steps[i - 1] - step) < abs(self.steps[i] - step):
            i -= 1
        return i

    def value_at(self, step: float) -> tuple[float, float, float] | None:
        """(smoothed, min, max) of the bucket nearest `step`."""
        i = self.bucket_at(step)
        return None if i is None else (float(self.line[i]), float(self.vmin[i]), float(self.vmax[i]))

    def readout(self, step: float) -> str:
        """`name mean [min…max]` of the bucket nearest `step` — the cursor readout."""
        i = self.bucket_at(step)
        if i is None:
            return ""
        mean = self.raw[i] if len(self.raw) == len(self.steps) else self.line[i]
        if self.vmin[i] == self.vmax[i] or not np.isfinite(self.vmin[i]):
            return f"{short_key(self.key)} {mean:.4g}"
        return f"{short_key(self.key)} {mean:.4g} [{self.vmin[i]:.4g}…{self.vmax[i]:.4g}]"


def short_key(key: str) -> str:
    parts = key.split("/")
    return key if len(parts) <= 2 else f"{parts[0]}/{parts[-1]}"


def panel_keys(con: duckdb.DuckDBPyConnection, target: Target, pattern: str | None = None,
               all_keys: Sequence[str] | None = None) -> list[str]:
    """Panels to show: the default ones that have data, or every key matching the regex."""
    if pattern:
        rx = re.compile(pattern)
        keys = list(all_keys) if all_keys is not None else M.run_keys(con, target.run_pks)
        return [k for k in keys if rx.search(k) and not k.startswith("_")]
    ids = M.key_ids(con, DEFAULT_PANELS)
    if not ids:
        return []
    marks = ",".join("?" * len(target.run_pks))
    present = set()
    for key, kid in ids.items():     # LIMIT 1 probes: zone maps make each a few ms even at hero scale
        if con.execute(f"SELECT 1 FROM metrics WHERE key_id = ? AND run_pk IN ({marks}) LIMIT 1",
                       [kid, *target.run_pks]).fetchall():
            present.add(key)
    return [k for k in DEFAULT_PANELS if k in present]


def has_data(con: duckdb.DuckDBPyConnection, target: Target, key: str) -> bool:
    kid = M.key_id(con, key)
    if kid is None:
        return False
    marks = ",".join("?" * len(target.run_pks))
    return bool(con.execute(f"SELECT 1 FROM metrics WHERE key_id = ? AND run_pk IN ({marks}) LIMIT 1",
                            [kid, *target.run_pks]).fetchall())


def key_step_range(con: duckdb.DuckDBPyConnection, target: Target, keys: Sequence[str]) -> tuple[int | None, int | None]:
    """First and last step of these keys over the target (key-filtered, so zone maps skip the rest)."""
    ids = list(M.key_ids(con, keys).values())
    if not ids:
        return None, None
    where, params = M.segment_filter(target.segments)
    row = con.execute(f"SELECT min(step), max(step) FROM metrics WHERE key_id IN ({','.join('?' * len(ids))}) AND {where}",
                      [*ids, *params]).fetchall()[0]
    return row[0], row[1]


def envelopes(con: duckdb.DuckDBPyConnection, target: Target, keys: Sequence[str], lo: int, hi: int,
              buckets: int) -> dict[str, M.Envelope]:
    """Min/max envelopes of several keys over steps [lo, hi] (inclusive) in one scan."""
    return M.downsample_many(con, target.segments, keys, lo, hi + 1, buckets)


def load_panel(con: duckdb.DuckDBPyConnection, target: Target, key: str, lo: int, hi: int, *,
               buckets: int = 200, smoothing: str = "ema", weight: float = 0.6,
               axis: Axis | None = None, markers: Sequence[Marker] = (), env: M.Envelope | None = None) -> PanelData:
    """Envelope of `key` over steps [lo, hi] in at most `buckets` buckets, on `axis`."""
    axis = axis or Axis("step", "step")
    if env is None:
        env = M.downsample(con, target.segments, key, lo, hi + 1, buckets)
    steps = (env.step_lo + env.step_hi) / 2.0 if len(env) else np.empty(0)
    mine = []
    for m in markers:
        if lo <= m.step <= hi and (m.kind == "event" or m.label.split(" ", 1)[0] == key):
            mine.append(m)
    return PanelData(key=key, steps=steps, x=axis.x(steps), vmin=env.vmin, vmax=env.vmax,
                     line=smooth(env.mean, smoothing, weight), axis_label=axis.label, markers=mine, raw=env.mean,
                     nonfinite=int(env.nonfinite.sum()) if len(env) else 0)


def markers_for(con: duckdb.DuckDBPyConnection, target: Target, lo: int, hi: int) -> list[Marker]:
    """Anomalies (label starts with the metric) and GitHub events aligned to the target's runs."""
    out: list[Marker] = []
    marks = ",".join("?" * len(target.run_pks))
    for step, metric, kind, score in con.execute(
            f"SELECT step, metric, kind, score FROM anomalies WHERE run_pk IN ({marks}) AND step BETWEEN ? AND ?"
            " ORDER BY step", [*target.run_pks, lo, hi]).fetchall():
        out.append(Marker(int(step), "anomaly", f"{metric} {kind}", score))
    uids = [r["uid"] for r in target.runs]
    for step, title, kind in con.execute(
            f"SELECT step, title, kind FROM events WHERE run_uid IN ({','.join('?' * len(uids))})"
            " AND step BETWEEN ? AND ? ORDER BY step", [*uids, lo, hi]).fetchall():
        out.append(Marker(int(step), "event", f"{kind}: {title or ''}"))
    return out


# --- overlays --------------------------------------------------------------------------------

def rung_overlays(con: duckdb.DuckDBPyConnection, key: str, buckets: int = 200,
                  exclude_uid: str | None = None) -> list[Overlay]:
    """Each stored ladder rung (and repro run) as a line on a fraction-of-schedule axis."""
    from marinctl import rungs
    from marinctl.store.lineage import single
    from marinctl.store.runs import find_rung_runs

    out = []
    seen = set()
    for r in rungs.rungs():
        if r["rung"] == "hero":
            continue
        for run in find_rung_runs(con, r["rung"]) + repro_runs(con, r["name"]):
            if run["uid"] in seen or run["uid"] == exclude_uid:
                continue
            seen.add(run["uid"])
            t = single(run)
            last = run.get("last_step")
            if last is None:
                continue
            total = schedule_of(t).total_steps or r["steps"]
            env = M.downsample(con, t.segments, key, 0, int(last) + 1, buckets)
            if not len(env):
                continue
            steps = (env.step_lo + env.step_hi) / 2.0
            tag = "repro " if run["source"] == "repro" else ""
            out.append(Overlay(f"{tag}{r['name']}", steps / total, env.mean))
    return out


def repro_runs(con: duckdb.DuckDBPyConnection, width: str) -> list[dict[str, Any]]:
    from marinctl.store.runs import RUN_COLUMNS, row_to_dict

    cur = con.execute(f"SELECT {RUN_COLUMNS} FROM runs WHERE source = 'repro' AND (run_id LIKE ? OR name LIKE ?)"
                      " ORDER BY created_at NULLS FIRST", [f"%{width}%", f"%{width}%"])
    return [row_to_dict(r, cur.description) for r in cur.fetchall()]


def predicted_band(con: duckdb.DuckDBPyConnection, key: str, axis: Axis) -> Band | None:
    """The ladder's predicted band over the hero, when the ladder module provides one."""
    try:
        from marinctl.analysis.ladder import predicted_band as ladder_band
    except ImportError:
        return None
    try:
        got = ladder_band(con, key)
    except Exception:  # noqa: BLE001 — an optional overlay never breaks the view
        return None
    if got is None:
        return None
    get = (lambda k: got.get(k)) if isinstance(got, dict) else (lambda k: getattr(got, k, None))
    steps, lo, hi = get("steps"), get("lo"), get("hi")
    if steps is None and isinstance(got, (tuple, list)) and len(got) == 3:
        steps, lo, hi = got
    if steps is None or lo is None or hi is None:
        return None
    steps = np.asarray(steps, dtype=np.float64)
    return Band(axis.x(steps), np.asarray(lo, dtype=np.float64), np.asarray(hi, dtype=np.float64))


# --- header ----------------------------------------------------------------------------------

@dataclass
class HeaderStats:
    run: str
    state: str | None
    liveness: str
    step: int | None
    total_steps: int | None
    tokens: float | None
    flops: float | None
    flops_budget: float | None
    flops_estimated: bool
    tokens_per_s: float | None
    mfu: float | None
    eta_s: float | None
    phase: str | None

    def cells(self) -> list[tuple[str, str]]:
        """(label, text) pairs in display order: progress first, then rates and the data phase."""
        step = "—" if self.step is None else f"{self.step:,}"
        if self.total_steps:
            step += f" / {self.total_steps:,} ({(self.step or 0) / self.total_steps:.1%})"
        flops = "—"
        if self.flops is not None:
            flops = ("≈" if self.flops_estimated else "") + sci(self.flops)
            if self.flops_budget:
                flops += f" of {sci(self.flops_budget)} ({self.flops / self.flops_budget:.1%})"
        return [
            ("run", self.run), ("state", f"{self.liveness}" + (f" ({self.state})" if self.state and self.state != self.liveness else "")),
            ("step", step), ("tokens", human(self.tokens)), ("FLOPs", flops),
            ("ETA", duration(self.eta_s)), ("tok/s", human(self.tokens_per_s)),
            ("MFU", "—" if self.mfu is None else f"{self.mfu:.1f}%"), ("data", self.phase or "—"),
        ]


def last_values(con: duckdb.DuckDBPyConnection, target: Target, keys: Sequence[str],
                since: int | None = None) -> dict[str, tuple[int, float]]:
    """{key: (step, value)} of the newest finite value of each key (at or after `since`, if given)."""
    if not keys:
        return {}
    ids = M.key_ids(con, keys)
    if not ids:
        return {}
    names = {v: k for k, v in ids.items()}
    where, params = M.segment_filter(target.segments)
    rows = con.execute(
        f"SELECT key_id, max(step), arg_max(value, step) FROM metrics WHERE key_id IN ({','.join('?' * len(ids))})"
        f" AND isfinite(value) AND step >= ? AND {where} GROUP BY key_id",
        [*ids.values(), since if since is not None else -(2 ** 62), *params]).fetchall()
    return {names[k]: (int(s), float(v)) for k, s, v in rows}


def liveness(state: str | None, heartbeat_at: datetime | None, now: datetime | None = None) -> str:
    """live / stale / crashed / finished from W&B state and heartbeat age."""
    s = (state or "").lower()
    if s in ("crashed", "failed", "killed"):
        return "crashed"
    if s == "running":
        now = now or datetime.now(timezone.utc)
        if heartbeat_at is None:
            return "stale"
        hb = heartbeat_at if heartbeat_at.tzinfo else heartbeat_at.replace(tzinfo=timezone.utc)
        return "live" if (now - hb).total_seconds() < STALE_AFTER_S else "stale"
    return s or "unknown"


def header_stats(con: duckdb.DuckDBPyConnection, target: Target, now: datetime | None = None,
                 last_step: int | None = None) -> HeaderStats:
    """Header figures; `last_step` (when known) limits the scan to the newest few thousand steps."""
    sched = schedule_of(target)
    keys = ["throughput/total_tokens", "throughput/total_gflops", "throughput/tokens_per_second",
            "throughput/mfu", "throughput/duration", "_timestamp"]
    since = last_step - 5000 if last_step is not None else None
    last = last_values(con, target, keys, since)
    if since is not None and not last:
        last = last_values(con, target, keys)
    step = max((s for s, _ in last.values()), default=None)
    if step is None:
        step = target.leaf.get("last_step")
    tokens = last["throughput/total_tokens"][1] if "throughput/total_tokens" in last else (
        step * sched.tokens_per_step if step is not None and sched.tokens_per_step else None)
    flops, estimated = None, False
    if "throughput/total_gflops" in last:
        flops = last["throughput/total_gflops"][1] * 1e9
    elif sched.flops_budget and sched.total_steps and step is not None:
        flops, estimated = sched.flops_budget * step / sched.total_steps, True
    live = liveness(target.leaf.get("state"), target.leaf.get("heartbeat_at"), now)
    eta = None
    if live in ("live", "stale") and sched.total_steps and step is not None:
        per_step = _seconds_per_step(con, target, step)
        if per_step:
            eta = max(0, sched.total_steps - step) * per_step
    phase = None
    if step is not None and sched.total_steps:
        phase = data_phase(step, sched.total_steps)
    return HeaderStats(
        run=target.name if not target.stitched else f"{target.name} ({target.leaf['run_id']})",
        state=target.leaf.get("state"), liveness=live, step=step, total_steps=sched.total_steps,
        tokens=tokens, flops=flops, flops_budget=sched.flops_budget, flops_estimated=estimated,
        tokens_per_s=last.get("throughput/tokens_per_second", (0, None))[1],
        mfu=last.get("throughput/mfu", (0, None))[1], eta_s=eta, phase=phase)


def _seconds_per_step(con: duckdb.DuckDBPyConnection, target: Target, step: int, window: int = 200) -> float | None:
    s, v = M.series(con, target.segments, "_timestamp", lo=max(0, step - window))
    if len(s) >= 2:
        # Median of per-step pace: a restart or fork gap in the window must not inflate the ETA.
        ds, dv = np.diff(s), np.diff(v)
        ok = (ds > 0) & np.isfinite(dv)
        if ok.any():
            return float(np.median(dv[ok] / ds[ok]))
    s, v = M.series(con, target.segments, "throughput/duration", lo=max(0, step - window))
    ok = np.isfinite(v)
    return float(np.mean(v[ok])) if ok.any() else None


def data_phase(step: int, total_steps: int) -> str:
    """Phase name at `step` on the published Harrier schedule (rungs switch at the same fractions)."""
    from marinctl.analysis import mix

    total = None if total_steps == mix.hero_total_steps() else total_steps
    for i, (name, start, end) in enumerate(mix.schedule(total)):
        if start <= step and (end is None or step <= end):
            return f"{i + 1}:{name}"
    return "past schedule"


# --- sidebar ---------------------------------------------------------------------------------

@dataclass
class SidebarEntry:
    ref: str            # what resolve_target accepts
    label: str
    kind: str           # 'hero' | 'segment' | 'rung' | 'repro' | 'local' | 'run'
    liveness: str
    last_step: int | None


def sidebar_entries(con: duckdb.DuckDBPyConnection, now: datetime | None = None) -> list[SidebarEntry]:
    """Hero lineage first (stitched, with its segments), ladder rungs, then local/repro/other runs."""
    from marinctl import rungs
    from marinctl.store import lineage
    from marinctl.store.runs import find_rung_runs, list_runs

    out: list[SidebarEntry] = []
    used: set[str] = set()
    leaf = lineage.hero_leaf(con)
    if leaf is not None:
        t = lineage.stitched_target("hero", leaf, con)
        out.append(SidebarEntry("hero", "hero (stitched)", "hero", liveness(leaf["state"], leaf["heartbeat_at"], now),
                                leaf.get("last_step")))
        for run, (_, lo, _) in zip(t.runs, t.segments):
            used.add(run["uid"])
            out.append(SidebarEntry(run["uid"], f"↳ {run['run_id']} @{lo or 0:,}", "segment",
                                    liveness(run["state"], run["heartbeat_at"], now), run.get("last_step")))
    for r in rungs.rungs():
        if r["rung"] == "hero":
            continue
        for run in find_rung_runs(con, r["rung"]):
            if run["uid"] in used:
                continue
            used.add(run["uid"])
            kind = "repro" if run["source"] == "repro" else "rung"
            out.append(SidebarEntry(run["uid"], f"{r['rung']} {r['name']}" + (" repro" if kind == "repro" else ""), kind,
                                    liveness(run["state"], run["heartbeat_at"], now), run.get("last_step")))
    for run in list_runs(con):
        if run["uid"] in used:
            continue
        kind = run["source"] if run["source"] in ("local", "repro") else "run"
        out.append(SidebarEntry(run["uid"], run["run_id"], kind, liveness(run["state"], run["heartbeat_at"], now),
                                run.get("last_step")))
    return out


# --- formatting ------------------------------------------------------------------------------

def human(x: float | None) -> str:
    if x is None or not math.isfinite(x):
        return "—"
    for unit, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= scale:
            return f"{x / scale:.2f}{unit}"
    return f"{x:.3g}"


def sci(x: float) -> str:
    """2.7e24 style: compact scientific notation."""
    mant, exp = f"{x:.2e}".split("e")
    return f"{mant.rstrip('0').rstrip('.')}e{int(exp)}"


def duration(seconds: float | None) -> str:
    if seconds is None or not math.isfinite(seconds):
        return "—"
    s = int(seconds)
    d, s = divmod(s, 86400)
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    if d:
        return f"{d}d {h}h"
    if h:
        return f"{h}h {m:02d}m"
    return f"{m}m {s:02d}s"


# --- painting (duck-typed: any plotext figure, the TUI's `PlotextPlot.plt` or plotext's own) ---

RAW_COLOR = (90, 90, 110)
LINE_COLOR = (80, 170, 255)
OVERLAY_COLORS = ((230, 160, 60), (160, 110, 230), (110, 200, 140), (220, 90, 150), (200, 200, 80))


def paint(fig, panel: PanelData, *, width: int, height: int, logy: bool = False,
          cursor_step: float | None = None, title: str | None = None, axis: Axis | None = None,
          color: bool = True) -> None:
    """Draw one panel on a plotext figure: faint raw envelope, smoothed line, markers, cursor."""
    fig.clear_figure()
    fig.plotsize(max(width, 10), max(height, 4))
    fig.title(title or panel.key)
    c = (lambda rgb: rgb) if color else (lambda rgb: None)
    kw = lambda rgb: {"color": c(rgb)} if color else {}  # noqa: E731
    ok = np.isfinite(panel.vmin) & np.isfinite(panel.vmax) if len(panel) else np.zeros(0, bool)
    if logy:
        ok &= (panel.vmin > 0)
    x = panel.x[ok].tolist()
    if panel.band is not None and len(panel.band.x):
        fig.plot(panel.band.x.tolist(), panel.band.lo.tolist(), marker="dot", **kw((120, 120, 60)))
        fig.plot(panel.band.x.tolist(), panel.band.hi.tolist(), marker="dot", label=panel.band.label, **kw((120, 120, 60)))
    if x:
        fig.plot(x, panel.vmax[ok].tolist(), marker="braille", **kw(RAW_COLOR))
        fig.plot(x, panel.vmin[ok].tolist(), marker="braille", **kw(RAW_COLOR))
        line_ok = ok & np.isfinite(panel.line)
        if logy:
            line_ok &= panel.line > 0
        fig.plot(panel.x[line_ok].tolist(), panel.line[line_ok].tolist(), marker="braille", **kw(LINE_COLOR))
    for i, ov in enumerate(panel.overlays):
        good = np.isfinite(ov.y) & ((ov.y > 0) if logy else True)
        if good.any():
            fig.plot(ov.x[good].tolist(), ov.y[good].tolist(), marker="braille", label=ov.name,
                     **kw(OVERLAY_COLORS[i % len(OVERLAY_COLORS)]))
    ax = axis or Axis("step", panel.axis_label)
    anomalies = [m for m in panel.markers if m.kind == "anomaly"]
    if anomalies and x:
        ys = []
        for m in anomalies:
            v = panel.value_at(m.step)
            ys.append(v[2] if v else math.nan)
        pts = [(float(ax.x([m.step])[0]), y) for m, y in zip(anomalies, ys) if math.isfinite(y) and (y > 0 or not logy)]
        if pts:
            fig.scatter([p[0] for p in pts], [p[1] for p in pts], marker="x", **kw((255, 80, 80)))
    for m in panel.markers:
        if m.kind == "event":
            fig.vline(float(ax.x([m.step])[0]), **kw((200, 180, 60)))
    if cursor_step is not None and x:
        fig.vline(float(ax.x([cursor_step])[0]), **kw((240, 240, 240)))
    if logy:
        fig.yscale("log")
    if x:
        lo_x, hi_x = float(min(x)), float(max(x))
        ticks = nice_ticks(lo_x, hi_x, max(3, width // 11))
        if ticks:
            fig.xticks(ticks, [tick_label(t, ax.mode) for t in ticks])
    fig.xlabel(panel.axis_label)


def nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    """Round tick positions (1, 2, 5 × 10^k apart) inside [lo, hi]."""
    span = hi - lo
    if not (math.isfinite(span) and span > 0):
        return []
    raw = span / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if raw <= m * mag)
    first = math.ceil(lo / step) * step
    return [first + i * step for i in range(int((hi - first) / step + 1e-9) + 1)]


def tick_label(v: float, mode: str) -> str:
    if mode == "fraction":
        return f"{v:.3g}"
    if mode == "wall":
        return f"{v:g}h"
    for unit, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(v) >= scale:
            return f"{v / scale:.3g}{unit}"
    return f"{v:.4g}"


# --- explain panel text ----------------------------------------------------------------------

def explain_text(con: duckdb.DuckDBPyConnection, target_ref: str, step: int, nearby: Sequence[Marker] = ()) -> str:
    """Plain text for the explain panel: `analysis.explain.explain` when present, plus markers near the step."""
    from marinctl.text import inert

    lines: list[str] = []
    try:
        from marinctl.analysis.explain import explain
    except ImportError:
        explain = None
    if explain is None:
        lines.append("explain is not available in this build (marinctl.analysis.explain is missing).")
    else:
        try:
            doc = explain(con, target_ref, step)
        except Exception as exc:  # noqa: BLE001 — shown in the panel, never a crash
            lines.append(f"explain failed: {inert(str(exc), single_line=True)}")
            doc = None
        if isinstance(doc, str):
            lines.append(inert(doc))
        elif isinstance(doc, dict):
            findings = doc.get("findings") or []
            if not findings:
                lines.append("nothing unusual at this step.")
            for i, f in enumerate(findings, 1):
                conf = f.get("confidence")
                lines.append(f"{i}. {inert(f.get('metric'), single_line=True)} {inert(f.get('kind'), single_line=True)}"
                             f" at step {f.get('step')}: {inert(f.get('cause_class'), single_line=True)}"
                             + (f" (confidence {conf:.2f})" if isinstance(conf, (int, float)) else ""))
                if f.get("explanation"):
                    lines.append("   " + inert(f["explanation"]))
                for a in (f.get("attribution") or [])[:5]:
                    lines.append(f"   - {inert(a.get('name'), single_line=True)}: {a.get('share', 0):.0%}")
            ctx = doc.get("context") or {}
            if ctx:
                lines.append("")
                lines.append(f"lr phase: {inert(ctx.get('lr_phase'), single_line=True)}   data phase: "
                             f"{inert(ctx.get('data_phase'), single_line=True)}")
                for ev in (ctx.get("events") or [])[:8]:
                    lines.append(f"  event @{ev.get('step')}: {inert(ev.get('title'), single_line=True)}")
    if nearby:
        lines.append("")
        lines.append("markers near this step:")
        for m in nearby:
            lines.append(f"  {m.kind} @{m.step:,}: {inert(m.label, single_line=True)}")
    return "\n".join(lines)


# --- the whole view ------------------------------------------------------------------------

MAX_PANELS = 16


@dataclass(frozen=True)
class ViewParams:
    """What the user asked to see: an immutable snapshot handed to a worker."""

    ref: str | None = None
    pattern: str | None = None
    lo: int | None = None           # zoom window in steps; None: the full range, following the live end
    hi: int | None = None
    xmode: str = "step"
    smoothing: str = "ema"
    overlays: bool = False
    buckets: int = 200
    all_keys: tuple[str, ...] | None = None


@dataclass
class View:
    params: ViewParams
    ref: str | None = None
    target_name: str | None = None      # what explain/events accept for the shown run ('hero', a run id)
    header: HeaderStats | None = None
    panels: list[PanelData] = field(default_factory=list)
    axis: Axis | None = None
    lo: int = 0
    hi: int = 0
    full_lo: int = 0
    full_hi: int = 0
    markers: list[Marker] = field(default_factory=list)
    sidebar: list[SidebarEntry] = field(default_factory=list)
    cache_time: datetime | None = None
    error: str | None = None
    matched: int = 0                # keys the filter matched (panels may be capped)


def build_view(store, params: ViewParams) -> View:
    """Read everything one frame needs in one short connection (runs in a worker thread)."""
    from marinctl.errors import UserError
    from marinctl.store.lineage import resolve_target

    view = View(params, ref=params.ref)
    with store.connect() as con:
        view.sidebar = sidebar_entries(con)
        row = con.execute("SELECT max(synced_at) FROM runs").fetchall()
        view.cache_time = row[0][0] if row else None
        try:
            target = resolve_target(con, params.ref, stitched=True)
        except UserError as exc:
            view.error = exc.message + (f" — {exc.hint}" if exc.hint else "")
            return view
        keys = panel_keys(con, target, params.pattern, params.all_keys)
        view.matched = len(keys)
        keys = keys[:MAX_PANELS]
        view.target_name = target.name
        full_lo, full_hi = key_step_range(con, target, keys or list(DEFAULT_PANELS))
        view.header = header_stats(con, target, last_step=full_hi)
        if full_lo is None and not keys and params.pattern:
            return view
        if full_lo is None:
            view.error = f"{target.name} has no history stored yet"
            return view
        view.full_lo, view.full_hi = int(full_lo), int(full_hi)
        lo = view.full_lo if params.lo is None else max(view.full_lo, params.lo)
        hi = view.full_hi if params.hi is None else min(view.full_hi, params.hi)
        if hi <= lo:
            lo, hi = view.full_lo, view.full_hi
        view.lo, view.hi = lo, hi
        sched = schedule_of(target)
        axis = axis_for(con, target, params.xmode, lo, hi, sched)
        view.axis = axis
        view.markers = markers_for(con, target, lo, hi)
        envs = envelopes(con, target, keys, lo, hi, params.buckets)
        for key in keys:
            panel = load_panel(con, target, key, lo, hi, buckets=params.buckets, smoothing=params.smoothing,
                               axis=axis, markers=view.markers, env=envs.get(key))
            if params.overlays and axis.mode == "fraction":
                panel.overlays = rung_overlays(con, key, params.buckets, exclude_uid=target.leaf["uid"])
            if params.overlays and target.name == "hero":
                panel.band = predicted_band(con, key, axis)
            view.panels.append(panel)
    return view
