"""What else was true at a step: LR phase, data phase, evals, checkpoints, lineage, events,
and the other metrics that moved — the context a person needs before blaming anything.

Facts used (marin.md): the hero and the ladder warm up for 1% of their steps then decay
linearly (§1.4, §2.1; read from the run config when it says otherwise); the hero's data mix
switches at steps 108,000 and 312,192 of 390,251 and rungs at the same fractions (§6, via
analysis/mix.py); the hero evaluates every 3,000 steps and keeps a permanent checkpoint every
6,000 (§1.5); rungs evaluate every 5% and checkpoint only at the end (§2.1).
"""

from __future__ import annotations

import json
import re
from typing import Any

import duckdb

from marinctl.store import metrics as M

HERO_TOTAL = 390_251
HERO_CKPT_EVERY = 6_000
DEFAULT_WARMUP = 0.01
MOVED_Z = 8.0
MOVED_WINDOW = 200
_COUNTERS = re.compile(r"^(_|global_step$|run_progress$|throughput/total_|optim/|mixture/)")


def config_of(run: dict[str, Any]) -> dict[str, Any]:
    cfg = run.get("config") or {}
    if isinstance(cfg, str):
        try:
            cfg = json.loads(cfg)
        except json.JSONDecodeError:
            cfg = {}
    return cfg if isinstance(cfg, dict) else {}


def _find(cfg: Any, names: tuple[str, ...]) -> Any:
    if isinstance(cfg, dict):
        for k, v in cfg.items():
            if k in names and isinstance(v, (int, float)) and not isinstance(v, bool):
                return v
        for v in cfg.values():
            found = _find(v, names)
            if found is not None:
                return found
    return None


def _rung_for(run: dict[str, Any]) -> dict[str, Any] | None:
    from marinctl import rungs

    text = f"{run.get('run_id') or ''} {run.get('name') or ''}"
    for r in rungs.rungs():
        if r["rung"] != "hero" and re.search(rf"(?<!\d){r['name']}(?!\d)", text):
            return r
    return None


def total_steps(run: dict[str, Any]) -> tuple[int | None, str]:
    """The run's planned steps and where that came from."""
    found = _find(config_of(run), ("num_train_steps", "total_steps", "num_steps"))
    if found:
        return int(found), "config"
    rung = _rung_for(run)
    if rung:
        return int(rung["steps"]), f"published {rung['name']} rung"
    if (run.get("run_group") or "").startswith("moe-hero-ep") and "ladder" not in (run.get("run_group") or "") or (
            run.get("run_id") or "").startswith("hero-"):
        return HERO_TOTAL, "published hero schedule"
    return None, "unknown"


def warmup_end_step(run: dict[str, Any]) -> int:
    """First step after LR warm-up (config `warmup`: a fraction < 1 or a step count; else 1%)."""
    total, _ = total_steps(run)
    warm = _find(config_of(run), ("warmup", "warmup_fraction", "warmup_steps", "lr_warmup"))
    if warm is not None and warm >= 1:
        return int(warm)
    frac = float(warm) if warm is not None else DEFAULT_WARMUP
    return int(round(frac * total)) if total else 0


def lr_phase(con: duckdb.DuckDBPyConnection, target, step: int) -> dict[str, Any]:
    run = target.run_at(step)
    total, source = total_steps(run)
    wend = warmup_end_step(run)
    lr = M.series(con, target.segments, "optim/learning_rate", step, step + 1)[1]
    if total and step >= total:
        phase = "done"
    elif step < wend:
        phase = "warmup"
    else:
        phase = "decay"
    return {"phase": phase, "warmup_end_step": wend, "total_steps": total, "schedule_from": source,
            "learning_rate": float(lr[0]) if len(lr) else None,
            "fraction": (step / total) if total else None}


def data_phase(run: dict[str, Any], step: int) -> dict[str, Any]:
    from marinctl.analysis import mix

    total, _ = total_steps(run)
    sched = mix.schedule(total if total and total != HERO_TOTAL else None)
    for i, (name, start, end) in enumerate(sched):
        if step >= start and (end is None or step <= end):
            nxt = sched[i + 1][1] if i + 1 < len(sched) else None
            return {"name": name, "number": i + 1, "start_step": start, "end_step": end, "next_switch": nxt,
                    "steps_since_switch": step - start}
    return {"name": None}


