"""The history a fake W&B server serves for SYNTHETIC runs: fork inheritance, rows, parquet.

W&B serves a fork child's history as the parent's rows up to the fork step followed by the
child's own rows, so `HistoryView` stitches a run's served history from segments
(parent ≤ fork_step, child > fork_step). Rows are built per step window, vectorised over
keys, and cached by (run, version of every segment run, window) so repeated scans are cheap.
Non-finite values are sent as the strings "NaN"/"Infinity"/"-Infinity" (JSON has no NaN).
"""

from __future__ import annotations

import json
import math
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .synth import Series, SynthRun, union_steps

Segment = tuple[SynthRun, int | None, int | None]  # run, lo inclusive, hi exclusive


def _json_value(v: float) -> float | str:
    if math.isfinite(v):
        return v
    return "NaN" if math.isnan(v) else ("Infinity" if v > 0 else "-Infinity")


class HistoryView:
    """Served history of runs by id; `inherit` serves fork parents' rows as W&B does.

    `fork_from_first_logged` (the default, as W&B serves forks): a fork child's own rows are
    served from its first logged step when that is at or before `fork_step` (a child that logs
    the fork step itself, as in W&B's forking guide), and its parent's rows only below it.
    Turned off, the child's own rows start at `fork_step + 1` whatever it logged at or below
    the fork step (how marinctl once assumed forks read).
    """

    def __init__(self, runs: dict[str, SynthRun], *, inherit: bool = True, cache_windows: int = 256,
                 fork_from_first_logged: bool = True):
        self.runs = runs
        self.inherit = inherit
        self.fork_from_first_logged = fork_from_first_logged
        self._cache: OrderedDict[tuple, list[str]] = OrderedDict()
        self._cache_size = cache_windows
        self._lock = threading.Lock()
        self._facts: dict[tuple, Any] = {}

    # --- structure ---------------------------------------------------------------------
    def own_from(self, run: SynthRun) -> int | None:
        """First step of `run`'s own rows in its served history (None: from the start)."""
        if run.fork_step is None:
            return None
        lo = run.fork_step + 1
        if self.fork_from_first_logged:
            own = run.steps()
            if len(own):
                lo = min(lo, int(own[0]))
        return lo

    def segments(self, run: SynthRun) -> list[Segment]:
        own: Segment = (run, self.own_from(run), None)
        parent = self.runs.get(run.fork_parent) if (self.inherit and run.fork_parent) else None
        if parent is None or run.fork_step is None:
            return [own]
        out = []
        for seg_run, lo, hi in self.segments(parent):
            cap = own[1]
            new_hi = cap if hi is None else min(hi, cap)
            if lo is None or lo < new_hi:
                out.append((seg_run, lo, new_hi))
        return out + [own]

    def version(self, run: SynthRun) -> tuple:
        return tuple((r.run_id, r.version) for r, _, _ in self.segments(run))

    def window(self, run: SynthRun, lo: int | None = None, hi: int | None = None) -> dict[str, Series]:
        """Each served key's (steps, values) in [lo, hi), merged across fork segments."""
        parts: dict[str, list[Series]] = {}
        for seg_run, slo, shi in self.segments(run):
            a = max(x for x in (lo, slo, -(2**62)) if x is not None)
            b = min(x for x in (hi, shi, 2**62) if x is not None)
            if a >= b:
                continue
            for key, ser in seg_run.window(a, b).items():
                parts.setdefault(key, []).append(ser)
        merged = {}
        joined: dict[tuple, np.ndarray] = {}  # keep shared step arrays shared after concatenation
        for key, ps in parts.items():
            if len(ps) == 1:
                merged[key] = ps[0]
                continue
            ids = tuple(id(p[0]) for p in ps)
            if ids not in joined:
                joined[ids] = np.concatenate([p[0] for p in ps])
            merged[key] = (joined[ids], np.concatenate([p[1] for p in ps]))
        return merged

    def steps(self, run: SynthRun, lo: int | None = None, hi: int | None = None) -> np.ndarray:
        return union_steps([s for s, _ in self.window(run, lo, hi).values()])

    def last_step(self, run: SynthRun) -> int:
        ends = []
        for seg_run, lo, hi in self.segments(run):
            st = seg_run.steps()
            if lo is not None:
                st = st[st >= lo]
            if hi is not None:
                st = st[st < hi]
            if len(st):
                ends.append(int(st[-1]))
        return max(ends) if ends else -1

    def line_count(self, run: SynthRun) -> int:
        return self._memo("lines", run, lambda: len(self.steps(run)))

    def _memo(self, what: str, run: SynthRun, compute):
        """Whole-run facts (line count, historyKeys) cached per data version."""
        ck = (what, run.run_id, self.version(run))
        hit = self._facts.get(ck)
        if hit is None:
            hit = self._facts[ck] = compute()
        return hit

    # --- rows --------------------------------------------------------------------------
    def rows(self, run: SynthRun, lo: int | None = None, hi: int | None = None,
             keys: list[str] | None = None) -> list[dict[str, Any]]:
        """Row dicts (`_step` first) for served steps in [lo, hi); only `keys` when given."""
        w = self.window(run, lo, hi)
        all_steps = union_steps([s for s, _ in w.values()])
        if not len(all_steps):
            return []
        if keys is not None:
            w = {k: v for k, v in w.items() if k in keys}
        out = [{"_step": s} for s in all_steps.tolist()]
        for key, (st, vals) in w.items():
            pos = np.searchsorted(all_steps, st).tolist()
            if np.all(np.isfinite(vals)):
                for i, v in zip(pos, vals.tolist()):
                    out[i][key] = v
            else:
                for i, v in zip(pos, vals.tolist()):
                    out[i][key] = _json_value(v)
        return out

    def json_rows(self, run: SynthRun, lo: int, hi: int) -> list[str]:
        """Full rows as JSON strings for [lo, hi), cached per window and data version."""
        ck = (run.run_id, self.version(run), lo, hi)
        with self._lock:
            hit = self._cache.get(ck)
            if hit is not None:
                self._cache.move_to_end(ck)
                return hit
        rows = [json.dumps(r, separators=(",", ":")) for r in self.rows(run, lo, hi)]
        with self._lock:
            self._cache[ck] = rows
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return rows

    def sampled(self, run: SynthRun, spec: dict[str, Any]) -> list[dict[str, Any]]:
        """`sampledHistory` for one spec: rows holding every requested key, only those keys.

        `minStep` is inclusive; `maxStep` is inclusive too (wandb-core livedata.go comment).
        """
        keys = [k for k in spec.get("keys", []) if k != "_step"]
        lo = spec.get("minStep")
        hi = spec.get("maxStep")
        hi = None if hi is None else int(hi) + 1
        rows = self.rows(run, None if lo is None else int(lo), hi, keys=keys)
        rows = [r for r in rows if all(k in r for k in keys)]
        if "_step" not in spec.get("keys", ["_step"]):
            for r in rows:
                r.pop("_step", None)
        return sample_evenly(rows, int(spec.get("samples", 500)))

    def keys_info(self, run: SynthRun) -> dict[str, Any]:
        """`historyKeys`: lastStep plus per-key type counts and last value."""
        return self._memo("keys", run, lambda: self._keys_info(run))

    def _keys_info(self, run: SynthRun) -> dict[str, Any]:
        keys = {}
        for key, (st, vals) in self.window(run).items():
            keys[key] = {"typeCounts": [{"type": "number", "count": int(len(st))}],
                         "monotonic": False, "previousValue": _json_value(float(vals[-1]))}
        return {"lastStep": self.last_step(run), "keys": keys}

    # --- parquet export ----------------------------------------------------------------
    def write_parquet(self, run: SynthRun, until: int, folder: Path, steps_per_file: int) -> list[Path]:
        """Export served steps < `until` as parquet partitions: `_step` int64, every key float64 (null = not logged)."""
        folder.mkdir(parents=True, exist_ok=True)
        keys = sorted(self.window(run).keys())
        files = []
        lo, part = 0, 0
        served = self.steps(run, None, until)
        if not len(served):
            return []
        lo = int(served[0])
        while lo < until:
            hi = min(lo + steps_per_file, until)
            w = self.window(run, lo, hi)
            st = union_steps([s for s, _ in w.values()])
            if len(st):
                cols = {"_step": pa.array(st, pa.int64())}
                for key in keys:
                    vals = np.full(len(st), np.nan)
                    mask = np.ones(len(st), bool)
                    if key in w:
                        ks, kv = w[key]
                        pos = np.searchsorted(st, ks)
                        vals[pos] = kv
                        mask[pos] = False
                    cols[key] = pa.array(vals, pa.float64(), mask=mask)
                path = folder / f"{run.run_id}-{part:04d}.runhistory.parquet"
                pq.write_table(pa.table(cols), path)
                files.append(path)
                part += 1
            lo = hi
        return files


def sample_evenly(rows: list, n: int) -> list:
    """At most n rows, evenly spaced, first and last kept (deterministic, unlike W&B)."""
    if n <= 0 or len(rows) <= n:
        return rows
    if n == 1:
        return [rows[-1]]
    idx = np.unique(np.round(np.linspace(0, len(rows) - 1, n)).astype(int))
    return [rows[i] for i in idx]


# --- system metrics: the `events` stream ------------------------------------------------------

SYSTEM_EVERY = 15.0   # seconds between samples: the SDK's default `x_stats_sampling_interval`
SYSTEM_KEYS = {       # key as the server names it -> (level, swing): what a training node reports
    "system.cpu": (35.0, 20.0), "system.memory_percent": (41.0, 3.0), "system.gpu.0.gpu": (96.0, 4.0),
    "system.gpu.0.memoryAllocated": (78.0, 2.0), "system.gpu.0.temp": (66.0, 5.0),
    "system.disk./.usagePercent": (43.6, 0.1), "system.network.sent": (2.0e6, 1.0e6),
    "system.proc.memory.rssMB": (5120.0, 200.0),
}


def system_events(run: SynthRun, samples: int | None) -> list[str]:
    """The run's `events(samples:)` as W&B serves them: JSON strings of `system.*` keys plus
    `_timestamp`, `_runtime` and `_wandb`, one sample every SYSTEM_EVERY seconds over the
    run's logged time, sampled down to `samples` (500 by default). SYNTHETIC, deterministic."""
    ts = run.series.get("_timestamp")
    if ts is None or not len(ts[1]):
        return []
    t0, t1 = float(ts[1][0]), float(ts[1][-1])
    created = run.created_at.timestamp()
    chosen = sample_evenly(list(range(int((t1 - t0) // SYSTEM_EVERY) + 1)), 500 if samples is None else samples)
    rows = []
    for i in chosen:
        t = t0 + i * SYSTEM_EVERY
        row: dict[str, Any] = {"_wandb": True, "_timestamp": t, "_runtime": round(t - created, 3)}
        for n, (key, (level, swing)) in enumerate(SYSTEM_KEYS.items()):
            row[key] = round(level + swing * math.sin(i / 7.0 + n), 4)
        rows.append(json.dumps(row))
    return rows