def eval_steps(con: duckdb.DuckDBPyConnection, target, step: int, window: int) -> list[int]:
    ids = [r[0] for r in con.execute("SELECT key_id FROM metric_keys WHERE starts_with(key, 'eval/')").fetchall()]
    if not ids:
        return []
    where, params = M.segment_filter(target.segments)
    rows = con.execute(
        f"SELECT DISTINCT step FROM metrics WHERE key_id IN ({','.join('?' * len(ids))}) AND step BETWEEN ? AND ? AND {where} ORDER BY step",
        [*ids, step - window, step + window, *params]).fetchall()
    return [int(r[0]) for r in rows]


def checkpoint_steps(run: dict[str, Any], step: int, window: int) -> list[int]:
    total, _ = total_steps(run)
    if total == HERO_TOTAL:
        lo = (max(step - window, 0) + HERO_CKPT_EVERY - 1) // HERO_CKPT_EVERY * HERO_CKPT_EVERY
        return [s for s in range(lo, step + window + 1, HERO_CKPT_EVERY) if s > 0]
    if total and abs(total - 1 - step) <= window:
        return [total - 1]
    return []


def lineage_points(target, step: int, window: int) -> list[dict[str, Any]]:
    out = []
    for run in target.runs:
        fs = run.get("fork_step")
        if fs is not None and abs(fs + 1 - step) <= window:
            out.append({"kind": "fork", "step": fs + 1, "run": run["run_id"], "parent": run.get("fork_parent"),
                        "fork_step": fs})
    return out


def events_near(con: duckdb.DuckDBPyConnection, target, step: int, window: int) -> list[dict[str, Any]]:
    from marinctl.analysis.timeline import query_events
    from marinctl.errors import UserError

    ref = "hero" if target.name == "hero" else target.leaf["run_id"]
    try:
        items = query_events(con, ref, step, window)
    except UserError:
        return []
    return [{k: e.get(k) for k in ("time", "kind", "title", "url", "run", "step", "source", "author")} for e in items]


def moved_metrics(con: duckdb.DuckDBPyConnection, target, step: int, exclude: set[str] | None = None,
                  limit: int = 8) -> list[dict[str, Any]]:
    """Keys whose value at `step` (or their last logged step within 9 before) sits far from the
    median of their previous points (robust z over up to `MOVED_WINDOW` steps)."""
    where, params = M.segment_filter(target.segments)
    rows = con.execute(f"""
        WITH d AS (SELECT key_id, step, value FROM metrics WHERE step BETWEEN ? AND ? AND {where} AND isfinite(value)),
        cur AS (SELECT key_id, max(step) AS s, arg_max(value, step) AS v FROM d WHERE step >= ? GROUP BY key_id),
        base AS (SELECT d.key_id, median(d.value) AS med, mad(d.value) AS dev, count(*) AS n
                 FROM d JOIN cur USING (key_id) WHERE d.step < cur.s GROUP BY d.key_id)
        SELECT k.key, cur.s, cur.v, base.med, base.n,
               0.6745 * (cur.v - base.med) / greatest(base.dev, abs(base.med) * 1e-6, 1e-12) AS z
        FROM cur JOIN base USING (key_id) JOIN metric_keys k USING (key_id)
        WHERE base.n >= 10
        ORDER BY abs(z) DESC
    """, [step - MOVED_WINDOW, step, *params, step - 9]).fetchall()
    out = []
    exclude = exclude or set()
    for key, s, v, med, n, z in rows:
        if _COUNTERS.match(key) or key in exclude or abs(z) < MOVED_Z:
            continue
        out.append({"metric": key, "step": int(s), "value": v, "baseline": med, "z": z})
        if len(out) >= limit:
            break
    return out


def context_at(con: duckdb.DuckDBPyConnection, target, step: int, *, window: int = 1000,
               exclude: set[str] | None = None) -> dict[str, Any]:
    """The contract's `context` block (lr_phase, data_phase, events) plus the rest."""
    run = target.run_at(step)
    lr = lr_phase(con, target, step)
    dp = data_phase(run, step)
    return {
        "lr_phase": lr["phase"], "lr": lr,
        "data_phase": dp.get("name"), "data": dp,
        "events": events_near(con, target, step, window),
        "event_window": window,
        "evals": eval_steps(con, target, step, 50),
        "checkpoints": checkpoint_steps(run, step, window),
        "lineage": lineage_points(target, step, window),
        "run_at_step": run["run_id"],
        "moved": moved_metrics(con, target, step, exclude),
    }
